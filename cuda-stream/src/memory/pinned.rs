//! [`PinnedBuffer`]: page-locked host memory, which CUDA copies asynchronously, and which
//! waits for those copies before the host may touch or free it.

use super::page_locked::{PageLocked, PageLockedMemory, sealed};
use super::{DeviceCopy, byte_size};
use crate::call::capture_mode::uncapturable_call;
use crate::call::sync_debug;
use crate::device::Device;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

/// `len` elements of `T` in page-locked (pinned) host memory
/// ([`cudaHostAlloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html),
/// portable to every device). Copies between it and a
/// [`DeviceBuffer`](crate::DeviceBuffer) are truly asynchronous; the buffer remembers each
/// copy in flight (an event recorded after it), and [`as_slice`](PinnedBuffer::as_slice)
/// waits for the copies into it, [`as_mut_slice`](PinnedBuffer::as_mut_slice) and the drop for
/// all of them, so the host never reads memory a copy is still writing, nor writes or frees
/// memory a copy still reads. A copy into the pinned buffer waits for every copy of it still in
/// flight on other streams, a copy out of it for the copies into it: copies out run at once on
/// several streams. Copies on one stream wait for nothing (the stream orders them), and their
/// events are recorded again, never created per copy: N copies in flight cost N records.
pub struct PinnedBuffer<T: DeviceCopy> {
    memory: PageLocked<T>,
}

impl<T: DeviceCopy> sealed::Sealed for PinnedBuffer<T> {}
impl<T: DeviceCopy> PageLockedMemory<T> for PinnedBuffer<T> {
    fn page_locked(&mut self) -> &mut PageLocked<T> {
        &mut self.memory
    }
}

impl<T: DeviceCopy> PinnedBuffer<T> {
    /// `len` zeroed elements.
    ///
    /// # Errors
    /// [`Error::Size`](crate::Error::Size) for zero elements or an overflowing byte size;
    /// refused inside a host function; CUDA's errors (`cudaErrorMemoryAllocation`).
    pub fn zeroed(len: usize) -> Result<Self> {
        let buffer = Self::allocate(len)?;
        // SAFETY: `len` elements of fresh memory this buffer owns; all-zero bytes are a `T`.
        unsafe { buffer.memory.as_ptr().cast_mut().write_bytes(0, len) };
        Ok(buffer)
    }

    /// A copy of `values`.
    ///
    /// # Errors
    /// As [`PinnedBuffer::zeroed`].
    pub fn from_slice(values: &[T]) -> Result<Self> {
        let buffer = Self::allocate(values.len())?;
        // SAFETY: `len` elements of fresh memory this buffer owns, not overlapping `values`.
        unsafe { buffer.memory.as_ptr().cast_mut().copy_from_nonoverlapping(values.as_ptr(), values.len()) };
        Ok(buffer)
    }

    fn allocate(len: usize) -> Result<Self> {
        const { assert!(align_of::<T>() <= 4096, "cudaHostAlloc aligns to a page") };
        let bytes = byte_size::<T>(len)?;
        refuse_inside_host_fn()?;
        // The runtime would bind device 0's primary context on a thread without one: make it
        // current for the call, and restore what was there.
        let _current = Device::new(0)?.make_current()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // No capture in progress (this thread's own included) forbids it, or is invalidated.
        uncapturable_call(|| {
            // SAFETY: a valid out-pointer; bytes > 0; a valid flag.
            check(unsafe { sys::cudaHostAlloc(&mut ptr, bytes, sys::cudaHostAllocPortable) }, "cudaHostAlloc")
        })?;
        let ptr = NonNull::new(ptr.cast::<T>()).ok_or(Error::Size("CUDA returned no address"))?;
        Ok(PinnedBuffer { memory: PageLocked::new(ptr, len, "PinnedBuffer") })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Always `false`: a buffer has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The elements, once every copy into them in flight has completed (copies out of them may
    /// go on). A shared borrow, as for a `Vec`: a new copy takes `&mut self`, so none begins
    /// while the slice lives (until [`PinnedBuffer::as_mut_slice`] or a copy forgets them, the
    /// copies' events are asked again at each call).
    ///
    /// # Errors
    /// The errors of [`Event::synchronize`](crate::Event::synchronize) (a fault in the copies' streams).
    pub fn as_slice(&self) -> Result<&[T]> {
        self.memory.as_slice("PinnedBuffer::as_slice")
    }

    /// The elements, writable, once every copy in flight has completed.
    ///
    /// # Errors
    /// As [`PinnedBuffer::as_slice`].
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.memory.as_mut_slice("PinnedBuffer::as_mut_slice")
    }
}

impl<T: DeviceCopy> Drop for PinnedBuffer<T> {
    /// Waits for the copies in flight, then frees the memory (`cudaFreeHost`). Leaks it when
    /// they cannot be waited for (a fault, a capture that forbids the wait, inside a host
    /// function).
    fn drop(&mut self) {
        if self.memory.leaked()
            || refuse_inside_host_fn().is_err()
            || sync_debug::reporting_only(|| self.memory.settle()).is_err()
        {
            return;
        }
        // The runtime would bind device 0's primary context on a thread without one.
        let Ok(_current) = Device::new(0).and_then(Device::make_current) else { return };
        // No capture in progress (this thread's own included) forbids it, or is invalidated.
        let _ = uncapturable_call(|| {
            // SAFETY: memory this buffer allocated; no copy uses it any more.
            check(unsafe { sys::cudaFreeHost(self.memory.as_mut_ptr().cast()) }, "cudaFreeHost")
        });
    }
}

impl<T: DeviceCopy> fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.memory.fmt(f)
    }
}
