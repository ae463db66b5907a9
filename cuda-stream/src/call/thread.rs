//! Which thread is calling: an identity no other thread of the process ever gets. The
//! per-thread default stream and the captures that end on the thread that began them are tied
//! to it.

use std::sync::atomic::{AtomicU64, Ordering};

/// A number for the calling thread that no other thread of the process ever gets, even after
/// this one exits (unlike the address of a thread-local, which the next thread reuses).
pub(crate) fn thread_identity() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static IDENTITY: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    IDENTITY.with(|identity| *identity)
}

/// The calling thread's name, if it has one, for reports. Never panics: called from a drop
/// that runs while the thread's locals are torn down, where `std::thread::current` may panic,
/// it gives `None`.
pub(crate) fn thread_name() -> Option<String> {
    std::panic::catch_unwind(|| std::thread::current().name().map(str::to_owned)).ok().flatten()
}
