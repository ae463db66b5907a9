//! The capture-transition lock: capture transitions (begins, ends, joins, nodes added to a
//! capture's graph by hand) take its write side, every call that acts on a stream's capture
//! status or reads it while captures may exist its read side. Holds nest per thread: a call
//! made inside another's hold takes nothing more, and a transition there is refused.
//!
//! It sits above [`live_captures`](super::live_captures) (whose refusals a query checks under
//! the read side) and [`uncaptured_calls`](super::uncaptured_calls) (a fast call is a hold too:
//! no transition can be made inside one).
//!
//! The lock, the nesting of its holds and the refusal of a transition inside one are written in
//! [`transitions_core`](super::transitions_core), with no CUDA, so that the loom model
//! (`cuda-stream/tests/loom_joins.rs`) checks that same source with the fast calls' core; this
//! module re-exports them, and gives a refused transition the crate's error.

use super::capture_mode::ignore_other_threads_captures;
use super::live_captures::{any, refuse_unsafe_call};
use super::transitions_core::InsideAHold;
use crate::ffi::error::{Error, Result};

// The lock, the per-thread nesting of its holds and the read side are kept in the transitions'
// core, which the loom model checks.
pub(crate) use super::transitions_core::{NoTransitions, Transition, no_capture_transitions};

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

/// Takes the write side for a capture transition.
///
/// # Errors
/// [`Error::CaptureMisuse`] on a thread inside a call that holds the read side or a fast call's
/// announcement (the crate's own enqueues and reads, which make no transition: a defect of the
/// crate if reached), or inside another transition: waiting there for the write side would
/// wait for the caller itself.
pub(crate) fn capture_transition() -> Result<Transition> {
    super::transitions_core::capture_transition().map_err(|InsideAHold| {
        Error::CaptureMisuse(
            "a capture cannot begin, end or be joined from inside a call that holds the \
             capture-transition lock",
        )
    })
}
