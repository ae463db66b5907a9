//! The reactor's polling passes, as the rest of the crate sees them: a count that is odd while
//! a pass runs. A record into a possible capture (`record_during_captures`) marks its event
//! first, then waits for the pass in progress ([`wait_for_pass`]): later passes see the mark
//! and never query the event. A dropped pending future waits the same way. Here, below
//! streams, so that records can wait without knowing the reactor; the reactor itself is in
//! [`completion`](crate::completion).
//!
//! The count, a pass in progress (through which the reactor reads each event's mark before its
//! query, [`Pass::query`]) and the wait are written in
//! [`reactor_passes_core`](super::reactor_passes_core), with no CUDA, so that the loom model
//! (`cuda-stream/tests/loom_reactor.rs`) checks that same source with the record state's core;
//! this module re-exports them.

pub(crate) use super::reactor_passes_core::{Pass, Polled, in_forked_child, mark_forked_child, wait_for_pass};
