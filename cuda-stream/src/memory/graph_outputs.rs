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
//!   alive; an auto-free executable's outputs are never taken (its next launch would free them
//!   under the buffer), and its launches free them.
//! * The free must come before the next launch: the buffer's drop records an event on its home
//!   stream after its free, and the next launch waits for it. A buffer that leaked instead of
//!   freeing leaves the allocation allocated: CUDA then refuses the next launch (an
//!   auto-free executable is never given a buffer).
//! * The address is the same at every launch, and one executable of the graph exists at a
//!   time (CUDA refuses a second); the state is the graph's, which its executables share.

use super::buffer::DeviceBuffer;
use super::capture_buffer::CaptureBuffer;
use super::{DeviceCopy, graph_nodes};
use crate::device::{Device, same_device};
use crate::event::Event;
use crate::ffi::error::{Error, Result};
use crate::graph::capture::{Capture, CaptureMode};
use crate::stream::enqueue::InCapture;
use crate::stream::{AsStream, BorrowedStream, StreamRef};
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
    /// A buffer's free could not be ordered before a launch: no launch is made again.
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
            OutputState::Launched(_) if auto_free => Ok(()),
            OutputState::Launched(_) => Err(Error::GraphMisuse(
                "the last launch's output was not taken (CUDA refuses a launch while it is allocated): take it with GraphOutput::take, and drop the buffer",
            )),
            OutputState::Taken => Err(Error::GraphMisuse(
                "a buffer taken from the last launch's output is alive: the next launch would allocate it again",
            )),
            OutputState::Unordered => {
                Err(Error::GraphMisuse("an output's free could not be ordered before the next launch"))
            }
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
        let slot = Arc::new(OutputSlot::new());
        let mut memory = graph_nodes::held_memory_of(self.memory())?;
        memory.keep_output(Arc::clone(&slot));
        self.hold_memory(Arc::new(memory));
        let address = NonNull::new(buffer.allocation().at(0).cast::<T>()).ok_or(Error::Size("no address"))?;
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
    /// [`Error::GraphMisuse`] before a launch, after a take of the same launch, and for an
    /// executable instantiated with `auto_free_on_launch` (its next launch frees the output,
    /// which a buffer would outlive); [`Error::DeviceMismatch`]; [`Error::CaptureMisuse`] while
    /// `home` is being captured; CUDA's errors (the output is then not taken).
    pub fn take<S: AsStream>(&self, home: S) -> Result<DeviceBuffer<T, GraphOutputHome<S>>> {
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
        let home = GraphOutputHome { stream: home, slot: Arc::clone(&self.slot) };
        Ok(DeviceBuffer::adopt(home, self.address, self.len))
    }
}
/// The home stream of a buffer taken from a graph's output ([`GraphOutput::take`]): lends `S`'s
/// stream; when the buffer drops (after its free), records the event the graph's next launch
/// waits for.
pub struct GraphOutputHome<S: AsStream> {
    stream: S,
    slot: Arc<OutputSlot>,
}

impl<S: AsStream> std::fmt::Debug for GraphOutputHome<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphOutputHome").field("stream", &self.stream.as_stream().as_raw()).finish_non_exhaustive()
    }
}

impl<S: AsStream> AsStream for GraphOutputHome<S> {
    fn as_stream(&self) -> BorrowedStream<'_> {
        self.stream.as_stream()
    }
}

impl<S: AsStream> Drop for GraphOutputHome<S> {
    fn drop(&mut self) {
        // The buffer's drop has enqueued its free on this stream (or leaked the memory: then
        // CUDA refuses the next launch, the allocation being still allocated).
        let stream = self.stream.as_stream();
        let freed = Event::internal(stream.device()).and_then(|event| {
            stream
                .outside_transitions(InCapture::Refused("not into a capture"), || stream.record_raw(event.as_raw(), 0))
                .map(|()| event)
        });
        *self.slot.lock() = match freed {
            Ok(event) => OutputState::Free(Some(event)),
            Err(_) => OutputState::Unordered,
        };
    }
}
