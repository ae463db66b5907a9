//! What page-locked host memory keeps, whoever allocated it ([`PinnedBuffer`](super::PinnedBuffer),
//! [`RegisteredSlice`](super::RegisteredSlice)): its copies in flight, and the waits for them
//! before the host reads, writes or gives the memory back.

use super::ledger::{Ledger, On, SharedEvent, Span, Ticket, UseEvent};
use super::{DeviceCopy, checked_range};
use crate::call::capture_mode::uncapturable_call;
use crate::call::race::{self, AccessKind, HostAccess};
use crate::call::sync_debug::{self, SyncKind};
use crate::device::Device;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::stream::StreamRef;
use crate::sys;
use std::ops::{Range, RangeBounds};
use std::ptr::NonNull;

/// A runtime call on page-locked host memory (an allocation or a registration, and their
/// ends): made with device 0's primary context current, as the runtime would bind it on a
/// thread with none, and the caller's context restored after; in the Relaxed capture mode, so
/// no capture in progress (this thread's own included) forbids it or is invalidated by it.
pub(super) fn host_memory_call(api: &'static str, call: impl FnOnce() -> sys::cudaError_t) -> Result<()> {
    let _current = Device::new(0)?.make_current()?;
    uncapturable_call(|| check(call(), api))
}

/// Page-locked host memory that copies to and from device buffers run on asynchronously: a
/// [`PinnedBuffer`](super::PinnedBuffer) or a [`RegisteredSlice`](super::RegisteredSlice).
/// Sealed.
pub trait PageLockedMemory<T: DeviceCopy>: sealed::Sealed {
    /// The memory and its copies in flight.
    #[doc(hidden)]
    fn page_locked(&mut self, token: sealed::Token) -> &mut PageLocked<T>;

    /// The elements of it a copy uses: all of them, or a part's.
    #[doc(hidden)]
    fn elements(&self, token: sealed::Token) -> Range<usize>;
}

/// An exclusive part of page-locked memory (elements `range` of a
/// [`PinnedBuffer`](super::PinnedBuffer) or a [`RegisteredSlice`](super::RegisteredSlice)), for a
/// copy of a part, as `cudaMemcpyAsync(d + off, h + off, bytes)` makes one: its copies are
/// tracked for its range, so copies of disjoint parts on different streams do not wait for each
/// other. Made by `slice_mut`; it borrows the memory for as long as it lives (typically one
/// copy's statement).
pub struct PinnedSliceMut<'a, T: DeviceCopy> {
    memory: &'a mut PageLocked<T>,
    range: Range<usize>,
}

impl<'a, T: DeviceCopy> PinnedSliceMut<'a, T> {
    /// Elements `range` of `memory` (checked: within it, not empty).
    pub(super) fn new(memory: &'a mut PageLocked<T>, range: &impl RangeBounds<usize>) -> Result<Self> {
        let range = checked_range(range, memory.len())?;
        Ok(PinnedSliceMut { memory, range })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Always `false`: a part has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The elements of the memory it covers.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }
}

impl<T: DeviceCopy> sealed::Sealed for PinnedSliceMut<'_, T> {}
impl<T: DeviceCopy> PageLockedMemory<T> for PinnedSliceMut<'_, T> {
    fn page_locked(&mut self, _: sealed::Token) -> &mut PageLocked<T> {
        self.memory
    }

    fn elements(&self, _: sealed::Token) -> Range<usize> {
        self.range.clone()
    }
}

impl<T: DeviceCopy> std::fmt::Debug for PinnedSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedSliceMut").field("range", &self.range).field("memory", &self.memory).finish()
    }
}

pub(super) mod sealed {
    pub trait Sealed {}

    /// What [`page_locked`](super::PageLockedMemory::page_locked) takes: only this module's
    /// parent makes one, so no code outside the crate reaches a `&mut PageLocked` (two swapped
    /// would hand one owner's memory to another: freed, unregistered, or of another size).
    #[derive(Debug, Clone, Copy)]
    pub struct Token(pub(in crate::memory) ());
}

/// What a holder of page-locked memory (a type with a field `memory: PageLocked<T>`) offers:
/// its length, its parts for copies, the host's reads and writes once the copies they conflict
/// with have completed, `PageLockedMemory` for the copies, and `Debug`.
macro_rules! page_locked_holder {
    ($holder:ty, $name:literal) => {
        impl<T: DeviceCopy> sealed::Sealed for $holder {}

        impl<T: DeviceCopy> PageLockedMemory<T> for $holder {
            fn page_locked(&mut self, _: sealed::Token) -> &mut PageLocked<T> {
                &mut self.memory
            }

            fn elements(&self, _: sealed::Token) -> std::ops::Range<usize> {
                0..self.memory.len()
            }
        }

        impl<T: DeviceCopy> $holder {
            /// The number of elements.
            pub fn len(&self) -> usize {
                self.memory.len()
            }

            /// Always `false`: it holds at least one element.
            pub fn is_empty(&self) -> bool {
                false
            }

            /// An exclusive part, the elements in `range`, for a copy of a part (a pipeline's
            /// chunk); its copies are tracked for its range.
            ///
            /// # Errors
            /// [`Error::Size`](crate::Error::Size) for a range outside the memory or an empty
            /// one.
            pub fn slice_mut(&mut self, range: impl std::ops::RangeBounds<usize>) -> Result<PinnedSliceMut<'_, T>> {
                PinnedSliceMut::new(&mut self.memory, &range)
            }

            /// The elements, once every copy into them in flight has completed (copies out of
            /// them may go on). A shared borrow, as for a `Vec`: a new copy takes `&mut self`,
            /// so none begins while the slice lives (until `as_mut_slice` or a copy forgets
            /// them, the copies' events are asked again at each call).
            ///
            /// # Errors
            /// The errors of [`Event::synchronize`](crate::Event::synchronize) (a fault in the
            /// copies' streams).
            pub fn as_slice(&self) -> Result<&[T]> {
                self.memory.as_slice(concat!($name, "::as_slice"))
            }

            /// The elements, writable, once every copy in flight has completed.
            ///
            /// # Errors
            /// As `as_slice`.
            pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
                self.memory.as_mut_slice(concat!($name, "::as_mut_slice"))
            }
        }

        impl<T: DeviceCopy> std::fmt::Debug for $holder {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.memory.fmt(f)
            }
        }
    };
}
pub(super) use page_locked_holder;

/// Page-locked memory of `len` elements and its copies in flight (opaque).
pub struct PageLocked<T: DeviceCopy> {
    ptr: NonNull<T>,
    len: usize,
    /// The copies in flight: what each reads or writes, and an event recorded after it.
    in_flight: Ledger,
    /// A copy in flight could not be tracked: the memory is never touched or given back again.
    leak: bool,
    /// The owning type's name, for the race detector's reports.
    owner: &'static str,
}

// SAFETY: the memory is owned by the holder (or lent to it for its whole life); moving it moves
// that, and the events it holds are `Send`.
unsafe impl<T: DeviceCopy> Send for PageLocked<T> {}
// SAFETY: `&self` methods read the length, the address, the events in flight (which they only
// wait on) and, once those copies completed, the memory; every write to the memory and every
// change of the events in flight takes `&mut self`.
unsafe impl<T: DeviceCopy> Sync for PageLocked<T> {}

impl<T: DeviceCopy> PageLocked<T> {
    /// `len` elements at `ptr`, page-locked, with no copy in flight.
    pub(super) fn new(ptr: NonNull<T>, len: usize, owner: &'static str) -> PageLocked<T> {
        PageLocked { ptr, len, in_flight: Ledger::default(), leak: false, owner }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    pub(super) fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Whether copies were noted that the memory has not waited for since.
    pub(super) fn has_copies_in_flight(&self) -> bool {
        self.in_flight.len() > 0
    }

    /// Whether a copy could not be tracked (the memory must never be touched or given back).
    pub(super) fn leaked(&self) -> bool {
        self.leak
    }

    /// A use could not be tracked: the memory is never touched or given back again.
    pub(super) fn mark_leaked(&mut self) {
        self.leak = true;
    }

    /// The elements, once every copy into them has completed.
    pub(super) fn as_slice(&self, operation: &str) -> Result<&[T]> {
        self.wait_for_copies(&self.whole(false))?;
        self.race_host_access(operation, AccessKind::Read)?;
        // SAFETY: `len` initialized elements the holder owns or borrows; no copy into them is
        // in flight, and a new one takes `&mut self`, which the slice's borrow keeps out.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The elements, writable, once every copy has completed.
    pub(super) fn as_mut_slice(&mut self, operation: &str) -> Result<&mut [T]> {
        self.settle()?;
        self.race_host_access(operation, AccessKind::Write)?;
        // SAFETY: as in `as_slice`, and the slice is the only access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// Tells the race detector of a host access of the whole memory (after the waits, so the
    /// copies it knows of are complete to it).
    #[inline(always)]
    fn race_host_access(&self, operation: &str, kind: AccessKind) -> Result<()> {
        if !race::tracking() {
            return Ok(());
        }
        let whole = HostAccess { address: self.ptr.as_ptr().cast(), bytes: self.len * size_of::<T>(), kind };
        race::host_access(operation, &[whole])
    }

    /// Makes `stream` wait for the copies in flight that a copy touching `span` conflicts with,
    /// before the copy; its place among them, for [`PageLocked::copied`].
    pub(super) fn order_copy(&mut self, stream: &StreamRef, span: &Span) -> Result<Ticket> {
        if self.leak {
            return Err(Error::Size(UNTRACKED));
        }
        self.in_flight.order_before(stream, On::stream(stream, false), span)
    }

    /// Notes a copy just enqueued on `stream` as in flight (an event recorded after it:
    /// `recorded`, or one recorded now and put there for the copy's device buffer). If that
    /// fails, the stream is waited for; if that fails too, the memory is never touched or given
    /// back again.
    pub(super) fn copied(
        &mut self,
        stream: &StreamRef,
        span: Span,
        ticket: Ticket,
        recorded: &mut UseEvent<SharedEvent>,
    ) {
        if self.in_flight.note(stream, On::stream(stream, false), span, ticket, recorded).is_err()
            && stream.synchronize_checked_earlier().is_err()
        {
            self.leak = true;
        }
    }

    /// All of the memory, read or written by the host.
    fn whole(&self, writes: bool) -> Span {
        Span { bytes: 0..self.len * size_of::<T>(), writes }
    }

    /// Waits for every copy in flight, and forgets them.
    pub(super) fn settle(&mut self) -> Result<()> {
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
        sync_debug::before_sync("cudaEventSynchronize (page-locked memory's copies in flight)", SyncKind::PinnedWait)?;
        self.in_flight.host_waits(span, |event| event.synchronize_checked_earlier())
    }

    /// Waits for every copy in flight in CUDA's Relaxed capture mode, which no capture of this
    /// thread forbids (a last resort before memory goes back to its owner).
    pub(super) fn settle_relaxed(&mut self) -> Result<()> {
        let whole = self.whole(true);
        crate::call::capture_mode::uncapturable_call(|| {
            self.in_flight.host_waits(&whole, |event| event.synchronize_checked_earlier())
        })?;
        self.in_flight.clear();
        Ok(())
    }
}

/// Why memory whose copy could not be tracked refuses every use.
const UNTRACKED: &str = "a copy into or out of this page-locked memory could not be tracked: it is never touched again";

impl<T: DeviceCopy> std::fmt::Debug for PageLocked<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.owner)
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("copies_in_flight", &self.in_flight.len())
            .finish()
    }
}
