//! Memory that a graph's nodes use and the graph holds, as this layer sees it: an opaque value
//! (the memory layer's, which knows buffers) that each launch of an executable asks to order
//! the launch with the memory's other uses. A graph, its clones and its executables each hold
//! it, so no launch outlives the memory its memcpy and memset nodes touch.
//!
//! A capture of this crate holds that memory for its graph in a [`CaptureHolds`], which the
//! captures in progress share with the memory layer by their id ([`holds_of`]): a buffer's own
//! copy, fill or typed launch on any stream of the capture, on any thread, then adds the buffer
//! to what the graph will hold, under the capture-transition hold that the capture's end waits
//! for.

use crate::device::Device;
use crate::ffi::error::Result;
use crate::stream::StreamRef;
use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The memory a graph's nodes use, held by the graph (see the [module docs](self)).
pub(crate) trait GraphMemory: Any + Send + Sync + fmt::Debug {
    /// Runs `launch` (one launch of a graph on `stream`, which sets its flag once CUDA took the
    /// launch, whatever it returns after), ordered after the earlier uses of the memory it
    /// conflicts with, and noted for the later ones and the frees.
    ///
    /// # Errors
    /// Those of the ordering, and `launch`'s.
    fn ordered_launch(&self, stream: &StreamRef, launch: &mut dyn FnMut(&mut bool) -> Result<()>) -> Result<()>;

    /// What names the nodes, without the memory: what an executable keeps of the graph it was
    /// made from (to check a node whose memory it is asked to change), holding nothing.
    fn nodes_only(&self) -> Arc<dyn GraphMemory>;

    /// The memory without the names of the nodes (a clone's: they are the original's nodes).
    fn without_nodes(&self) -> Arc<dyn GraphMemory>;

    /// Whether the graph may have one executable at a time only (its allocations outlive its
    /// launches, and their state is the graph's).
    fn one_executable(&self) -> bool;

    /// Notes how an executable of the graph was instantiated (`auto_free`: with
    /// `cudaGraphInstantiateFlagAutoFreeOnLaunch`).
    fn instantiated(&self, auto_free: bool);

    /// The value itself, for the memory layer to grow it by a node (no trait upcasting at the
    /// crate's minimum Rust).
    fn as_any(&self) -> &dyn Any;
}

/// What a capture of this crate holds for its graph: the memory its work uses so far, and what
/// must run on its stream once it has ended, before the graph is handed out. Shared with the
/// registry of captures in progress ([`holds_of`]), so that a buffer's own call on any stream of
/// the capture, on any thread, adds to it; every change is made under the capture-transition
/// hold, where the capture cannot end, and `end` takes what it holds under the transition.
pub(crate) struct CaptureHolds {
    /// The captured stream's identity ([`StreamRef::identity`]): the stream lives as long as
    /// the capture, so no other live stream has it meanwhile.
    origin: (Device, usize, u64),
    memory: Mutex<Option<Arc<dyn GraphMemory>>>,
    after_end: Mutex<Vec<AfterEnd>>,
}

/// Work on the captured stream once its capture has ended (not capturing any more), before the
/// graph is handed out: a mark of a buffer's home uses, which could not be recorded while the
/// stream was captured.
pub(crate) type AfterEnd = Box<dyn FnOnce(&StreamRef) -> Result<()> + Send>;

impl fmt::Debug for CaptureHolds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureHolds").field("memory", &*lock(&self.memory)).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CaptureHolds {
    /// Holds for a capture of `origin`, what the graph it captures into holds already.
    pub(crate) fn new(origin: &StreamRef, memory: Option<Arc<dyn GraphMemory>>) -> CaptureHolds {
        CaptureHolds { origin: origin.identity(), memory: Mutex::new(memory), after_end: Mutex::default() }
    }

    /// The captured stream's device, the graph's.
    pub(crate) fn device(&self) -> Device {
        self.origin.0
    }

    /// Whether `stream` (alive) is the captured stream.
    pub(crate) fn is_origin(&self, stream: &StreamRef) -> bool {
        stream.identity() == self.origin
    }

    /// Replaces the memory held by `grow`'s result, made from it under the lock (nothing held
    /// meanwhile is lost); on error nothing changes.
    ///
    /// # Errors
    /// `grow`'s.
    pub(crate) fn grow(
        &self,
        grow: impl FnOnce(Option<Arc<dyn GraphMemory>>) -> Result<Arc<dyn GraphMemory>>,
    ) -> Result<()> {
        let mut memory = lock(&self.memory);
        let grown = grow(memory.clone())?;
        let old = memory.replace(grown);
        // The old value drops after the lock.
        drop(memory);
        drop(old);
        Ok(())
    }

    /// Runs `work` on the captured stream once the capture has ended.
    pub(crate) fn after_end(&self, work: AfterEnd) {
        lock(&self.after_end).push(work);
    }

    /// What the graph holds, and the work to run before it is handed out.
    pub(crate) fn take(&self) -> (Option<Arc<dyn GraphMemory>>, Vec<AfterEnd>) {
        (lock(&self.memory).take(), std::mem::take(&mut *lock(&self.after_end)))
    }
}

/// The captures of this crate in progress that hold memory for their graph, by CUDA's capture
/// id. Changed under the capture-transition lock's write side (a begin, an end), read under its
/// read side.
static REGISTERED: Mutex<Vec<(u64, Arc<CaptureHolds>)>> = Mutex::new(Vec::new());

/// Makes `holds` capture `id`'s, from its begin to its end.
pub(crate) fn register(id: u64, holds: &Arc<CaptureHolds>) {
    lock(&REGISTERED).push((id, Arc::clone(holds)));
}

/// Capture `id` has ended (or failed to begin): no call adds to its holds any more.
pub(crate) fn unregister(id: u64) {
    lock(&REGISTERED).retain(|(registered, _)| *registered != id);
}

/// What capture `id` holds, if it is a capture of this crate in progress that holds memory
/// (not a foreign capture, nor one into a graph builder's level).
pub(crate) fn holds_of(id: u64) -> Option<Arc<CaptureHolds>> {
    lock(&REGISTERED).iter().find(|(registered, _)| *registered == id).map(|(_, holds)| Arc::clone(holds))
}
