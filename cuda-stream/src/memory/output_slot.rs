//! The state of a graph's output between launches ([`Capture::keep`](crate::Capture::keep),
//! see [`graph_outputs`](super::graph_outputs)): which launch made the allocation, whether a
//! buffer owns it, and the event the next launch waits for after that buffer's free. A launch
//! reads and notes it under its hold; the buffer's drop notes its free (or its leak).

use crate::event::Event;
use crate::ffi::error::{Error, Result};
use crate::stream::StreamRef;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Where a graph's output is, between launches.
#[derive(Debug)]
pub(super) struct OutputSlot {
    state: Mutex<OutputState>,
    /// The graph's executable (one at a time) frees an untaken output at its next launch.
    auto_free: AtomicBool,
}

#[derive(Debug)]
pub(super) enum OutputState {
    /// No launch has allocated it, or the last allocation is freed (`Some`: after that event).
    Free(Option<Event>),
    /// A launch allocated it, and nobody took it: the event is recorded after that launch.
    Launched(Event),
    /// A [`DeviceBuffer`](super::DeviceBuffer) owns it.
    Taken,
    /// A buffer leaked the memory, or its free could not be marked: no launch is made again.
    Unordered,
}

impl OutputSlot {
    pub(super) fn new() -> OutputSlot {
        OutputSlot { state: Mutex::new(OutputState::Free(None)), auto_free: AtomicBool::new(false) }
    }

    /// Whether the graph's executable frees an untaken output at its next launch.
    pub(super) fn auto_free(&self) -> bool {
        self.auto_free.load(Ordering::Relaxed)
    }

    /// Notes how the graph's executable (CUDA allows one at a time) was instantiated.
    pub(super) fn instantiated(&self, auto_free: bool) {
        self.auto_free.store(auto_free, Ordering::Relaxed);
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, OutputState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Orders a launch on `stream` (under the launch's hold) after the free of the last
    /// launch's output, or refuses it (an auto-free executable frees an untaken one itself).
    pub(super) fn before_launch(&self, stream: &StreamRef) -> Result<()> {
        let auto_free = self.auto_free.load(Ordering::Relaxed);
        match &*self.lock() {
            OutputState::Free(None) => Ok(()),
            // A buffer taken under an executable that was not auto-free: it may have leaked its
            // memory instead of freeing it (still in use), which an auto-free launch would free.
            OutputState::Free(Some(_)) if auto_free => Err(Error::GraphMisuse(
                "an auto-free executable is not launched after an output of its graph was taken (a buffer that leaked its memory would have it freed under its work)",
            )),
            OutputState::Free(Some(freed)) => stream.wait_raw(freed.as_raw(), 0),
            // The launch frees it: after the launch that made it (perhaps another executable's).
            OutputState::Launched(launched) if auto_free => stream.wait_raw(launched.as_raw(), 0),
            OutputState::Launched(_) => Err(Error::GraphMisuse(
                "the last launch's output was not taken (CUDA refuses a launch while it is allocated): take it with GraphOutput::take, and drop the buffer (with the GraphOutput dropped, it stays allocated for good)",
            )),
            OutputState::Taken => Err(Error::GraphMisuse(
                "a buffer taken from the last launch's output is alive: the next launch would allocate it again",
            )),
            OutputState::Unordered => Err(Error::GraphMisuse(
                "a buffer taken from an output leaked its memory, its free could not be marked, or a launch failed after CUDA took it: the graph is not launched again",
            )),
        }
    }

    /// Notes a launch on `stream` that allocated the output (under the launch's hold, after it).
    pub(super) fn launched(&self, stream: &StreamRef) -> Result<()> {
        let mut state = self.lock();
        let event = match std::mem::replace(&mut *state, OutputState::Unordered) {
            OutputState::Free(Some(event)) | OutputState::Launched(event) => event,
            _ => Event::internal(stream.device())?,
        };
        stream.record_raw(event.as_raw(), 0)?;
        *state = OutputState::Launched(event);
        Ok(())
    }

    /// Notes the free of a buffer taken from it, just enqueued on `stream` (under the free's
    /// hold): the next launch waits for an event recorded there now; no launch is made again
    /// when it cannot be recorded.
    pub(super) fn freed_on(&self, stream: &StreamRef) {
        let recorded =
            Event::internal(stream.device()).and_then(|event| stream.record_raw(event.as_raw(), 0).map(|()| event));
        *self.lock() = match recorded {
            Ok(event) => OutputState::Free(Some(event)),
            Err(_) => OutputState::Unordered,
        };
    }

    /// A launch failed after CUDA took it (a record after it failed): the output is allocated,
    /// but no event marks when it is written: no launch is made again, and nothing reads or
    /// takes it.
    pub(super) fn launch_failed(&self) {
        *self.lock() = OutputState::Unordered;
    }

    /// A buffer taken from it was dropped without freeing the memory (a leak): it stays
    /// allocated, perhaps in use, and no launch allocates it again.
    pub(super) fn never_freed(&self) {
        *self.lock() = OutputState::Unordered;
    }
}
