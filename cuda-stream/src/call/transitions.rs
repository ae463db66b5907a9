//! The capture-transition lock: capture transitions (begins, ends, joins, nodes added to a
//! capture's graph by hand) take its write side, every call that acts on a stream's capture
//! status or reads it while captures may exist its read side. Holds nest per thread: a call
//! made inside another's hold takes nothing more, and a transition there is refused.
//!
//! It sits above [`live_captures`](super::live_captures) (whose refusals a query checks under
//! the read side) and [`uncaptured_calls`](super::uncaptured_calls) (a fast call is a hold too:
//! no transition can be made inside one).

use super::capture_mode::ignore_other_threads_captures;
use super::live_captures::{any, refuse_unsafe_call};
use super::uncaptured_calls::in_fast_call;
use crate::ffi::error::{Error, Result};
use std::cell::Cell;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Serializes capture transitions (begins, ends, joins, nodes added to a capture's graph by
/// hand) with every call that acts on a stream's capture status or reads it while captures may
/// exist. The driver is not safe against `cudaStreamAddCallback` on a stream while another
/// thread begins or ends a capture of it, nor against `cudaStreamGetCaptureInfo` on a stream
/// whose capture another thread ends (probed on CUDA 13.0, driver 580: segmentation faults
/// inside `libcuda`), so this crate never lets the two overlap: enqueues and reads share the
/// lock, transitions take it alone.
static CAPTURE_TRANSITIONS: RwLock<()> = RwLock::new(());

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
/// side of it (further out in the same call): no capture of this crate begins, ends or is
/// joined, and no node is added to a capture's graph by hand, while it lives.
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
    let guard = CAPTURE_TRANSITIONS.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    set_holding(Holding::ReadSide);
    NoTransitions { guard: Some(guard) }
}

/// What a "potentially unsafe" call (a query, a synchronize) takes first: while captures of
/// this crate are in progress, the hold that keeps them from beginning or ending, under which
/// the call was checked against what they forbid on this thread ([`refuse_unsafe_call`]);
/// `None` (one load, no lock) while none is.
#[inline(always)]
pub(crate) fn unsafe_call_hold() -> Result<Option<NoTransitions>> {
    ignore_other_threads_captures();
    if any() { checked_hold().map(Some) } else { Ok(None) }
}

#[cold]
#[inline(never)]
fn checked_hold() -> Result<NoTransitions> {
    let transitions = no_capture_transitions();
    refuse_unsafe_call()?;
    Ok(transitions)
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

/// Takes the write side for a capture transition.
///
/// # Errors
/// [`Error::CaptureMisuse`] on a thread inside a call that holds the read side or a fast call's
/// announcement (the crate's own enqueues and reads, which make no transition: a defect of the
/// crate if reached), or inside another transition: waiting there for the write side would
/// wait for the caller itself.
pub(crate) fn capture_transition() -> Result<Transition> {
    if holding() != Holding::Nothing || in_fast_call() {
        return Err(Error::CaptureMisuse(
            "a capture cannot begin, end or be joined from inside a call that holds the \
             capture-transition lock",
        ));
    }
    let guard = CAPTURE_TRANSITIONS.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    set_holding(Holding::WriteSide);
    Ok(Transition { _guard: guard })
}
