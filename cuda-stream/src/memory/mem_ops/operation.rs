//! What the operations do: a wait's condition and value, a batch's operations, a device's support.

use super::word::Word;
use crate::device::Device;
use crate::ffi::driver;
use crate::ffi::error::Result;
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use std::ffi::c_uint;
use std::hash::Hash;

/// The condition of a wait (`CUstreamWaitValue_flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Condition {
    /// `CU_STREAM_WAIT_VALUE_GEQ`: `(int32_t)(*addr - value) >= 0` (`int64_t` for 64-bit
    /// words), a *cyclic* greater-or-equal that ignores wraparound: a counter that wrapped past
    /// zero still counts as ahead of a value less than 2³¹ (2⁶³) behind it.
    GreaterOrEqual,
    /// `CU_STREAM_WAIT_VALUE_EQ`: `*addr == value`.
    Equal,
    /// `CU_STREAM_WAIT_VALUE_AND`: `(*addr & value) != 0`, some bit of the mask is set.
    And,
    /// `CU_STREAM_WAIT_VALUE_NOR`: `~(*addr | value) != 0`, some bit is clear in both the
    /// word and the value. Needs [`MemOpSupport::wait_nor`].
    Nor,
}

/// What a stream waits for: a [`Condition`] against a value, optionally followed by a flush
/// of remote writes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaitValue<W> {
    /// The comparison.
    pub condition: Condition,
    /// The value (a mask for [`Condition::And`] and [`Condition::Nor`]).
    pub value: W,
    /// `CU_STREAM_WAIT_VALUE_FLUSH`: after the wait, remote writes that reached the device
    /// before the wait was satisfied are visible to later work. Needs
    /// [`MemOpSupport::flush_remote_writes`] (`cudaErrorNotSupported` otherwise).
    pub flush: bool,
}

impl<W: Word> WaitValue<W> {
    /// Until the word is at least `value`, cyclically ([`Condition::GreaterOrEqual`]).
    pub fn greater_or_equal(value: W) -> WaitValue<W> {
        WaitValue { condition: Condition::GreaterOrEqual, value, flush: false }
    }

    /// Until the word equals `value` ([`Condition::Equal`]).
    pub fn equal(value: W) -> WaitValue<W> {
        WaitValue { condition: Condition::Equal, value, flush: false }
    }

    /// Until the word has a bit of `mask` set ([`Condition::And`]).
    pub fn and(mask: W) -> WaitValue<W> {
        WaitValue { condition: Condition::And, value: mask, flush: false }
    }

    /// Until some bit is clear in both the word and `value` ([`Condition::Nor`]).
    pub fn nor(value: W) -> WaitValue<W> {
        WaitValue { condition: Condition::Nor, value, flush: false }
    }

    /// The same wait, followed by a flush of remote writes (`CU_STREAM_WAIT_VALUE_FLUSH`).
    pub fn with_flush(self) -> WaitValue<W> {
        WaitValue { flush: true, ..self }
    }

    /// Whether a word holding `word` releases this wait: the condition as CUDA states it,
    /// evaluated on the host.
    pub fn is_met_by(&self, word: W) -> bool {
        let (word, value) = (word.to_bits(), self.value.to_bits());
        let bits = if W::WIDE { u64::MAX } else { u64::from(u32::MAX) };
        match self.condition {
            Condition::GreaterOrEqual if W::WIDE => (word.wrapping_sub(value) as i64) >= 0,
            Condition::GreaterOrEqual => ((word as u32).wrapping_sub(value as u32) as i32) >= 0,
            Condition::Equal => word == value,
            Condition::And => word & value != 0,
            Condition::Nor => !(word | value) & bits != 0,
        }
    }

    pub(super) fn flags(&self) -> c_uint {
        let condition = match self.condition {
            Condition::GreaterOrEqual => driver::WAIT_VALUE_GEQ,
            Condition::Equal => driver::WAIT_VALUE_EQ,
            Condition::And => driver::WAIT_VALUE_AND,
            Condition::Nor => driver::WAIT_VALUE_NOR,
        };
        if self.flush { condition | driver::WAIT_VALUE_FLUSH } else { condition }
    }
}

/// The scope of a [`MemOp::Barrier`] (`CUstreamMemoryBarrier_flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BarrierScope {
    /// `CU_STREAM_MEMORY_BARRIER_TYPE_SYS`: system-wide (host and peers see the order).
    System,
    /// `CU_STREAM_MEMORY_BARRIER_TYPE_GPU`: limited to the GPU.
    Device,
}

/// One operation of a batch ([`MappedWords::mem_ops`](super::MappedWords::mem_ops), [`DeviceWords::mem_ops`](super::DeviceWords::mem_ops):
/// `cuStreamBatchMemOp`), on the words of one [`MappedWords`](super::MappedWords) or [`DeviceWords`](super::DeviceWords) by index.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemOp<W> {
    /// Later operations and work wait until word `index` meets `wait`.
    Wait {
        /// Which word.
        index: usize,
        /// The condition.
        wait: WaitValue<W>,
    },
    /// Writes `value` to word `index`, after a memory fence.
    Write {
        /// Which word.
        index: usize,
        /// The value.
        value: W,
    },
    /// A memory barrier (`CU_STREAM_MEM_OP_BARRIER`, a `_v2` operation).
    Barrier(BarrierScope),
    /// `CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES`: what [`WaitValue::with_flush`] does, alone.
    /// Needs [`MemOpSupport::flush_remote_writes`].
    FlushRemoteWrites,
}

/// What a device supports of stream memory operations (`cuDeviceGetAttribute`). Plain waits
/// and writes of 32-bit words need nothing (CUDA 12 and later).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemOpSupport {
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS`: waits and writes of `u64` words.
    pub sixty_four_bit: bool,
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR`: [`Condition::Nor`].
    pub wait_nor: bool,
    /// `CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES`: [`WaitValue::with_flush`] and
    /// [`MemOp::FlushRemoteWrites`] (a platform feature; not on an H100 or H200).
    pub flush_remote_writes: bool,
}

impl MemOpSupport {
    /// What `device` supports
    /// ([`cuDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    ///
    /// # Errors
    /// [`Error::InsideHostFn`](crate::Error::InsideHostFn); CUDA's errors (an invalid device).
    pub fn of(device: Device) -> Result<MemOpSupport> {
        refuse_inside_host_fn()?;
        let attribute = |attribute| driver::device_attribute(device.ordinal(), attribute).map(|value| value != 0);
        Ok(MemOpSupport {
            sixty_four_bit: attribute(driver::ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)?,
            wait_nor: attribute(driver::ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR)?,
            flush_remote_writes: attribute(driver::ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES)?,
        })
    }
}
