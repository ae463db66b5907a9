//! Graph memory that outlives a launch ([`Capture::keep`]): a capture buffer the graph allocates
//! and never frees, handed after each launch to the program as a [`DeviceBuffer`]
//! ([`GraphOutput::take`]), which frees it where any buffer is freed (`cudaFreeAsync` on its
//! home stream: CUDA's graph allocations that are freed outside the graph).
//!
//! CUDA's rules, and how each is kept:
//! * The allocation of a launch stays allocated until something frees it; a launch of the
//!   executable while it is allocated fails (`cudaErrorInvalidValue`), unless the executable was
//!   instantiated with [`auto_free_on_launch`](crate::InstantiateOptions::auto_free_on_launch),
//!   whose next launch frees it. Each output's state says which of these holds: a launch is
//!   refused ([`Error::GraphMisuse`]) while the last one's output was not taken, or its buffer is
//!   alive, or its buffer leaked the memory instead of freeing it; an auto-free executable's
//!   outputs are never taken (its next launch would free them under the buffer).
//! * The free must come before the next launch, in the GPU's order: the buffer's drop records
//!   an event right after its free, on the stream it freed on, under the same hold, and the
//!   next launch waits for it. A launch that frees an untaken output (auto-free) waits for the
//!   launch that made it, whichever executable made it.
//! * The address is the same at every launch; one executable of the graph exists at a time
//!   (checked here, as CUDA does): the state is the graph's, which its executables share.

use super::buffer::DeviceBuffer;
use super::capture_buffer::CaptureBuffer;
use super::{DeviceCopy, graph_nodes};
use crate::device::{Device, same_device};
use crate::event::Event;
use crate::ffi::error::{Error, Result};
use crate::graph::capture::{Capture, CaptureMode};
use crate::stream::enqueue::InCapture;
use crate::stream::{AsStream, StreamRef};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A graph allocation that outlives each launch of the graph ([`Capture::keep`]): after a
/// launch, [`GraphOutput::take`] hands it over as a [`DeviceBuffer`]. Dropping the
/// `GraphOutput` frees nothing: an allocation a launch made and nobody took stays allocated
/// until an auto-free launch frees it (or the process exits).
pub struct GraphOutput<T: DeviceCopy> {
    slot: Arc<OutputSlot>,
    address: NonNull<T>,
    len: usize,
    device: Device,
    _element: PhantomData<fn() -> T>,
}

// SAFETY: the address is a device address, never dereferenced on the host; the state is
// behind a mutex.
unsafe impl<T: DeviceCopy> Send for GraphOutput<T> {}
// SAFETY: as above; `&self` methods lock the state.
unsafe impl<T: DeviceCopy> Sync for GraphOutput<T> {}

impl<T: DeviceCopy> std::fmt::Debug for GraphOutput<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphOutput")
            .field("address", &self.address)
            .field("len", &self.len)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// Where a graph's output is, between launches.
#[derive(Debug)]
pub(super) struct OutputSlot {
    state: Mutex<OutputState>,
    /// The graph's executable (one at a time) frees an untaken output at its next launch.
    auto_free: AtomicBool,
}

#[derive(Debug)]
enum OutputState {
    /// No launch has allocated it, or the last allocation is freed (`Some`: after that event).
    Free(Option<Event>),
    /// A launch allocated it, and nobody took it: the event is recorded after that launch.
    Launched(Event),
    /// A [`DeviceBuffer`] owns it.
    Taken,
    /// A buffer leaked the memory, or its free could not be marked: no launch is made again.
    Unordered,
}

impl OutputSlot {
    fn new() -> OutputSlot {
        OutputSlot { state: Mutex::new(OutputState::Free(None)), auto_free: AtomicBool::new(false) }
    }

    /// Notes how the graph's executable (CUDA allows one at a time) was instantiated.
    pub(super) fn instantiated(&self, auto_free: bool) {
        self.auto_free.store(auto_free, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutputState> {
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
                "a buffer taken from an output leaked its memory, or its free could not be marked: the graph is not launched again",
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
    /// hold): the next launch waits for an event recorded there now. `false` (and no launch
    /// again) when it cannot be recorded.
    pub(super) fn freed_on(&self, stream: &StreamRef) -> bool {
        let recorded = Event::internal(stream.device())
            .and_then(|event| stream.record_raw(event.as_raw(), 0).map(|()| event))
            .ok();
        let noted = recorded.is_some();
        *self.lock() = match recorded {
            Some(event) => OutputState::Free(Some(event)),
            None => OutputState::Unordered,
        };
        noted
    }

    /// A buffer taken from it was dropped without freeing the memory (a leak): it stays
    /// allocated, perhaps in use, and no launch allocates it again.
    pub(super) fn never_freed(&self) {
        *self.lock() = OutputState::Unordered;
    }
}

impl<M: CaptureMode> Capture<'_, M> {
    /// Keeps `buffer` allocated at the end of each launch of an executable made from the graph:
    /// CUDA's graph memory that is freed outside the graph. After a launch,
    /// [`GraphOutput::take`] hands it over as a [`DeviceBuffer`], whose drop frees it; the next
    /// launch waits for that free, and is refused until it has been made (see
    /// [`GraphOutput`]). Its uses in the capture are all part of the graph, which a launch
    /// completes.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a buffer of another capture, or one freed.
    pub fn keep<T: DeviceCopy>(&mut self, buffer: CaptureBuffer<T>) -> Result<GraphOutput<T>> {
        buffer.allocation().refuse_unusable(self.id())?;
        let address = NonNull::new(buffer.allocation().at(0).cast::<T>()).ok_or(Error::Size("no address"))?;
        let slot = Arc::new(OutputSlot::new());
        let mut memory = graph_nodes::held_memory_of(self.memory())?;
        memory.keep_output(Arc::clone(&slot));
        self.hold_memory(Arc::new(memory));
        Ok(GraphOutput { slot, address, len: buffer.len(), device: buffer.device(), _element: PhantomData })
    }
}

impl<T: DeviceCopy> GraphOutput<T> {
    /// Its length in elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The last launch's allocation, as a buffer whose home is `home` (a stream of the graph's
    /// device): `home` waits for that launch, and the buffer frees the memory when dropped
    /// (`cudaFreeAsync` there), after its uses, as any buffer. Until then, no launch of the
    /// graph is made.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] before a launch, after a take of the same launch, and while the
    /// graph's last executable was instantiated with `auto_free_on_launch` (its next launch
    /// frees the output, which a buffer would outlive; the flag of the last instantiation
    /// counts, even once that executable is dropped); [`Error::DeviceMismatch`];
    /// [`Error::CaptureMisuse`] while `home` is being captured; [`Error::InsideHostFn`];
    /// CUDA's errors (the output is then not taken).
    pub fn take<S: AsStream>(&self, home: S) -> Result<DeviceBuffer<T, S>> {
        let stream = home.as_stream();
        same_device("a graph's output is taken on a stream of its device", self.device, stream.device())?;
        // Taken under the lock, before the wait: no launch and no other take meanwhile.
        let launched = {
            let mut state = self.slot.lock();
            if self.slot.auto_free.load(Ordering::Relaxed) {
                return Err(Error::GraphMisuse(
                    "an auto-free executable's output is freed by its next launch: it is not taken",
                ));
            }
            match std::mem::replace(&mut *state, OutputState::Taken) {
                OutputState::Launched(launched) => launched,
                other => {
                    *state = other;
                    return Err(Error::GraphMisuse("no launch left an output to take (none yet, or it was taken)"));
                }
            }
        };
        let waited = stream
            .outside_transitions(InCapture::Refused("a graph's output is not taken on a capturing stream"), || {
                stream.wait_raw(launched.as_raw(), 0)
            });
        if let Err(error) = waited {
            *self.slot.lock() = OutputState::Launched(launched);
            return Err(error);
        }
        drop((stream, launched));
        Ok(DeviceBuffer::adopt(home, self.address, self.len, Arc::clone(&self.slot)))
    }
}
