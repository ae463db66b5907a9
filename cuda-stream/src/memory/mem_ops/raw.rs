//! Operations on memory this crate does not manage: `StreamRef::wait_value_raw` and
//! `write_value_raw`, and the driver calls every operation ends in.

use super::operation::WaitValue;
use super::word::Word;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result};
use crate::stream::StreamRef;
use crate::sys;

impl StreamRef {
    /// Makes later work on this stream wait until the word at `address` meets `wait`
    /// ([`cuStreamWaitValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)),
    /// for memory this crate does not manage (prefer [`MappedWords`](super::MappedWords) and [`DeviceWords`](super::DeviceWords)).
    ///
    /// # Safety
    /// `address` is the device address of a word of device memory from `cudaMalloc` (not the
    /// stream-ordered allocator, which CUDA refuses) or of host memory mapped into this
    /// stream's device's address space (`cudaHostAlloc` with `cudaHostAllocMapped`, or
    /// `cudaHostRegister` with `cudaHostRegisterMapped`), and stays allocated until the wait
    /// has completed, or, if this stream is being captured, for as long as any graph made
    /// from the capture may run it. Beware: freeing such memory (`cudaFree`, `cudaFreeHost`)
    /// blocks while any stream of the device waits.
    ///
    /// # Errors
    /// [`Error::MisalignedWord`] for a null address or one not aligned to the word's size;
    /// refusals as for any enqueue; CUDA's errors, named `cuStreamWaitValue32`/`64`.
    pub unsafe fn wait_value_raw<W: Word>(&self, address: *const W, wait: WaitValue<W>) -> Result<()> {
        let address = aligned(address)?;
        let current = self.enter()?;
        let raw = if current.is_some() { self.unambiguous_raw() } else { self.as_raw() };
        // SAFETY: the caller's contract; an aligned address; a live handle, a special one with
        // its device current.
        unsafe { wait_value_on(raw, address, wait) }
    }

    /// Writes `value` to the word at `address` on this stream, after a memory fence
    /// ([`cuStreamWriteValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)),
    /// for memory this crate does not manage (prefer [`MappedWords`](super::MappedWords) and [`DeviceWords`](super::DeviceWords)).
    ///
    /// # Safety
    /// As [`StreamRef::wait_value_raw`], until the write has completed; and the GPU may write
    /// the word at any time until then: host code reads or writes it only atomically.
    ///
    /// # Errors
    /// As [`StreamRef::wait_value_raw`], named `cuStreamWriteValue32`/`64`.
    pub unsafe fn write_value_raw<W: Word>(&self, address: *mut W, value: W) -> Result<()> {
        let address = aligned(address.cast_const())?;
        let current = self.enter()?;
        let raw = if current.is_some() { self.unambiguous_raw() } else { self.as_raw() };
        // SAFETY: as in `wait_value_raw`.
        unsafe { write_value_on(raw, address, value) }
    }
}

/// `address` as the driver takes it, once checked: not null, aligned to `W`.
pub(super) fn aligned<W: Word>(address: *const W) -> Result<u64> {
    let at = address as usize;
    if at == 0 || at % align_of::<W>() != 0 {
        return Err(Error::MisalignedWord { address: at, align: align_of::<W>() });
    }
    Ok(at as u64)
}

/// `cuStreamWaitValue32`/`64` on a handle the driver takes.
///
/// # Safety
/// As [`driver::stream_wait_value32`]: a live handle (a special one with its device current),
/// an aligned word that outlives the wait.
pub(super) unsafe fn wait_value_on<W: Word>(raw: sys::cudaStream_t, address: u64, wait: WaitValue<W>) -> Result<()> {
    let (value, flags) = (wait.value.to_bits(), wait.flags());
    // SAFETY: the caller's contract.
    unsafe {
        if W::WIDE {
            driver::stream_wait_value64(raw, address, value, flags)
        } else {
            driver::stream_wait_value32(raw, address, value as u32, flags)
        }
    }
}

/// `cuStreamWriteValue32`/`64` on a handle the driver takes.
///
/// # Safety
/// As [`wait_value_on`], until the write has completed.
pub(super) unsafe fn write_value_on<W: Word>(raw: sys::cudaStream_t, address: u64, value: W) -> Result<()> {
    let value = value.to_bits();
    // SAFETY: the caller's contract.
    unsafe {
        if W::WIDE {
            driver::stream_write_value64(raw, address, value)
        } else {
            driver::stream_write_value32(raw, address, value as u32)
        }
    }
}
