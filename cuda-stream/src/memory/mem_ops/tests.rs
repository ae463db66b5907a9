//! The operations' host-side rules, without a GPU.

use super::WaitValue;
use super::raw::aligned;
use crate::ffi::driver;
use crate::ffi::error::Error;

#[test]
fn conditions_as_cuda_states_them() {
    let geq = WaitValue::greater_or_equal(10u32);
    assert!(geq.is_met_by(10) && geq.is_met_by(11) && !geq.is_met_by(9));
    // Cyclic: a counter that wrapped is ahead; one 2^31 or more ahead reads as behind.
    assert!(WaitValue::greater_or_equal(u32::MAX).is_met_by(0));
    assert!(!WaitValue::greater_or_equal(0u32).is_met_by(1 << 31));
    assert!(
        WaitValue::greater_or_equal(u64::MAX).is_met_by(0) && !WaitValue::greater_or_equal(0u64).is_met_by(1 << 63)
    );
    assert!(WaitValue::equal(7u64).is_met_by(7) && !WaitValue::equal(7u64).is_met_by(8));
    assert!(WaitValue::and(0b100u32).is_met_by(0b110) && !WaitValue::and(0b100u32).is_met_by(0b011));
    // NOR: some bit clear in both; within the word's width only.
    assert!(WaitValue::nor(0u32).is_met_by(0) && !WaitValue::nor(u32::MAX).is_met_by(0));
    assert!(!WaitValue::nor(0xFFFF_0000u32).is_met_by(0x0000_FFFF));
    assert!(WaitValue::nor(0xFFFF_0000u64).is_met_by(0x0000_FFFF));
    assert_eq!(WaitValue::equal(1u32).with_flush().flags(), driver::WAIT_VALUE_EQ | driver::WAIT_VALUE_FLUSH);
}

#[test]
fn raw_addresses_are_checked_for_null_and_alignment() {
    assert_eq!(aligned::<u32>(std::ptr::null()), Err(Error::MisalignedWord { address: 0, align: 4 }));
    assert_eq!(aligned::<u64>(0x1004 as *const u64), Err(Error::MisalignedWord { address: 0x1004, align: 8 }));
    assert_eq!(aligned::<u32>(0x1004 as *const u32), Ok(0x1004));
}
