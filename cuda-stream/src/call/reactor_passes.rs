//! The reactor's polling passes, as the rest of the crate sees them: a count that is odd while
//! a pass runs. A record into a possible capture (`record_during_captures`) marks its event
//! first, then waits for the pass in progress ([`wait_for_pass`]): later passes see the mark
//! and never query the event. A dropped pending future waits the same way. Here, below
//! streams, so that records can wait without knowing the reactor; the reactor itself is in
//! [`completion`](crate::completion).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Passes begun and ended (odd while one runs): a waiter waits for the pass it saw running,
/// never for the reactor's lock, so neither side can keep the other out.
static PASSES: AtomicU64 = AtomicU64::new(0);
/// Set in a child process made by `fork` after the reactor started: it has no reactor thread.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Called by the reactor, under its polling lock, as a pass begins.
pub(crate) fn begun() {
    PASSES.fetch_add(1, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Called by the reactor as a pass ends (also on unwind).
pub(crate) fn ended() {
    PASSES.fetch_add(1, Ordering::Release);
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
/// the caller did before (a dropped future). Takes no lock; in a forked child, returns at once.
pub(crate) fn wait_for_pass() {
    if in_forked_child() {
        return;
    }
    // Pairs with the fence in `begun`: either this load sees that pass begun, or that
    // pass sees the caller's drop (the signal's count fell before this).
    std::sync::atomic::fence(Ordering::SeqCst);
    let seen = PASSES.load(Ordering::SeqCst);
    if seen % 2 == 1 {
        while PASSES.load(Ordering::Acquire) == seen {
            std::thread::yield_now();
        }
    }
}
