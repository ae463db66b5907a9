//! The words that stream memory operations wait on and write: `u32` and `u64`, sealed.

use crate::memory::DeviceCopy;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A word that stream memory operations wait on and write: `u32` or `u64` (64-bit operations
/// need [`MemOpSupport::sixty_four_bit`](super::MemOpSupport::sixty_four_bit)). Sealed.
pub trait Word: DeviceCopy + Eq + Hash + fmt::Debug + sealed::Sealed {
    /// The atomic type of the same size and alignment, through which the host reads and
    /// writes mapped words ([`MappedWords::words`](super::MappedWords::words)).
    type Atomic: Send + Sync + fmt::Debug;
}

pub(super) mod sealed {
    /// What the operations need of a word, in terms the driver takes.
    pub trait Sealed: Copy {
        /// 64 bits wide (else 32).
        const WIDE: bool;
        /// The value, zero-extended.
        fn to_bits(self) -> u64;
    }
}

impl Word for u32 {
    type Atomic = AtomicU32;
}

impl sealed::Sealed for u32 {
    const WIDE: bool = false;
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
}

impl Word for u64 {
    type Atomic = AtomicU64;
}

impl sealed::Sealed for u64 {
    const WIDE: bool = true;
    fn to_bits(self) -> u64 {
        self
    }
}

// The atomic views of the words: the same size and alignment as the words (std documents the
// same size and bit validity; the alignment is checked here).
const _: () = {
    assert!(size_of::<AtomicU32>() == 4 && align_of::<AtomicU32>() == 4);
    assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
};
