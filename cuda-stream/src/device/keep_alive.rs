//! Rust values a CUDA graph owns: each moved into a CUDA user object that the graph holds, and
//! dropped on CUDA's thread once no graph or executable made from it needs it. Used by records
//! and waits that put an external event into a capture, and by a capture's host functions.

use super::Device;
use crate::ffi::error::{Result, check};
use crate::ffi::inside_host_fn::run_guarded;
use crate::sys;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The lock that serializes every change this crate makes to a capture's graph: work enqueued
/// on a capturing stream, nodes added by hand, references the graph is given, and every read
/// of a capturing stream's dependencies (see
/// [`add_to_capture`](crate::stream::capture_node::add_to_capture)).
///
/// NVIDIA's graph objects "are not internally synchronized and must not be accessed
/// concurrently from multiple threads", and two threads may reach the graph of one capture at
/// once: the capturing thread's work, and another thread's on a stream it joined to the capture,
/// or
/// `Capture::launch_host_fn` on one thread while `wait_stream` and external records reach the
/// same graph from any other. Taken under the read side of the capture-transition lock (or a
/// transition's write side, or inside a fast call), and before any event's record turn, never
/// after one (a raw launcher, which runs under it, may record). It nests per thread: a call
/// made during this thread's turn takes nothing more.
pub(crate) fn graph_mutations() -> GraphTurn {
    static GRAPH_MUTATIONS: Mutex<()> = Mutex::new(());
    if IN_GRAPH_TURN.try_with(Cell::get).unwrap_or(false) {
        return GraphTurn { guard: None };
    }
    let guard = GRAPH_MUTATIONS.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = IN_GRAPH_TURN.try_with(|cell| cell.set(true));
    GraphTurn { guard: Some(guard) }
}

thread_local! {
    /// Whether this thread holds the [graph-mutation lock](graph_mutations).
    static IN_GRAPH_TURN: Cell<bool> = const { Cell::new(false) };
}

/// This thread's turn at changing captures' graphs ([`graph_mutations`]); nothing more where
/// it had one already.
pub(crate) struct GraphTurn {
    guard: Option<MutexGuard<'static, ()>>,
}

impl Drop for GraphTurn {
    fn drop(&mut self) {
        if self.guard.is_some() {
            let _ = IN_GRAPH_TURN.try_with(|cell| cell.set(false));
        }
    }
}

/// Hands `value` to `graph` as a CUDA user object that the graph owns (moved, not retained
/// twice): CUDA drops it when the graph and everything made from it are done with it. Returns
/// where it lives until then. Takes the [graph-mutation lock](graph_mutations).
pub(crate) fn keep_alive<T: Send + 'static>(
    graph: sys::cudaGraph_t,
    device: Device,
    value: Box<T>,
) -> Result<*const T> {
    let mut value = Some(value);
    let kept = keep_alive_locked(graph, device, &mut value, &graph_mutations());
    // A value the graph did not take drops here, after the lock.
    drop(value);
    kept
}

/// [`keep_alive`], for a caller that holds the [graph-mutation lock](graph_mutations). The value
/// is taken out of `value` only once CUDA has it: on an error before that it stays there, for
/// the caller to drop after its locks (a closure's drop may call into this crate).
pub(crate) fn keep_alive_locked<T: Send + 'static>(
    graph: sys::cudaGraph_t,
    device: Device,
    value: &mut Option<Box<T>>,
    _serialized: &GraphTurn,
) -> Result<*const T> {
    let _current = device.make_current()?;
    let Some(taken) = value.take() else {
        return Err(crate::ffi::error::Error::GraphMisuse("a value given to a graph twice"));
    };
    let data = Box::into_raw(taken);
    let mut object: sys::cudaUserObject_t = std::ptr::null_mut();
    // SAFETY: `release::<T>` takes back exactly this box, once, when CUDA drops the object.
    // The flag is the one CUDA requires.
    let code = unsafe {
        sys::cudaUserObjectCreate(
            &mut object,
            data.cast(),
            Some(release::<T>),
            1,
            sys::cudaUserObjectFlags::cudaUserObjectNoDestructorSync.0 as _,
        )
    };
    if let Err(error) = check(code, "cudaUserObjectCreate") {
        // SAFETY: CUDA did not take `data`: we still own the box, handed back to the caller.
        *value = Some(unsafe { Box::from_raw(data) });
        return Err(error);
    }
    // SAFETY: `graph` is a live graph that only this thread changes now (a capture's, under
    // the graph-mutation lock, or a builder's, borrowed exclusively); our one reference moves
    // to it.
    let code = unsafe {
        sys::cudaGraphRetainUserObject(graph, object, 1, sys::cudaUserObjectRetainFlags::cudaGraphUserObjectMove.0 as _)
    };
    if let Err(error) = check(code, "cudaGraphRetainUserObject") {
        // SAFETY: we still hold the one reference; releasing it makes CUDA run `release`.
        let _ = check(unsafe { sys::cudaUserObjectRelease(object, 1) }, "cudaUserObjectRelease");
        return Err(error);
    }
    Ok(data)
}

/// A user object's destructor: drops the box on CUDA's thread, as a host function would run.
///
/// # Safety
/// `data` must come from `Box::into_raw(Box<T>)` in [`keep_alive`], and be passed here once.
unsafe extern "C" fn release<T>(data: *mut c_void) {
    // SAFETY: the caller's contract.
    let value = unsafe { Box::from_raw(data.cast::<T>()) };
    run_guarded(None, move || drop(value));
}
