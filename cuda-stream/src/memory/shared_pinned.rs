//! [`SharedPinned`]: a [`PinnedBuffer`] shared between the host and the graphs that copy it,
//! behind a lock whose guard reaches the elements but never the allocation: no guard can swap
//! the memory out from under a graph's memcpy node, or free it (CUDA inspects a node's host
//! memory when it instantiates the graph, and crashed, on an H100, when that memory had been
//! freed). Its last holder's drop never waits for the device: a buffer with copies in flight is
//! dropped (its wait, then its free) on a thread of its own.

use super::page_locked::{PageLocked, PageLockedMemory, sealed};
use super::{DeviceCopy, PinnedBuffer};
use crate::ffi::error::Result;
use std::mem::ManuallyDrop;
use std::ops::{Deref, Range};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// A [`PinnedBuffer`] that graphs' memcpy nodes copy to or from
/// ([`GraphBuilder::add_copy_from_pinned`](crate::GraphBuilder::add_copy_from_pinned),
/// [`Capture::copy_to_pinned`](crate::Capture::copy_to_pinned), ...), shared as an `Arc`. The
/// host reaches it through [`SharedPinned::lock`], whose guard reads and writes the elements
/// (once the copies in flight they conflict with, a graph's launches included, have
/// completed) and takes part in copies as page-locked memory, but cannot replace or free the
/// buffer: it lives as long as the last `Arc`, in a graph, an executable or the program.
///
/// A graph's launch takes the lock while it orders and enqueues its copies, with a try: while a
/// guard is alive anywhere, the launch is refused ([`Error::GraphMisuse`](crate::Error::GraphMisuse))
/// rather than wait.
pub struct SharedPinned<T: DeviceCopy> {
    /// Taken out only by the drop.
    buffer: ManuallyDrop<Mutex<PinnedBuffer<T>>>,
    len: usize,
}

impl<T: DeviceCopy> SharedPinned<T> {
    /// Shares `buffer`.
    pub fn new(buffer: PinnedBuffer<T>) -> SharedPinned<T> {
        SharedPinned { len: buffer.len(), buffer: ManuallyDrop::new(Mutex::new(buffer)) }
    }

    /// The buffer, locked: waits while another guard or a launch holds it. A guard dropped by a
    /// panic leaves the elements as they were (plain bytes), and the next lock takes them.
    pub fn lock(&self) -> PinnedGuard<'_, T> {
        PinnedGuard { guard: self.buffer.lock().unwrap_or_else(PoisonError::into_inner) }
    }

    /// The buffer, locked, or `None` while another guard or a launch holds it.
    pub fn try_lock(&self) -> Option<PinnedGuard<'_, T>> {
        match self.buffer.try_lock() {
            Ok(guard) => Some(PinnedGuard { guard }),
            Err(TryLockError::Poisoned(poisoned)) => Some(PinnedGuard { guard: poisoned.into_inner() }),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The number of elements (no lock: it never changes).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: it holds at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl<T: DeviceCopy> Drop for SharedPinned<T> {
    /// Drops the buffer, which waits for its copies in flight before it frees the memory: here
    /// when none is in flight, else on a thread of its own, so that the last holder's drop (an
    /// executable's, a graph's) never waits for the device.
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used again.
        let mutex = unsafe { ManuallyDrop::take(&mut self.buffer) };
        let mut buffer = mutex.into_inner().unwrap_or_else(PoisonError::into_inner);
        if !buffer.page_locked(sealed::Token(())).has_copies_in_flight() {
            return;
        }
        let waiting = std::thread::Builder::new().name("cuda-stream pinned drop".into()).spawn(move || drop(buffer));
        // No thread: the closure, and the buffer with it, drops here, waiting as any
        // `PinnedBuffer`'s drop does; never freed early either way.
        drop(waiting);
    }
}

impl<T: DeviceCopy> std::fmt::Debug for SharedPinned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPinned").finish_non_exhaustive()
    }
}

/// The host's hold of a [`SharedPinned`] ([`SharedPinned::lock`]): the buffer's `&self`
/// methods ([`PinnedBuffer::as_slice`], ...), its elements written
/// ([`PinnedGuard::as_mut_slice`]), and the buffer as page-locked memory in a copy
/// ([`DeviceBuffer::copy_from_pinned`](crate::DeviceBuffer::copy_from_pinned) takes
/// `&mut guard`). Not the buffer itself, which stays where the graphs that copy it expect it.
pub struct PinnedGuard<'a, T: DeviceCopy> {
    guard: MutexGuard<'a, PinnedBuffer<T>>,
}

impl<T: DeviceCopy> PinnedGuard<'_, T> {
    /// The elements, writable, once every copy in flight (a graph's launches' included) has
    /// completed ([`PinnedBuffer::as_mut_slice`]).
    ///
    /// # Errors
    /// As [`PinnedBuffer::as_mut_slice`].
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.guard.as_mut_slice()
    }

    /// The host address of the first element, and the length: what a graph's node copies.
    pub(super) fn place(&self) -> (usize, usize) {
        (self.guard.address() as usize, self.guard.len())
    }

    /// The buffer's memory and its copies in flight.
    pub(super) fn memory(&mut self) -> &mut PageLocked<T> {
        self.guard.page_locked(sealed::Token(()))
    }
}

impl<T: DeviceCopy> Deref for PinnedGuard<'_, T> {
    type Target = PinnedBuffer<T>;

    fn deref(&self) -> &PinnedBuffer<T> {
        &self.guard
    }
}

impl<T: DeviceCopy> sealed::Sealed for PinnedGuard<'_, T> {}

impl<T: DeviceCopy> PageLockedMemory<T> for PinnedGuard<'_, T> {
    fn page_locked(&mut self, token: sealed::Token) -> &mut PageLocked<T> {
        self.guard.page_locked(token)
    }

    fn elements(&self, token: sealed::Token) -> Range<usize> {
        self.guard.elements(token)
    }
}

impl<T: DeviceCopy> std::fmt::Debug for PinnedGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.guard.fmt(f)
    }
}
