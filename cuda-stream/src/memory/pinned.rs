//! [`PinnedBuffer`]: page-locked host memory, which CUDA copies asynchronously, and which
//! waits for those copies before the host may touch or free it.

use super::ledger::{Span, Ticket, UseEvent};
use super::page_locked::{PageLocked, PageLockedMemory, PinnedSliceMut, page_locked_holder, sealed};
use super::pinned_pool::{self, Block, Blocks, PinnedPool};
use super::uses::refuse_capture;
use super::{DeviceCopy, byte_size};
use crate::call::sync_debug;
use crate::call::transitions::no_capture_transitions;
use crate::ffi::error::{Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::stream::{AsStream, StreamRef};
use crate::sys;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

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
    /// Where the memory goes when the buffer drops.
    origin: Origin,
}

/// Who gives a pinned buffer's memory back.
enum Origin {
    /// Allocated for it (`cudaHostAlloc` of `bytes`), freed with it.
    Own { bytes: usize },
    /// A block of a [`PinnedPool`]'s size class `bytes`, given back to it.
    Pool { blocks: Arc<Blocks>, bytes: usize },
}

page_locked_holder!(PinnedBuffer<T>, "PinnedBuffer");

impl<T: DeviceCopy> PinnedBuffer<T> {
    /// The host address of the first element (for a graph's memcpy node, which the graph's
    /// launches order with the copies in flight).
    pub(super) fn address(&self) -> *const T {
        self.memory.as_ptr()
    }

    /// `len` zeroed elements.
    ///
    /// # Errors
    /// [`Error::Size`](crate::Error::Size) for zero elements or an overflowing byte size;
    /// refused inside a host function; CUDA's errors (`cudaErrorMemoryAllocation`).
    pub fn zeroed(len: usize) -> Result<Self> {
        Self::allocate(len, None)?.zero()
    }

    /// A copy of `values`.
    ///
    /// # Errors
    /// As [`PinnedBuffer::zeroed`].
    pub fn from_slice(values: &[T]) -> Result<Self> {
        Ok(Self::allocate(values.len(), None)?.fill_from(values))
    }

    /// `len` zeroed elements in a block of `pool` (a cached one of its size class, or a new
    /// one), given back to the pool when the buffer drops.
    ///
    /// # Errors
    /// As [`PinnedBuffer::zeroed`].
    pub fn zeroed_in(pool: &PinnedPool, len: usize) -> Result<Self> {
        Self::allocate(len, Some(pool))?.zero()
    }

    /// A copy of `values` in a block of `pool` (see [`PinnedBuffer::zeroed_in`]).
    ///
    /// # Errors
    /// As [`PinnedBuffer::zeroed`].
    pub fn from_slice_in(pool: &PinnedPool, values: &[T]) -> Result<Self> {
        Ok(Self::allocate(values.len(), Some(pool))?.fill_from(values))
    }

    fn zero(self) -> Result<Self> {
        // SAFETY: `len` elements of memory this buffer holds, no copy in flight; all-zero bytes
        // are a `T`.
        unsafe { self.memory.as_ptr().cast_mut().write_bytes(0, self.len()) };
        Ok(self)
    }

    fn fill_from(self, values: &[T]) -> Self {
        // SAFETY: `len` elements of memory this buffer holds, no copy in flight, not
        // overlapping `values`.
        unsafe { self.memory.as_ptr().cast_mut().copy_from_nonoverlapping(values.as_ptr(), values.len()) };
        self
    }

    fn allocate(len: usize, pool: Option<&PinnedPool>) -> Result<Self> {
        const { assert!(align_of::<T>() <= 4096, "cudaHostAlloc aligns to a page") };
        let bytes = byte_size::<T>(len)?;
        let (block, origin) = match pool {
            None => {
                let block = pinned_pool::allocate(bytes)?;
                (block, Origin::Own { bytes })
            }
            Some(pool) => {
                let (block, blocks) = pool.take(bytes)?;
                let class = block.bytes;
                (block, Origin::Pool { blocks, bytes: class })
            }
        };
        Ok(PinnedBuffer { memory: PageLocked::new(block.ptr.cast::<T>(), len, "PinnedBuffer"), origin })
    }
}

impl<T: DeviceCopy> PinnedBuffer<T> {
    /// Runs `launch` with `stream` and the buffer's device address: zero-copy, a kernel reads
    /// and writes the host memory over the bus (page-locked memory is mapped into every
    /// device's address space, `cudaHostGetDevicePointer`). Ordered as a write of the whole
    /// buffer: after the copies in flight, and the host's next access, later copies and the
    /// drop wait for it, also when `launch` panics. `launch` typically launches a kernel of
    /// yours, which must use the address only on `stream`, only through work enqueued inside
    /// `launch`, and only within the buffer's elements; and `launch` must not capture `stream`
    /// (a kernel captured into a graph is not the use this call notes: a replay would outlive
    /// the buffer). Both are the launch's `unsafe` contract.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) while `stream` is being captured
    /// (a replay would outlive the buffer); refused inside a host function; CUDA's errors
    /// (`cudaHostGetDevicePointer`, recording and waiting for events). If the use cannot be
    /// noted after `launch` (a capture of `stream` begun meanwhile), the error is returned and
    /// the buffer is never touched or freed again.
    pub fn use_on<R>(&mut self, stream: impl AsStream, launch: impl FnOnce(&StreamRef, *mut T) -> R) -> Result<R> {
        let stream = stream.as_stream();
        refuse_inside_host_fn()?;
        let span = Span { bytes: 0..self.len() * size_of::<T>(), writes: true };
        let (ticket, address) = {
            // No capture of this crate begins between the check and the waits.
            let _transitions = no_capture_transitions();
            refuse_capture(&stream)?;
            let address = self.device_address(&stream)?;
            (self.memory.order_copy(&stream, &span)?, address)
        };
        let note = KernelUse { memory: &mut self.memory, stream: &stream, span: Some(span), ticket };
        let result = launch(&stream, address);
        note.finish()?;
        Ok(result)
    }

    /// The device address of the memory in `stream`'s device (its context current).
    fn device_address(&mut self, stream: &StreamRef) -> Result<*mut T> {
        let _current = stream.device().make_current()?;
        let mut address: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; page-locked memory of this buffer; flags 0.
        let code = unsafe { sys::cudaHostGetDevicePointer(&mut address, self.memory.as_mut_ptr().cast(), 0) };
        check(code, "cudaHostGetDevicePointer")?;
        Ok(address.cast())
    }
}

/// The note after a kernel's use of a pinned buffer: at `finish`, or, if `launch` panicked,
/// when dropped.
struct KernelUse<'a, T: DeviceCopy> {
    memory: &'a mut PageLocked<T>,
    stream: &'a StreamRef,
    span: Option<Span>,
    ticket: Ticket,
}

impl<T: DeviceCopy> KernelUse<'_, T> {
    fn finish(mut self) -> Result<()> {
        self.note()
    }

    /// Notes the use in flight, under the capture-transition lock; a capture of the stream
    /// begun meanwhile would take the record: the memory is then never touched again.
    fn note(&mut self) -> Result<()> {
        let Some(span) = self.span.take() else { return Ok(()) };
        let _transitions = no_capture_transitions();
        if let Err(error) = refuse_capture(self.stream) {
            self.memory.mark_leaked();
            return Err(error);
        }
        self.memory.copied(self.stream, span, self.ticket, &mut UseEvent::default());
        Ok(())
    }
}

impl<T: DeviceCopy> Drop for KernelUse<'_, T> {
    fn drop(&mut self) {
        let _ = self.note();
    }
}

impl<T: DeviceCopy> Drop for PinnedBuffer<T> {
    /// Waits for the copies in flight, then frees the memory (`cudaFreeHost`) or gives it back
    /// to its pool. Leaks it when they cannot be waited for (a fault, a capture that forbids the
    /// wait, inside a host function).
    fn drop(&mut self) {
        if self.memory.leaked()
            || refuse_inside_host_fn().is_err()
            || sync_debug::reporting_only(|| self.memory.settle()).is_err()
        {
            return;
        }
        let ptr = NonNull::new(self.memory.as_mut_ptr().cast::<c_void>()).expect("a buffer's address");
        match &self.origin {
            Origin::Own { bytes } => {
                let _ = pinned_pool::free(Block { ptr, bytes: *bytes });
            }
            Origin::Pool { blocks, bytes } => blocks.give_back(Block { ptr, bytes: *bytes }),
        }
    }
}
