//! Joins under the loom model checker: the crate's own sources of the capture-transition lock's
//! core (`src/call/transitions_core.rs`) and of the fast calls' (`src/call/fast_call_core.rs`),
//! included below by `#[path]`, not copied, and compiled against loom's atomics, locks, `Arc`,
//! thread-locals and statics instead of std's (the `shim` module below stands where
//! `src/call/shim.rs` stands in the crate).
//!
//! The callers modeled:
//! * checkers, each making calls on a stream `x` that must not go into a capture (work refused
//!   in a capture: an allocation, a host function, a graph launch), as `StreamRef::outside_transitions` and
//!   `held` make them (`stream/enqueue.rs`): a fast call while no capture may be in progress
//!   (`outside_captures`: its call unchecked, no capture can exist); otherwise, under the read
//!   side (`no_capture_transitions`), `x`'s capture status read, then the call made, or refused
//!   if `x` was capturing;
//! * a joiner, the model's main thread, that makes `x` join a capture as `StreamRef::join_point`
//!   does (`stream/record.rs`): under the write side (`capture_transition`), counted as an
//!   uncounted join while no foreign handle was seen (`live_captures::uncounted_join`) and the
//!   fast calls waited for, then the wait that makes `x` join, then, for a capture that the crate did
//!   not count, the process marked foreign (`uncaptured_calls::foreign_handle_seen`) before the
//!   join is uncounted. The capture joined is either one this crate counted (the joiner begins
//!   it first as `start_capture` does, and ends it afterwards as `Capture::finish` does) or
//!   another library's, which the crate never counted ([`Joined`]).
//!
//! The property: a call made after a check that saw `x` not capturing (a status read under the
//! read side, or a fast call's read of no capture in progress) never reaches CUDA while `x` is
//! in a capture, and `x` never joins a capture, nor leaves one of this crate's, while such a call
//! is in CUDA. CUDA is one word here ([`Cuda`]) that only read-modify-writes change (the status read
//! too, one that changes nothing), so that its modification order is the order in which CUDA
//! sees the calls; they are Relaxed, so the oracle adds no synchronization that the protocol
//! lacks. A second view asks what the joiner knows: each checker marks its call in CUDA in a
//! word of its own (Relaxed stores), which the joiner reads (Relaxed) as `x` joins or leaves:
//! a call whose return does not happen before is seen as still in CUDA.
//!
//! `membarrier` is modeled as in `loom_fast_calls.rs`: a `SeqCst` fence on the fast side, where
//! the crate's fast path has a compiler fence, and one on the waiter's side.
//!
//! The seeded bugs (a join that does not take the write side, a check and its call in two
//! separate holds, a join that does not wait for the fast calls, a join uncounted before the
//! process is marked foreign, a join beside a foreign mark not yet settled that does not wait)
//! must each be caught: the model is shown to be able to fail.
//!
//! The last of these is what the crate did until this model found it: another thread wraps a
//! foreign handle while `x` joins another library's capture
//! ([`a_join_beside_a_foreign_mark_not_yet_settled_waits_for_the_fast_calls`]).

use loom_support::Exploration;
use std::sync::atomic::{AtomicUsize as Counter, Ordering::Relaxed as Count};

mod loom_support;

/// The property checked, the only one (its number in [`Exploration`]).
const PROPERTY: usize = 0;

/// The crate's source of the fast calls' core, over the `shim` below.
#[allow(dead_code, unreachable_pub)]
#[path = "../src/call/fast_call_core.rs"]
mod fast_call_core;

/// The crate's source of the capture-transition lock's core, over the `shim` below.
#[allow(dead_code, unreachable_pub)]
#[path = "../src/call/transitions_core.rs"]
mod transitions_core;

/// What the cores take from `super::shim`, here loom's (see `src/call/shim.rs` for std's).
#[allow(dead_code, unused_imports)]
#[path = "loom_support/call_shim.rs"]
mod shim;

use fast_call_core::{foreign, in_fast_call, mark_foreign, outside_captures, publish_count, wait_for_uncaptured_calls};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use loom::sync::{Arc, Mutex};
use transitions_core::{InsideAHold, capture_transition, no_capture_transitions};

/// CUDA as the property sees it, twice (see the module docs): `x`'s word in CUDA's order, and
/// each checker's call in CUDA as the joiner knows it.
///
/// A call that breaks the property is noted in [`Explored`], not panicked on: a panic where
/// loom's objects are alive aborts the process (they are dropped outside the model as it
/// unwinds). The model panics at the start of the next execution instead, where none is.
struct Cuda {
    /// [`CAPTURED`] while `x` is in a capture; the low bits count the checked calls on `x` in
    /// CUDA.
    x: AtomicUsize,
    in_call: Vec<AtomicBool>,
    explored: std::sync::Arc<Explored>,
}

const CAPTURED: usize = 1 << (usize::BITS - 1);

impl Cuda {
    fn new(checkers: usize, explored: std::sync::Arc<Explored>) -> Cuda {
        Cuda { x: AtomicUsize::new(0), in_call: (0..checkers).map(|_| AtomicBool::new(false)).collect(), explored }
    }

    /// `x`'s capture status (`cudaStreamGetCaptureInfo`): a read-modify-write that changes
    /// nothing, so that it reads the status CUDA has now, in its order.
    fn is_capturing(&self) -> bool {
        self.x.fetch_add(0, Relaxed) & CAPTURED != 0
    }

    /// The CUDA call of checker `checker` on `x`, made after a check that saw `x` not capturing,
    /// from its start to its return.
    fn checked_call(&self, checker: usize) {
        self.in_call[checker].store(true, Relaxed);
        let before = self.x.fetch_add(1, Relaxed);
        if before & CAPTURED != 0 {
            self.explored
                .violated(PROPERTY, "a call made after a check that saw x not capturing reached CUDA in a capture");
        }
        self.x.fetch_sub(1, Relaxed);
        self.in_call[checker].store(false, Relaxed);
    }

    /// The wait that makes `x` join a capture (`cudaStreamWaitEvent` on an event of the capture),
    /// or the end of that capture (`cudaStreamEndCapture`, for a capture of this crate): no
    /// checked call is in CUDA on `x` meanwhile, nor one whose return does not happen before.
    fn change_membership(&self, join: bool) {
        let before = if join { self.x.fetch_or(CAPTURED, Relaxed) } else { self.x.fetch_and(!CAPTURED, Relaxed) };
        let what = if join { "joined" } else { "left" };
        if before & !CAPTURED != 0 {
            self.explored.violated(PROPERTY, format!("x {what} a capture while a checked call on it was in CUDA"));
        }
        if self.in_call.iter().any(|in_call| in_call.load(Relaxed)) {
            self.explored
                .violated(PROPERTY, format!("x {what} a capture where a checked call's return does not happen before"));
        }
    }

    /// Another library ends its capture, which the crate never counted, without the crate's
    /// lock: `x` is no longer in it.
    fn foreign_end(&self) {
        self.x.fetch_and(!CAPTURED, Relaxed);
    }
}

/// `live_captures`'s list of captures, its uncounted joins and its lock, down to their numbers:
/// what `begun`, `ended`, `uncounted_join` and `foreign_handle_seen` do to the word the fast
/// calls read (they publish it under the lock); and `uncaptured_calls::foreign_handle_seen`'s
/// `SETTLED`.
struct Captures {
    /// The captures counted, and the uncounted joins.
    counts: Mutex<(usize, usize)>,
    settled: AtomicBool,
}

impl Captures {
    fn publish(counts: &(usize, usize)) {
        publish_count(counts.0 + counts.1);
    }

    fn new() -> Captures {
        Captures { counts: Mutex::new((0, 0)), settled: AtomicBool::new(false) }
    }

    fn begun(&self) {
        let mut counts = self.counts.lock().unwrap();
        counts.0 += 1;
        Captures::publish(&counts);
    }

    fn ended(&self) {
        let mut counts = self.counts.lock().unwrap();
        counts.0 -= 1;
        Captures::publish(&counts);
    }

    /// `uncounted_join`: the returned guard uncounts it.
    fn uncounted_join(&self) -> UncountedJoin<'_> {
        let mut counts = self.counts.lock().unwrap();
        counts.1 += 1;
        Captures::publish(&counts);
        UncountedJoin(self)
    }

    /// `uncaptured_calls::foreign_handle_seen`: the mark, then, until a wait that began after it
    /// has returned (`SETTLED`), the wait for the fast calls that read it unset (outside a fast
    /// call).
    fn foreign_handle_seen(&self) {
        mark_foreign(|| self.counts.lock().unwrap());
        if !self.settled.load(Acquire) && !in_fast_call() {
            wait_for_uncaptured_calls();
            self.settled.store(true, Release);
        }
    }
}

/// A join counted by [`Captures::uncounted_join`].
struct UncountedJoin<'a>(&'a Captures);

impl Drop for UncountedJoin<'_> {
    fn drop(&mut self) {
        let mut counts = self.0.counts.lock().unwrap();
        counts.1 -= 1;
        Captures::publish(&counts);
    }
}

/// The capture that `x` joins.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Joined {
    /// One this crate begins first on another stream (counted, the fast calls waited for, under
    /// the write side) and ends afterwards (under the write side, uncounted once it is
    /// released).
    Counted,
    /// Another library's (of its thread's per-thread stream), which the crate never counted:
    /// the join marks the process foreign; the library ends it afterwards, without the crate's
    /// lock.
    Foreign,
}

/// The seeded bugs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    None,
    /// The join does not take the write side.
    JoinWithoutTheWriteSide,
    /// A checker reads the status under one hold and makes its call under another.
    CheckAndCallInTwoHolds,
    /// The join is counted but does not wait for the fast calls.
    JoinWithoutWaiting,
    /// The join is uncounted before the process is marked foreign.
    UncountedBeforeMarkedForeign,
    /// A join that finds the foreign mark set does not wait for the fast calls while the mark
    /// is not yet settled (the crate before the fix this model found).
    NoWaitBesideAnUnsettledMark,
}

/// One model: `checkers` threads each make `calls` checked calls on `x`, while the model's main
/// thread makes `x` join a capture (and, with `wrapper`, one more thread wraps a foreign handle
/// meanwhile: `uncaptured_calls::foreign_handle_seen`).
#[derive(Clone, Copy, Debug)]
struct Scenario {
    checkers: usize,
    calls: usize,
    joined: Joined,
    wrapper: bool,
    bug: Bug,
    /// loom's preemption bound; `None` explores every interleaving (up to its partial-order
    /// reduction).
    preemption_bound: Option<usize>,
}

/// What a run of the model saw, over all its executions.
#[derive(Debug, Default)]
struct Explored {
    /// Calls made as fast calls, made under the read side, and refused there (`x` capturing).
    fast: Counter,
    held: Counter,
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
    /// One call of checker `checker`: `outside_transitions` then `held` (`stream/enqueue.rs`).
    fn checked_call(self, cuda: &Cuda, checker: usize) {
        if outside_captures(|| cuda.checked_call(checker)).is_some() {
            cuda.explored.fast.fetch_add(1, Count);
            return;
        }
        let mut hold = no_capture_transitions();
        let capturing = cuda.is_capturing();
        if self.bug == Bug::CheckAndCallInTwoHolds {
            drop(hold);
            hold = no_capture_transitions();
        }
        if capturing {
            cuda.explored.refused.fetch_add(1, Count);
        } else {
            cuda.checked_call(checker);
            cuda.explored.held.fetch_add(1, Count);
        }
        drop(hold);
    }

    /// The joiner: `x` joins the capture as `join_point` makes it join (with the capture's begin
    /// and end, for one of this crate's).
    fn join(self, cuda: &Cuda, captures: &Captures) {
        let transition = || capture_transition().expect("no hold on the joiner");
        if self.joined == Joined::Counted {
            // `start_capture`: counted, then the fast calls waited for, under the write side.
            let begin = transition();
            captures.begun();
            wait_for_uncaptured_calls();
            drop(begin);
        }
        // `join_point`.
        let join = (self.bug != Bug::JoinWithoutTheWriteSide).then(transition);
        let uncounted = (!foreign()).then(|| {
            let counted = captures.uncounted_join();
            if self.bug != Bug::JoinWithoutWaiting {
                wait_for_uncaptured_calls();
            }
            counted
        });
        // A foreign mark not yet settled: the fast calls that read it unset are waited for.
        if uncounted.is_none() && self.bug != Bug::NoWaitBesideAnUnsettledMark && !captures.settled.load(Acquire) {
            wait_for_uncaptured_calls();
        }
        let was_capturing = uncounted.is_some().then(|| cuda.is_capturing());
        cuda.change_membership(true);
        let foreign_join = was_capturing == Some(false) && self.joined == Joined::Foreign;
        let mut uncounted = uncounted;
        if foreign_join {
            if self.bug == Bug::UncountedBeforeMarkedForeign {
                drop(uncounted.take());
            }
            captures.foreign_handle_seen();
        }
        drop(uncounted);
        drop(join);
        match self.joined {
            Joined::Counted => {
                // `Capture::finish`: ended under the write side, uncounted once it is released.
                let end = transition();
                cuda.change_membership(false);
                drop(end);
                captures.ended();
            }
            Joined::Foreign => cuda.foreign_end(),
        }
    }

    /// Runs every execution of the scenario, noting what they saw in `explored`; with `stop`,
    /// panics at the start of the execution after the first that broke the property.
    fn explore(self, stop: bool, explored: &std::sync::Arc<Explored>) {
        let seen = std::sync::Arc::clone(explored);
        let builder = loom_support::builder(self.preemption_bound);
        let start = std::time::Instant::now();
        builder.check(move || {
            seen.begin(stop.then_some(PROPERTY));
            let cuda = Arc::new(Cuda::new(self.checkers, std::sync::Arc::clone(&seen)));
            let captures = Arc::new(Captures::new());
            let wrapper = self.wrapper.then(|| {
                let captures = Arc::clone(&captures);
                loom::thread::spawn(move || captures.foreign_handle_seen())
            });
            let checkers: Vec<_> = (0..self.checkers)
                .map(|checker| {
                    let cuda = Arc::clone(&cuda);
                    loom::thread::spawn(move || {
                        for _ in 0..self.calls {
                            self.checked_call(&cuda, checker);
                        }
                    })
                })
                .collect();
            self.join(&cuda, &captures);
            for thread in checkers.into_iter().chain(wrapper) {
                thread.join().unwrap();
            }
            // A joined thread drops its thread-locals after its join returns (loom), and the
            // registration's drop takes the flags' lock, a static that ends with this closure:
            // the model ends once every thread has left the registry.
            while fast_call_core::registered_threads() != 0 {
                loom::thread::yield_now();
            }
        });
        eprintln!(
            "{self:?}: {} executions in {:.2?}; {} fast calls, {} held, {} refused; {} broke the property",
            explored.executions(),
            start.elapsed(),
            explored.fast.load(Count),
            explored.held.load(Count),
            explored.refused.load(Count),
            explored.violations(),
        );
    }

    /// Checks the scenario: no execution breaks the property, and every outcome of a checked
    /// call (fast, held, refused) occurs.
    fn check(self) {
        let explored = std::sync::Arc::new(Explored::default());
        self.explore(false, &explored);
        explored.assert_unbroken(&self);
        let outcomes = [&explored.fast, &explored.held, &explored.refused].map(|outcome| outcome.load(Count));
        assert!(outcomes.iter().all(|&count| count > 0), "{self:?}: the model reached every outcome: {outcomes:?}");
    }

    /// Checks a scenario with a seeded bug: loom must find an execution that breaks the property
    /// (and stops there).
    fn must_fail(self) {
        let explored = std::sync::Arc::new(Explored::default());
        loom_support::must_break(&self, PROPERTY, &explored, || self.explore(true, &explored));
    }
}

/// One checker of one call against a capture of this crate begun, joined by `x` and ended: every
/// interleaving.
const ONE_CALL: Scenario =
    Scenario { checkers: 1, calls: 1, joined: Joined::Counted, wrapper: false, bug: Bug::None, preemption_bound: None };

/// One checker of two calls (the first may be fast, the second held) against the same: at most
/// 5 preemptions.
const COUNTED: Scenario = Scenario { calls: 2, preemption_bound: Some(5), ..ONE_CALL };

/// One checker of two calls against a join of another library's capture, which the library then
/// ends: at most 5 preemptions.
const FOREIGN: Scenario = Scenario { joined: Joined::Foreign, ..COUNTED };

/// Two checkers of two calls each against a capture of this crate begun, joined and ended: at
/// most 2 preemptions.
const TWO_CHECKERS: Scenario = Scenario { checkers: 2, preemption_bound: Some(2), ..COUNTED };

/// Two checkers of two calls each against a join of another library's capture: at most 2
/// preemptions.
const TWO_CHECKERS_FOREIGN: Scenario = Scenario { joined: Joined::Foreign, ..TWO_CHECKERS };

#[test]
fn a_call_checked_against_x_never_lands_in_the_capture_it_joins_in_any_interleaving() {
    ONE_CALL.check();
}

#[test]
fn calls_checked_against_x_never_land_in_a_capture_of_the_crate_it_joins() {
    COUNTED.check();
}

#[test]
fn calls_checked_against_x_never_land_in_another_library_s_capture_it_joins() {
    FOREIGN.check();
}

#[test]
fn two_checkers_calls_never_land_in_a_capture_of_the_crate_that_x_joins() {
    TWO_CHECKERS.check();
}

#[test]
fn two_checkers_calls_never_land_in_another_library_s_capture_that_x_joins() {
    TWO_CHECKERS_FOREIGN.check();
}

/// Another thread wraps its first foreign handle while `x` joins another library's capture: the
/// join reads the foreign mark set (`live_captures::foreign()`, `stream/record.rs`'s
/// `join_point`), so it neither counts itself nor waits for the fast calls, while the wrapper
/// has not yet waited for those that read the mark unset (`SETTLED`): a fast call on `x` that
/// read no capture possible before the mark is still in CUDA as `x` joins. That failed on the
/// crate (found in under 8,000 executions); the join now waits for the fast calls while the
/// mark is not yet settled (`uncaptured_calls::fast_calls_may_be_in_progress`).
#[test]
fn a_join_beside_a_foreign_mark_not_yet_settled_waits_for_the_fast_calls() {
    Scenario { wrapper: true, calls: 1, preemption_bound: Some(2), ..FOREIGN }.check();
}

/// Seeded bug (the crate before the fix): the join above without its wait is caught.
#[test]
fn a_join_beside_an_unsettled_mark_that_does_not_wait_is_caught() {
    Scenario { wrapper: true, calls: 1, preemption_bound: Some(2), bug: Bug::NoWaitBesideAnUnsettledMark, ..FOREIGN }
        .must_fail();
}

/// Holds nest on a thread, and a transition is refused inside one, or inside a fast call, where
/// it would wait for its own caller (loom would report the deadlock).
#[test]
fn holds_nest_and_a_transition_inside_one_is_refused() {
    loom::model(|| {
        let outer = no_capture_transitions();
        let inner = no_capture_transitions();
        assert_eq!(capture_transition().err(), Some(InsideAHold), "inside the read side");
        drop(inner);
        assert_eq!(capture_transition().err(), Some(InsideAHold), "still inside the outer hold");
        drop(outer);
        let transition = capture_transition().expect("no hold: the write side");
        let nested = no_capture_transitions();
        assert_eq!(capture_transition().err(), Some(InsideAHold), "inside the write side");
        drop((nested, transition));
        // On a thread of its own, which leaves the flags' registry before the model's statics
        // end (see `explore`).
        let fast = loom::thread::spawn(|| {
            outside_captures(|| {
                let _nested = no_capture_transitions();
                capture_transition().err()
            })
        });
        assert_eq!(fast.join().unwrap(), Some(Some(InsideAHold)), "inside a fast call");
        drop(capture_transition().expect("released: the write side again"));
        while fast_call_core::registered_threads() != 0 {
            loom::thread::yield_now();
        }
    });
}

/// Seeded bug: the join does not take the write side, so a checker's status read and its call,
/// under the read side, straddle it.
#[test]
fn a_join_without_the_write_side_is_caught() {
    for scenario in [COUNTED, FOREIGN, TWO_CHECKERS] {
        Scenario { bug: Bug::JoinWithoutTheWriteSide, ..scenario }.must_fail();
    }
}

/// Seeded bug: a checker reads the status under one hold and makes its call under another; the
/// join takes the write side between the two. (Against a join of another library's capture a
/// checker takes the read side only once the join has counted itself, under the write side: it
/// then finds `x` joined.)
#[test]
fn a_check_and_its_call_in_two_holds_are_caught() {
    for scenario in [COUNTED, TWO_CHECKERS] {
        Scenario { bug: Bug::CheckAndCallInTwoHolds, ..scenario }.must_fail();
    }
}

/// Seeded bug: a join of another library's capture, counted but not waiting for the fast calls:
/// a fast call that read no capture in progress before the count is still in CUDA, or not yet
/// there, when `x` joins. (A join of the crate's own capture is covered by its begin's wait.)
#[test]
fn a_join_that_does_not_wait_for_the_fast_calls_is_caught() {
    for scenario in [FOREIGN, TWO_CHECKERS_FOREIGN] {
        Scenario { bug: Bug::JoinWithoutWaiting, ..scenario }.must_fail();
    }
}

/// Seeded bug: a join of another library's capture uncounted before the process is marked
/// foreign: a fast call in between reads no capture possible while `x` is in one.
#[test]
fn a_join_uncounted_before_the_foreign_mark_is_caught() {
    for scenario in [FOREIGN, TWO_CHECKERS_FOREIGN] {
        Scenario { bug: Bug::UncountedBeforeMarkedForeign, ..scenario }.must_fail();
    }
}
