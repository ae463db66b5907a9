//! The host-side core of the capture-transition lock: the lock itself, what this thread holds of
//! it (holds nest per thread), the read side a call takes from its check to its call
//! ([`no_capture_transitions`]) and the write side a transition takes ([`capture_transition`]),
//! refused inside a hold or a fast call. What the lock is for is told in
//! [`transitions`](super::transitions), which re-exports what the crate calls and turns a
//! refusal into the crate's error.
//!
//! No CUDA, and no path of the crate but [`shim`](super::shim), where its lock, thread-local and
//! statics come from, and [`fast_call_core`](super::fast_call_core), which says whether this
//! thread is in a fast call: the crate builds it with std's, and the loom model
//! `cuda-stream/tests/loom_joins.rs` includes this same file (`#[path]`), with the fast-call
//! core, beside a `shim` of loom's. It checks that no stream joins a capture between a check of
//! its capture status and the call made on it.

use super::fast_call_core::in_fast_call;
use super::shim::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, shared_statics, thread_local};
use std::cell::Cell;

shared_statics! {
    /// Serializes capture transitions (begins, ends, joins, nodes added to a capture's graph by
    /// hand) with every call that acts on a stream's capture status or reads it while captures
    /// may exist. The driver is not safe against `cudaStreamAddCallback` on a stream while
    /// another thread begins or ends a capture of it, nor against `cudaStreamGetCaptureInfo` on a
    /// stream whose capture another thread ends (probed on CUDA 13.0, driver 580: segmentation
    /// faults inside `libcuda`), so this crate never lets the two overlap: enqueues and reads
    /// share the lock, transitions take it alone.
    static CAPTURE_TRANSITIONS: RwLock<()> = RwLock::new(());
}

/// What this thread holds of [`CAPTURE_TRANSITIONS`]: a call that holds a side, and the calls
/// it makes meanwhile (a record inside a wait, a status read under a join) take nothing more.
/// Taking the lock again would deadlock: the write side under the read side, or the read side
/// twice while a writer waits (writers go first).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Holding {
    Nothing,
    ReadSide,
    WriteSide,
}

thread_local! {
    static HOLDING: Cell<Holding> = const { Cell::new(Holding::Nothing) };
}

fn holding() -> Holding {
    HOLDING.try_with(Cell::get).unwrap_or(Holding::Nothing)
}

fn set_holding(holding: Holding) {
    let _ = HOLDING.try_with(|cell| cell.set(holding));
}

/// The read side of the capture-transition lock, or nothing where this thread already holds a
/// side of it (further out in the same call) or is in a fast call: no capture of this crate
/// begins, ends or is joined, and no node is added to a capture's graph by hand, while it lives.
pub(crate) struct NoTransitions {
    guard: Option<RwLockReadGuard<'static, ()>>,
}

impl Drop for NoTransitions {
    fn drop(&mut self) {
        if self.guard.is_some() {
            set_holding(Holding::Nothing);
        }
    }
}

/// Held while a call must not overlap a capture transition (an enqueue, a capture-status read,
/// a query while captures are in progress): none is made meanwhile. Nests: a call of this
/// thread that already holds a side takes nothing more.
pub(crate) fn no_capture_transitions() -> NoTransitions {
    // Inside a fast call no transition can be made either: a begin waits for it, and no
    // capture of this crate existed when it began.
    if holding() != Holding::Nothing || in_fast_call() {
        return NoTransitions { guard: None };
    }
    let guard = CAPTURE_TRANSITIONS.read().unwrap_or_else(PoisonError::into_inner);
    set_holding(Holding::ReadSide);
    NoTransitions { guard: Some(guard) }
}

/// The write side of the capture-transition lock, held by a capture transition of this crate (a
/// begin, an end, a join, a node added to a capture's graph by hand).
pub(crate) struct Transition {
    _guard: RwLockWriteGuard<'static, ()>,
}

impl Drop for Transition {
    fn drop(&mut self) {
        set_holding(Holding::Nothing);
    }
}

/// A transition refused by [`capture_transition`]: this thread holds a side of the lock or is
/// in a fast call, where waiting for the write side would wait for the caller itself.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct InsideAHold;

/// Takes the write side for a capture transition; refused ([`InsideAHold`]) on a thread inside
/// a call that holds the read side or a fast call's announcement (the crate's own enqueues and
/// reads, which make no transition), or inside another transition.
pub(crate) fn capture_transition() -> Result<Transition, InsideAHold> {
    if holding() != Holding::Nothing || in_fast_call() {
        return Err(InsideAHold);
    }
    let guard = CAPTURE_TRANSITIONS.write().unwrap_or_else(PoisonError::into_inner);
    set_holding(Holding::WriteSide);
    Ok(Transition { _guard: guard })
}
