//! Counts of the handles this crate owns right now, for leak checks: a test (or a long-running
//! service) can compare them before and after. Counted with relaxed atomics, only where an owned
//! handle is created or given up.

use std::sync::atomic::{AtomicUsize, Ordering};

static STREAMS: AtomicUsize = AtomicUsize::new(0);
static EVENTS: AtomicUsize = AtomicUsize::new(0);

/// How many owned streams exist ([`crate::Ownership::Owned`]; `into_raw` gives one up).
pub fn live_streams() -> usize {
    STREAMS.load(Ordering::Relaxed)
}

/// How many owned events exist.
pub fn live_events() -> usize {
    EVENTS.load(Ordering::Relaxed)
}

pub(crate) fn stream_created() {
    STREAMS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn stream_released() {
    STREAMS.fetch_sub(1, Ordering::Relaxed);
}

pub(crate) fn event_created() {
    EVENTS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn event_released() {
    EVENTS.fetch_sub(1, Ordering::Relaxed);
}
