//! A device buffer's memory as its owner and the graphs that use it share it: the order of
//! its uses, and, once the owner has been dropped while a graph still held the memory, the
//! free that the last graph's drop makes.
//!
//! A graph holds a borrowed [`DeviceBuffer`](super::DeviceBuffer)'s memory through this core,
//! not through the buffer: the buffer's home stream is lent by its owner (`&Stream`, say) and
//! may be gone before the graph. So the graph's launches never touch the home stream. Before a
//! graph first holds the memory, the home stream's unmarked uses are marked and its later uses
//! are marked like any other ([`Uses::prepare_for_graphs`]); a launch then waits for the marks
//! it conflicts with, wherever they were made. A buffer whose address was handed out for home
//! work the buffer does not see (`as_ptr`) is refused, at the hold and at every launch.
//!
//! The owner's drop while a graph holds the memory frees nothing: on a new private stream of
//! the device it waits for the home stream's work so far, and leaves that stream, with what
//! the free needs, here ([`Detached`]). The private stream is the memory's home from then on
//! (its position covers every use the old home made). When the last graph or executable that
//! holds the memory is dropped, the core frees it there, after every use, as the owner's drop
//! would have on the home stream.

use super::buffer::{Freed, free_after_uses};
use super::uses::Uses;
use crate::stream::Stream;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// The shared part of a device buffer (see the [module docs](self)).
pub(super) struct BufferCore {
    pub(super) uses: Uses,
    /// Set by the owner's drop while a graph held the memory.
    detached: Mutex<Option<Detached>>,
}

/// Memory whose owner was dropped while graphs held it: its home from then on, and its free.
pub(super) struct Detached {
    /// A stream of the memory's device, after the old home stream's work up to the owner's
    /// drop.
    pub(super) home: Stream,
    pub(super) freed: Freed,
}

impl BufferCore {
    pub(super) fn new(uses: Uses) -> BufferCore {
        BufferCore { uses, detached: Mutex::new(None) }
    }

    /// Hands the free to the last holder.
    pub(super) fn detach(&self, detached: Detached) {
        *self.detached.lock().unwrap_or_else(PoisonError::into_inner) = Some(detached);
    }
}

impl Drop for BufferCore {
    /// Frees memory whose owner was dropped first (see the [module docs](self)), on its
    /// private home stream after every use; leaks it where that cannot be done safely.
    fn drop(&mut self) {
        let detached = self.detached.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(Detached { home, freed }) = detached {
            free_after_uses(&home, &self.uses, freed);
            // The stream goes now: CUDA destroys it once the free has run.
        }
    }
}

impl fmt::Debug for BufferCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferCore").field("leaked", &self.uses.leaked()).finish_non_exhaustive()
    }
}
