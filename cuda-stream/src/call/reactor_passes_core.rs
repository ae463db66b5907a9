//! The host-side core of the reactor's polling passes: the pass count (odd while a pass runs),
//! a pass in progress ([`Pass`]: begun, then every event it queries read through it, then
//! ended), the wait for the pass in progress ([`wait_for_pass`]) and the mark of a forked
//! child. What the passes are for is told in [`reactor_passes`](super::reactor_passes), which
//! re-exports what the crate calls.
//!
//! No CUDA, and no path of the crate but [`shim`](super::shim), where its atomics, fence, spin
//! wait's yield and statics come from: the event a pass queries, its mark and its query in
//! CUDA, come through the [`Polled`] trait. The crate builds it with std's, and the loom model
//! `cuda-stream/tests/loom_reactor.rs` includes this same file (`#[path]`), with the record
//! state's core, beside a `shim` of loom's. It checks that a pass never queries an event in
//! CUDA beside, or after, a record of it into a capture that marked it, and that a dropped
//! future's event is queried no more once its drop has returned.

use super::shim::{AtomicBool, AtomicU64, Ordering, fence, shared_statics, yield_now};

shared_statics! {
    /// Passes begun and ended (odd while one runs): a waiter waits for the pass it saw running,
    /// never for the reactor's lock, so neither side can keep the other out.
    static PASSES: AtomicU64 = AtomicU64::new(0);
    /// Set in a child process made by `fork` after the reactor started: it has no reactor thread.
    static FORKED: AtomicBool = AtomicBool::new(false);
}

/// An event as a pass sees it: the mark of its record state, then its query in CUDA. Behind a
/// trait so that the core holds no CUDA (the loom model stands in for both).
pub(crate) trait Polled {
    /// What a refusal or a failed query says.
    type Error;

    /// Refuses the event if its last record went (or may have gone) into a capture: one load of
    /// its record state's word.
    fn refuse_captured(&self) -> Result<(), Self::Error>;

    /// The query in CUDA (`cuEventQuery`): whether the work before the event's last record has
    /// completed.
    fn query(&self) -> Result<bool, Self::Error>;
}

/// A polling pass in progress: the count is odd from [`Pass::begin`] until it drops (also on
/// unwind). Every event the pass queries is read through it ([`Pass::query`]), so its mark is
/// read after the pass has begun.
#[derive(Debug)]
pub(crate) struct Pass(());

impl Pass {
    /// Begins a pass. Called by the reactor under its polling lock.
    pub(crate) fn begin() -> Pass {
        PASSES.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `wait_for_pass`: either that waiter sees this pass begun, or
        // this pass sees what the waiter did before (a mark, a drop).
        fence(Ordering::SeqCst);
        Pass(())
    }

    /// Queries `event` in this pass, unless it is marked captured: a record into a capture marks
    /// its event before it waits for the pass in progress, so a pass that begins later sees the
    /// mark, and the event is never queried while its last record may be a captured one.
    pub(crate) fn query<P: Polled>(&self, event: &P) -> Result<bool, P::Error> {
        event.refuse_captured()?;
        event.query()
    }
}

impl Drop for Pass {
    /// Ends the pass: a waiter that sees the count move past it sees the pass's queries
    /// returned (Release).
    fn drop(&mut self) {
        PASSES.fetch_add(1, Ordering::Release);
    }
}

/// Marks a child process made by `fork`: no reactor runs there. Async-signal-safe.
pub(crate) fn mark_forked_child() {
    FORKED.store(true, Ordering::SeqCst);
}

/// Whether this is a child process made by `fork` after the reactor started.
pub(crate) fn in_forked_child() -> bool {
    FORKED.load(Ordering::SeqCst)
}

/// Waits for the reactor's polling pass in progress, if any: after it, every pass sees what
/// the caller did before (a mark, a dropped future). Takes no lock; in a forked child, returns
/// at once.
pub(crate) fn wait_for_pass() {
    if in_forked_child() {
        return;
    }
    // Pairs with the fence in `Pass::begin`: either this load sees that pass begun, or that
    // pass sees the caller's mark or drop (the signal's count fell before this).
    fence(Ordering::SeqCst);
    let seen = PASSES.load(Ordering::SeqCst);
    if seen % 2 == 1 {
        while PASSES.load(Ordering::Acquire) == seen {
            yield_now();
        }
    }
}
