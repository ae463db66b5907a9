//! The fast-call protocol under the loom model checker: the crate's own source of its host-side
//! core (`src/call/fast_call_core.rs`, included below by `#[path]`, not copied), compiled
//! against loom's atomics, lock, `Arc`, thread-locals and statics instead of std's (the `shim`
//! module below stands where `src/call/shim.rs` stands in the crate).
//!
//! The property: a fast call that read no capture in progress is never in CUDA while a capture
//! counted meanwhile begins (nor, with an end, until that capture has ended and been uncounted).
//! CUDA is one word here ([`Cuda`]) that only read-modify-writes change, so its modification
//! order is the order in which CUDA sees the calls; they are Relaxed, so the oracle adds no
//! synchronization that the protocol lacks.
//!
//! `membarrier` is modeled as the issue asks: a `SeqCst` fence on the fast side, where the
//! crate's fast path has a compiler fence (`compiler_fence` below), and one on the begin's side
//! (the system call is a full barrier on the calling thread too).
//!
//! The seeded bugs (a begin that does not wait, a begin that waits before it counts, a fast side
//! that no barrier reaches) must each be caught: the model is shown to be able to fail.

use loom_support::Exploration;
use std::sync::atomic::{AtomicUsize as Counter, Ordering::Relaxed as Count};

mod loom_support;

/// The property checked, the only one (its number in [`Exploration`]).
const PROPERTY: usize = 0;

/// The crate's source of the protocol's core, over the `shim` below.
#[allow(dead_code, unreachable_pub)]
#[path = "../src/call/fast_call_core.rs"]
mod fast_call_core;

/// What the core takes from `super::shim`, here loom's (see `src/call/shim.rs` for std's).
#[allow(dead_code, unused_imports)]
#[path = "loom_support/call_shim.rs"]
mod shim;

use fast_call_core::{outside_captures, publish_count, wait_for_uncaptured_calls};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use loom::sync::{Arc, Mutex};

/// CUDA as the property sees it, twice.
///
/// In the order of its calls: one word that only read-modify-writes change, so that its
/// modification order is the order in which CUDA sees the calls (the low bits count the fast
/// calls inside CUDA, [`CAPTURING`] is set from a capture's begin to its end). They are Relaxed,
/// so this oracle adds no synchronization that the protocol lacks; but it sees only the order
/// in which loom ran the calls, not what the threads know of each other.
///
/// In what the begin knows: each fast thread marks its call inside CUDA in a word of its own
/// (Relaxed stores), and the begin reads them all (Relaxed loads). loom lets such a load return
/// any store that happens-before does not hide, so a fast call's end that does not happen
/// before the begin (a clear of the flag without Release, a wait without Acquire) is seen as a
/// call still inside CUDA.
///
/// A call that breaks the property is noted in [`Explored`], not panicked on: a panic where
/// loom's objects are alive aborts the process (they are dropped outside the model as it
/// unwinds). The model panics at the start of the next execution instead, where none is.
struct Cuda {
    word: AtomicUsize,
    in_call: Vec<AtomicBool>,
    explored: std::sync::Arc<Explored>,
}

const CAPTURING: usize = 1 << (usize::BITS - 1);

impl Cuda {
    fn new(fast_threads: usize, explored: std::sync::Arc<Explored>) -> Cuda {
        Cuda {
            word: AtomicUsize::new(0),
            in_call: (0..fast_threads).map(|_| AtomicBool::new(false)).collect(),
            explored,
        }
    }

    /// The CUDA call of a fast call of thread `thread`, from its start to its return.
    fn fast_call(&self, thread: usize) {
        self.in_call[thread].store(true, Relaxed);
        let before = self.word.fetch_add(1, Relaxed);
        if before & CAPTURING != 0 {
            self.explored
                .violated(PROPERTY, "a fast call that read no capture in progress reached CUDA inside a capture");
        }
        self.word.fetch_sub(1, Relaxed);
        self.in_call[thread].store(false, Relaxed);
    }

    /// `cudaStreamBeginCapture`.
    fn begin_capture(&self) {
        let before = self.word.fetch_or(CAPTURING, Relaxed);
        if before & !CAPTURING != 0 {
            self.explored
                .violated(PROPERTY, "a capture began while a fast call that read no capture in progress was in CUDA");
        }
        if self.in_call.iter().any(|in_call| in_call.load(Relaxed)) {
            self.explored.violated(PROPERTY, "a capture began where a fast call's return does not happen before it");
        }
    }

    /// `cudaStreamEndCapture`.
    fn end_capture(&self) {
        self.word.fetch_and(!CAPTURING, Relaxed);
    }
}

/// `live_captures`'s list of captures and its lock, down to their number: what `begun` and
/// `ended` do to the word the fast calls read (they publish the count under the lock).
struct Captures(Mutex<usize>);

impl Captures {
    fn begun(&self) {
        let mut count = self.0.lock().unwrap();
        *count += 1;
        publish_count(*count);
    }

    fn ended(&self) {
        let mut count = self.0.lock().unwrap();
        *count -= 1;
        publish_count(*count);
    }
}

/// The begin of a capture, as `StreamRef::start_capture` makes it, or with a seeded bug.
#[derive(Clone, Copy, Debug)]
enum Begin {
    /// Counted, then waits for the fast calls, then begins (the crate's order).
    Correct,
    /// Seeded bug: counted, then begins without waiting.
    SkipsTheWait,
    /// Seeded bug: waits for the fast calls, then counts and begins.
    WaitsBeforeCounting,
}

/// One model: `fast_threads` threads each make `calls` fast calls, while the model's main thread
/// begins a capture (and ends it, with `end`).
#[derive(Clone, Copy, Debug)]
struct Scenario {
    fast_threads: usize,
    calls: usize,
    begin: Begin,
    end: bool,
    /// loom's preemption bound; `None` explores every interleaving (up to its partial-order
    /// reduction).
    preemption_bound: Option<usize>,
    /// Whether the begin's `membarrier` reaches the fast side (false: a seeded bug).
    fast_side_barrier: bool,
}

/// What a run of the model saw, over all its executions.
#[derive(Debug, Default)]
struct Explored {
    /// Fast calls that ran their CUDA call, and fast calls that found a capture possible.
    ran: Counter,
    refused: Counter,
    /// The executions, and those that broke the property.
    run: Exploration,
}

impl std::ops::Deref for Explored {
    type Target = Exploration;

    fn deref(&self) -> &Exploration {
        &self.run
    }
}

impl Scenario {
    /// Runs every execution of the scenario, noting what they saw in `explored`; with `stop`,
    /// panics at the start of the execution after the first that broke the property.
    fn explore(self, stop: bool, explored: &std::sync::Arc<Explored>) {
        let seen = std::sync::Arc::clone(explored);
        let builder = loom_support::builder(self.preemption_bound);
        let start = std::time::Instant::now();
        let run = move || {
            seen.begin(stop.then_some(PROPERTY));
            let cuda = Arc::new(Cuda::new(self.fast_threads, std::sync::Arc::clone(&seen)));
            let captures = Captures(Mutex::new(0));
            let fast: Vec<_> = (0..self.fast_threads)
                .map(|thread| {
                    let (cuda, seen) = (Arc::clone(&cuda), std::sync::Arc::clone(&seen));
                    loom::thread::spawn(move || {
                        for _ in 0..self.calls {
                            match outside_captures(|| cuda.fast_call(thread)) {
                                Some(()) => seen.ran.fetch_add(1, Count),
                                None => seen.refused.fetch_add(1, Count),
                            };
                        }
                    })
                })
                .collect();
            match self.begin {
                Begin::Correct => {
                    captures.begun();
                    wait_for_uncaptured_calls();
                }
                Begin::SkipsTheWait => captures.begun(),
                Begin::WaitsBeforeCounting => {
                    wait_for_uncaptured_calls();
                    captures.begun();
                }
            }
            cuda.begin_capture();
            if self.end {
                cuda.end_capture();
                captures.ended();
            }
            for thread in fast {
                thread.join().unwrap();
            }
            // A joined thread drops its thread-locals after its join returns (loom), and the
            // registration's drop takes the flags' lock, a static that ends with this closure:
            // the model ends once every thread has left the registry.
            while fast_call_core::registered_threads() != 0 {
                loom::thread::yield_now();
            }
        };
        if self.fast_side_barrier {
            builder.check(run)
        } else {
            shim::without_membarrier(|| builder.check(run))
        }
        eprintln!(
            "{self:?}: {} executions in {:.2?}; {} fast calls ran, {} refused; {} broke the property",
            explored.executions(),
            start.elapsed(),
            explored.ran.load(Count),
            explored.refused.load(Count),
            explored.violations(),
        );
    }

    /// Checks the scenario: no execution breaks the property, and both outcomes of a fast call
    /// (run, refused) occur.
    fn check(self) {
        let explored = std::sync::Arc::new(Explored::default());
        self.explore(false, &explored);
        explored.assert_unbroken(&self);
        assert!(
            explored.ran.load(Count) > 0 && explored.refused.load(Count) > 0,
            "{self:?}: the model reached both outcomes"
        );
    }

    /// Checks a scenario with a seeded bug: loom must find an execution that breaks the property
    /// (and stops there).
    fn must_fail(self) {
        let explored = std::sync::Arc::new(Explored::default());
        loom_support::must_break(&self, PROPERTY, &explored, || self.explore(true, &explored));
    }
}

/// One thread of two fast calls (the first registers its flag, the second reuses it; the thread
/// leaves the registry as it ends) against a capture's begin and end: every interleaving.
const ONE_THREAD: Scenario = Scenario {
    fast_threads: 1,
    calls: 2,
    begin: Begin::Correct,
    end: true,
    preemption_bound: None,
    fast_side_barrier: true,
};

/// Two threads of one fast call each (both register meanwhile) against a begin and an end: the
/// interleavings of at most 3 preemptions.
const TWO_THREADS: Scenario = Scenario { fast_threads: 2, calls: 1, preemption_bound: Some(3), ..ONE_THREAD };

/// Two threads of two fast calls each against a begin and an end: at most 3 preemptions.
const TWO_THREADS_TWO_CALLS: Scenario = Scenario { calls: 2, preemption_bound: Some(3), ..TWO_THREADS };

#[test]
fn one_thread_s_fast_calls_never_overlap_a_capture_in_any_interleaving() {
    ONE_THREAD.check();
}

#[test]
fn two_threads_fast_calls_never_overlap_a_capture() {
    TWO_THREADS.check();
}

#[test]
fn two_threads_second_fast_calls_never_overlap_a_capture() {
    TWO_THREADS_TWO_CALLS.check();
}

/// The scenarios each seeded bug must be caught in: every interleaving of one thread, and two
/// threads under the bound that the real code passes with.
const SEEDED_IN: [Scenario; 2] = [ONE_THREAD, TWO_THREADS];

/// Seeded bug: the begin does not wait for the fast calls.
#[test]
fn a_begin_that_skips_the_wait_is_caught() {
    for scenario in SEEDED_IN {
        Scenario { begin: Begin::SkipsTheWait, ..scenario }.must_fail();
    }
}

/// Seeded bug: the begin waits for the fast calls before it is counted, so a call that read the
/// count before the increment can start after the wait.
#[test]
fn a_begin_that_waits_before_it_counts_is_caught() {
    for scenario in SEEDED_IN {
        Scenario { begin: Begin::WaitsBeforeCounting, ..scenario }.must_fail();
    }
}

/// Seeded bug: the Dekker pair without its barrier on the fast side (the fast path's compiler
/// fence alone, as if `membarrier` did not reach the fast thread): the flag's store and the
/// count's load reorder, and loom finds the execution where the begin reads the flag clear and
/// the fast call reads the count zero.
#[test]
fn a_fast_side_that_no_barrier_reaches_is_caught() {
    for scenario in SEEDED_IN {
        Scenario { fast_side_barrier: false, ..scenario }.must_fail();
    }
}
