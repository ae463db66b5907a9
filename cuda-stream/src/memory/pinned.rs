//! [`PinnedBuffer`]: page-locked host memory, which CUDA copies asynchronously, and which
//! waits for those copies before the host may touch or free it.

use super::ledger::{Ledger, On, Span, Ticket};
use super::{DeviceCopy, byte_size};
use crate::call::capture_mode::uncapturable_call;
use crate::call::race::{self, AccessKind, HostAccess};
use crate::call::sync_debug::{self, SyncKind};
use crate::device::Device;
use crate::event::Event;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::stream::StreamRef;
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
    ptr: NonNull<T>,
    len: usize,
    /// The copies in flight: what each reads or writes, and an event recorded after it.
    in_flight: Ledger,
    /// A copy in flight could not be tracked: the memory is never freed.
    leak: bool,
}

// SAFETY: the buffer owns its memory; moving it moves the ownership, and the events it holds
// are `Send`.
unsafe impl<T: DeviceCopy> Send for PinnedBuffer<T> {}
// SAFETY: `&self` methods read the length, the address, the events in flight (which they only
// wait on) and, once those copies completed, the memory; every write to the memory and every
// change of the events in flight takes `&mut self`.
unsafe impl<T: DeviceCopy> Sync for PinnedBuffer<T> {}

impl<T: DeviceCopy> PinnedBuffer<T> {
    /// `len` zeroed elements.
    ///
    /// # Errors
    /// [`Error::Size`](crate::Error::Size) for zero elements or an overflowing byte size;
    /// refused inside a host function; CUDA's errors (`cudaErrorMemoryAllocation`).
    pub fn zeroed(len: usize) -> Result<Self> {
        let buffer = Self::allocate(len)?;
        // SAFETY: `len` elements of fresh memory this buffer owns; all-zero bytes are a `T`.
        unsafe { buffer.ptr.as_ptr().write_bytes(0, len) };
        Ok(buffer)
    }

    /// A copy of `values`.
    ///
    /// # Errors
    /// As [`PinnedBuffer::zeroed`].
    pub fn from_slice(values: &[T]) -> Result<Self> {
        let buffer = Self::allocate(values.len())?;
        // SAFETY: `len` elements of fresh memory this buffer owns, not overlapping `values`.
        unsafe { buffer.ptr.as_ptr().copy_from_nonoverlapping(values.as_ptr(), values.len()) };
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
        Ok(PinnedBuffer { ptr, len, in_flight: Ledger::default(), leak: false })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
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
    /// The errors of [`Event::synchronize`] (a fault in the copies' streams).
    pub fn as_slice(&self) -> Result<&[T]> {
        self.wait_for_copies(&self.whole(false))?;
        self.race_host_access("PinnedBuffer::as_slice", AccessKind::Read)?;
        // SAFETY: `len` initialized elements this buffer owns; no copy is in flight, and a new
        // one takes `&mut self`, which the slice's borrow of `self` keeps out.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The elements, writable, once every copy in flight has completed.
    ///
    /// # Errors
    /// As [`PinnedBuffer::as_slice`].
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.settle()?;
        self.race_host_access("PinnedBuffer::as_mut_slice", AccessKind::Write)?;
        // SAFETY: as in `as_slice`, and the slice is the only access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// Tells the race detector of a host access of the whole buffer (after [`Self::settle`],
    /// so the copies this buffer knows of are complete to it).
    #[inline(always)]
    fn race_host_access(&self, operation: &str, kind: AccessKind) -> Result<()> {
        if !race::tracking() {
            return Ok(());
        }
        let whole = HostAccess { address: self.ptr.as_ptr().cast(), bytes: self.len * size_of::<T>(), kind };
        race::host_access(operation, &[whole])
    }

    pub(crate) fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Makes `stream` wait for the copies in flight that a copy touching `span` of this buffer
    /// conflicts with, before the copy; its place among them, for [`PinnedBuffer::copied`].
    pub(super) fn order_copy(&mut self, stream: &StreamRef, span: &Span) -> Result<Ticket> {
        if self.leak {
            return Err(Error::Size(UNTRACKED));
        }
        self.in_flight.order_before(stream, On::stream(stream, false), span)
    }

    /// Notes a copy just enqueued on `stream` as in flight (an event recorded after it). If
    /// that fails, the stream is waited for; if that fails too, the memory is never handed out
    /// nor freed again.
    pub(super) fn copied(&mut self, stream: &StreamRef, span: Span, ticket: Ticket) {
        if self.in_flight.note(stream, On::stream(stream, false), span, ticket).is_err()
            && stream.synchronize_checked_earlier().is_err()
        {
            self.leak = true;
        }
    }

    /// All of the buffer, read or written by the host.
    fn whole(&self, writes: bool) -> Span {
        Span { bytes: 0..self.len * size_of::<T>(), writes }
    }

    /// Waits for every copy in flight, and forgets them.
    fn settle(&mut self) -> Result<()> {
        self.wait_for_copies(&self.whole(true))?;
        self.in_flight.clear();
        Ok(())
    }

    /// Waits for the copies in flight that a host access of `span` conflicts with (the newest
    /// first).
    fn wait_for_copies(&self, span: &Span) -> Result<()> {
        refuse_inside_host_fn()?;
        if self.leak {
            return Err(Error::Size(UNTRACKED));
        }
        if !self.in_flight.conflicts_with(span) {
            return Ok(());
        }
        // Refused where a capture of this crate forbids waiting; the events themselves were
        // recorded outside any capture.
        drop(crate::call::transitions::unsafe_call_hold()?);
        sync_debug::before_sync("cudaEventSynchronize (a pinned buffer's copies in flight)", SyncKind::PinnedWait)?;
        self.in_flight.host_waits(span, Event::synchronize_checked_earlier)
    }
}

/// Why a pinned buffer whose copy could not be tracked refuses every use.
const UNTRACKED: &str = "a copy into or out of this pinned buffer could not be tracked: it is never touched again";

impl<T: DeviceCopy> Drop for PinnedBuffer<T> {
    /// Waits for the copies in flight, then frees the memory (`cudaFreeHost`). Leaks it when
    /// they cannot be waited for (a fault, a capture that forbids the wait, inside a host
    /// function).
    fn drop(&mut self) {
        if self.leak || refuse_inside_host_fn().is_err() || sync_debug::reporting_only(|| self.settle()).is_err() {
            return;
        }
        // The runtime would bind device 0's primary context on a thread without one.
        let Ok(_current) = Device::new(0).and_then(Device::make_current) else { return };
        // No capture in progress (this thread's own included) forbids it, or is invalidated.
        let _ = uncapturable_call(|| {
            // SAFETY: memory this buffer allocated; no copy uses it any more.
            check(unsafe { sys::cudaFreeHost(self.ptr.as_ptr().cast()) }, "cudaFreeHost")
        });
    }
}

impl<T: DeviceCopy> fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("copies_in_flight", &self.in_flight.len())
            .finish()
    }
}
