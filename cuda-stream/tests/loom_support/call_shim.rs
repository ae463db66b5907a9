//! What the call layer's cores (`src/call/fast_call_core.rs`, `src/call/transitions_core.rs`,
//! `src/call/reactor_passes_core.rs`) take from `super::shim` under loom, for the loom checks
//! that include them (`loom_fast_calls.rs`, `loom_joins.rs`, each as `#[path] mod shim`;
//! `loom_reactor.rs` glob-imports it into its `shim`, beside a fence and a 64-bit atomic of its
//! own that its seeded bugs can weaken): loom's atomics, locks,
//! `Arc`, thread-locals and statics where `src/call/shim.rs` has std's, and `membarrier` as a
//! `SeqCst` fence on both sides (the waiter's, and the fast side's compiler fence), which a
//! seeded bug can take away from the fast side ([`without_membarrier`]).

use std::cell::Cell;

pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering, fence};
pub(crate) use loom::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub(crate) use loom::thread::yield_now;
pub(crate) use std::sync::PoisonError;

/// loom's thread-locals, which live for one thread of one execution. Their macro takes no
/// `const { .. }` initializer (std's does): the block's contents are handed to it.
macro_rules! loom_thread_local {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = const { $init:expr };)*) => {
        loom::thread_local! { $($(#[$attr])* static $name: $t = $init;)* }
    };
}
pub(crate) use loom_thread_local as thread_local;

/// A CPU hint only: the model yields in `yield_now`, which the spin wait calls next.
pub(crate) fn spin_loop() {}

/// Each static of the cores is a lazy static of one execution of the model.
macro_rules! shared_statics {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
        loom::lazy_static! { $($(#[$attr])* static ref $name: $t = $init;)* }
    };
}
pub(crate) use shared_statics;

/// `std::sync::Once` over a loom lock.
pub(crate) struct Once(Mutex<bool>);

impl Once {
    pub(crate) fn new() -> Once {
        Once(Mutex::new(false))
    }

    pub(crate) fn call_once(&self, f: impl FnOnce()) {
        let mut done = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !*done {
            f();
            *done = true;
        }
    }
}

std::thread_local! {
    /// Whether the begin's `membarrier` reaches the fast side (the seeded bug turns it off).
    /// loom runs every thread of a model on the test's own thread, so this is the test's.
    static MEMBARRIER_REACHES_FAST_SIDE: Cell<bool> = const { Cell::new(true) };
}

/// Runs `f` as if `membarrier` were not a barrier on the other threads: the fast side keeps
/// only its compiler fence (the seeded bug of `Scenario::fast_side_barrier`).
pub(crate) fn without_membarrier<R>(f: impl FnOnce() -> R) -> R {
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            MEMBARRIER_REACHES_FAST_SIDE.with(|reaches| reaches.set(true));
        }
    }
    MEMBARRIER_REACHES_FAST_SIDE.with(|reaches| reaches.set(false));
    let _restore = Restore;
    f()
}

/// The fast path's compiler fence, which the begin's `membarrier` turns into a full barrier
/// of the fast thread: a `SeqCst` fence there.
pub(crate) fn compiler_fence(order: Ordering) {
    if MEMBARRIER_REACHES_FAST_SIDE.with(Cell::get) {
        fence(order);
    }
}

pub(crate) const MEMBARRIER_CMD_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 3;
pub(crate) const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 4;

/// Registration succeeds; the barrier is a `SeqCst` fence on this (the begin's) side, its
/// effect on the fast side is in [`compiler_fence`].
pub(crate) fn membarrier(command: std::ffi::c_long) -> bool {
    if command == MEMBARRIER_CMD_PRIVATE_EXPEDITED {
        fence(Ordering::SeqCst);
    }
    true
}
