//! Counts of the handles this crate owns right now, for leak checks: a test (or a long-running
//! service) can compare them before and after.
//!
//! The counts sit on the hot path of every create and destroy, so each thread keeps its own
//! (updated with a plain store, not a locked read-modify-write); reading a total adds them up,
//! and a thread's count is folded into the total when the thread exits.

use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};

/// One count: what exited threads left behind, and the live threads' own counts.
struct Counter {
    retired: AtomicIsize,
    threads: Mutex<Vec<Arc<AtomicIsize>>>,
}

impl Counter {
    const fn new() -> Counter {
        Counter { retired: AtomicIsize::new(0), threads: Mutex::new(Vec::new()) }
    }

    fn register(&self) -> Arc<AtomicIsize> {
        let slot = Arc::new(AtomicIsize::new(0));
        self.lock().push(Arc::clone(&slot));
        slot
    }

    fn retire(&self, slot: &Arc<AtomicIsize>) {
        let mut threads = self.lock();
        self.retired.fetch_add(slot.load(Ordering::Relaxed), Ordering::Relaxed);
        threads.retain(|other| !Arc::ptr_eq(other, slot));
    }

    fn total(&self) -> isize {
        let threads = self.lock();
        let live: isize = threads.iter().map(|slot| slot.load(Ordering::Relaxed)).sum();
        self.retired.load(Ordering::Relaxed) + live
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<AtomicIsize>>> {
        self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

static STREAMS: Counter = Counter::new();
static EVENTS: Counter = Counter::new();

/// This thread's counts, registered on first use and folded into the totals at thread exit.
struct Local {
    streams: Arc<AtomicIsize>,
    events: Arc<AtomicIsize>,
}

impl Drop for Local {
    fn drop(&mut self) {
        STREAMS.retire(&self.streams);
        EVENTS.retire(&self.events);
    }
}

thread_local! {
    static LOCAL: Local = Local { streams: STREAMS.register(), events: EVENTS.register() };
}

fn adjust(counter: &'static Counter, pick: fn(&Local) -> &AtomicIsize, delta: isize) {
    let counted = LOCAL.try_with(|local| {
        let slot = pick(local);
        // Only this thread writes its slot: a plain store is enough.
        slot.store(slot.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
    });
    if counted.is_err() {
        // During this thread's exit, after its counts were folded in.
        counter.retired.fetch_add(delta, Ordering::Relaxed);
    }
}

/// How many [`Stream`](crate::Stream)s exist (`into_raw` gives one up). Not clamped: a
/// negative value would mean a stream released twice.
pub fn live_streams() -> isize {
    STREAMS.total()
}

/// How many owned [`Event`](crate::Event)s exist (not the crate's own marker events). Not
/// clamped: a negative value would mean an event released twice.
pub fn live_events() -> isize {
    EVENTS.total()
}

pub(crate) fn stream_created() {
    adjust(&STREAMS, |local| &local.streams, 1);
}

pub(crate) fn stream_released() {
    adjust(&STREAMS, |local| &local.streams, -1);
}

pub(crate) fn event_created() {
    adjust(&EVENTS, |local| &local.events, 1);
}

pub(crate) fn event_released() {
    adjust(&EVENTS, |local| &local.events, -1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_threads_that_exit() {
        let before = live_events();
        event_created();
        std::thread::spawn(|| {
            event_created();
            event_created();
            event_released();
        })
        .join()
        .unwrap();
        assert_eq!(live_events(), before + 2);
        std::thread::spawn(|| {
            event_released();
            event_released();
        })
        .join()
        .unwrap();
        assert_eq!(live_events(), before);
    }
}
