//! What the record state's core (`src/event/record_state_core.rs`) takes from `super::shim`
//! under loom, but the wait for the reactor's pass: loom's atomics and yield where
//! `src/event/shim.rs` has std's, each `SeqCst` access between two `SeqCst` fences (the
//! `loom_record_state.rs` docs say why), and a stand-in error. The loom checks that include the
//! core (`loom_record_state.rs`, `loom_reactor.rs`) glob-import it into their `shim` module
//! beside a `wait_for_pass` of their own: none in the first (no reactor), the crate's in the
//! second (`src/call/reactor_passes_core.rs`).

use loom::sync::atomic::fence;
use std::cell::Cell;

pub(crate) use loom::sync::atomic::Ordering;
pub(crate) use loom::thread::yield_now;

/// The crate's `Error`, down to the one variant the core makes.
#[derive(Debug)]
pub(crate) enum Error {
    CaptureMisuse(#[allow(dead_code)] &'static str),
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

loom::thread_local! {
    /// Whether this model thread's `SeqCst` accesses lose their fences (a seeded bug): its
    /// two steps of a Dekker pair may then pass each other.
    static SEQ_CST_LOST: Cell<bool> = Cell::new(false);
}

/// Makes this model thread's `SeqCst` accesses `AcqRel`, `Acquire` or `Release` (loom's own
/// reading of them), without the fences.
pub(crate) fn lose_seq_cst_on_this_thread() {
    SEQ_CST_LOST.with(|lost| lost.set(true));
}

/// Whether an access of `order` gets the two fences.
fn fenced(order: Ordering) -> bool {
    order == Ordering::SeqCst && !SEQ_CST_LOST.with(Cell::get)
}

/// Runs `access` between two `SeqCst` fences where `fenced`.
fn sequentially_consistent<R>(fenced: bool, access: impl FnOnce() -> R) -> R {
    if fenced {
        fence(Ordering::SeqCst);
    }
    let result = access();
    if fenced {
        fence(Ordering::SeqCst);
    }
    result
}

/// `order` for a load, without `SeqCst`.
fn load(order: Ordering) -> Ordering {
    if order == Ordering::SeqCst { Ordering::Acquire } else { order }
}

/// `order` for a store, without `SeqCst`.
fn store(order: Ordering) -> Ordering {
    if order == Ordering::SeqCst { Ordering::Release } else { order }
}

/// `order` for a read-modify-write, without `SeqCst`.
fn rmw(order: Ordering) -> Ordering {
    if order == Ordering::SeqCst { Ordering::AcqRel } else { order }
}

/// A loom atomic whose `SeqCst` accesses are fenced (see the model's docs); the methods
/// std's have, those the core calls.
macro_rules! atomic {
    ($name:ident, $value:ty) => {
        #[derive(Debug)]
        pub(crate) struct $name(loom::sync::atomic::$name);

        #[allow(dead_code)]
        impl $name {
            pub(crate) fn new(value: $value) -> $name {
                $name(loom::sync::atomic::$name::new(value))
            }

            pub(crate) fn load(&self, order: Ordering) -> $value {
                sequentially_consistent(fenced(order), || self.0.load(load(order)))
            }

            pub(crate) fn store(&self, value: $value, order: Ordering) {
                sequentially_consistent(fenced(order), || self.0.store(value, store(order)))
            }

            pub(crate) fn compare_exchange_weak(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> std::result::Result<$value, $value> {
                sequentially_consistent(fenced(success) || fenced(failure), || {
                    self.0.compare_exchange_weak(current, new, rmw(success), load(failure))
                })
            }

            pub(crate) fn fetch_update(
                &self,
                set: Ordering,
                fetch: Ordering,
                update: impl FnMut($value) -> Option<$value>,
            ) -> std::result::Result<$value, $value> {
                sequentially_consistent(fenced(set) || fenced(fetch), || {
                    self.0.fetch_update(rmw(set), load(fetch), update)
                })
            }
        }
    };
}

atomic!(AtomicBool, bool);
atomic!(AtomicU32, u32);
atomic!(AtomicU64, u64);

impl AtomicU32 {
    pub(crate) fn fetch_add(&self, value: u32, order: Ordering) -> u32 {
        sequentially_consistent(fenced(order), || self.0.fetch_add(value, rmw(order)))
    }

    pub(crate) fn fetch_sub(&self, value: u32, order: Ordering) -> u32 {
        sequentially_consistent(fenced(order), || self.0.fetch_sub(value, rmw(order)))
    }
}
