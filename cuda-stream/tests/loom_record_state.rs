//! An event's record state under the loom model checker: the crate's own source of its core
//! (`src/event/record_state_core.rs`, included below by `#[path]`, not copied), compiled against
//! loom's atomics and yield instead of std's (the `shim` module below stands where
//! `src/event/shim.rs` stands in the crate, with a stand-in error and no reactor).
//!
//! The properties, each a model of the crate's callers (`stream/record.rs`: a record into a
//! possible capture, `record_during_captures`, and a record's fast path outside any; `event/mod.rs`:
//! a counted query, `Event::synchronize`'s wait in CUDA):
//! 1. a record that may go into a capture and a counted query of its event (a marker call)
//!    never are in CUDA at once: one of the two sees the other;
//! 2. a record into a capture that sees a wait in CUDA (`Event::synchronize`) is abandoned and
//!    refused: it is never made while the wait is in CUDA;
//! 3. after records of one event from several threads (one into a capture, one outside any), a
//!    query is never let through while the last record CUDA took may be the captured one;
//! 4. two records of one event into captures never are in CUDA at once (the record turn).
//!
//! CUDA is one word here ([`Cuda`]) that only read-modify-writes change, so that its
//! modification order is the order in which CUDA sees the calls; they are Relaxed, so the
//! oracle adds no synchronization that the protocol lacks. A second view asks what the record
//! knows: each thread marks its calls in CUDA in a word of its own, and a record into a capture
//! reads the others' (Relaxed): a call whose return does not happen before the record is seen
//! as still in CUDA.
//!
//! loom regards a `SeqCst` access as `AcqRel` (its README: false alarms): the Dekker pairs of
//! the record state (a mark, then a read of the count; a count, then a read of the mark, all
//! `SeqCst`) fail under it on the crate's correct code, in the very executions that catch the
//! seeded bugs that lose `SeqCst`. So the shim makes each `SeqCst` access of the core an access
//! between two `SeqCst` fences, which loom models: the fence mapping of `SeqCst` atomics. It is
//! stronger than Rust's `SeqCst` only for the accesses of other orderings around a fenced one
//! (loom's fences order more than C++'s); a count's decrement made `Relaxed` instead of
//! `Release` is still caught (tried by hand, as are a mark made after the wait for the marker
//! calls, a waiter that reads the mark before it counts itself, and an outside record that
//! notes itself whatever the generation: each fails the checks below).
//!
//! The reactor is not modeled here (`wait_for_pass` returns at once): `loom_reactor.rs` checks
//! its passes against records into a capture, with this same shim.
//!
//! The seeded bugs (a record made before its mark, a query not counted, a record or a waiter
//! whose two steps lose `SeqCst` and so may pass each other, a record that reads the waiters
//! before it marks or not at all, an outside record that reads its ticket after its record, a
//! record into a capture abandoned after it was made, records without the turn) must each be
//! caught: the model is shown to be able to fail.

use loom_support::Exploration;
use std::sync::atomic::{AtomicUsize as Counter, Ordering::Relaxed as Count};

mod loom_support;

/// The crate's source of the record state's core, over the `shim` below.
#[allow(dead_code, unreachable_pub)]
#[path = "../src/event/record_state_core.rs"]
mod record_state_core;

/// The record state's loom shim, shared with `loom_reactor.rs`: loom's atomics, each `SeqCst`
/// access fenced (see above), and a stand-in error.
#[path = "loom_support/record_state_shim.rs"]
mod record_state_shim;

/// What the core takes from `super::shim`, here loom's (see `src/event/shim.rs` for std's).
mod shim {
    pub(crate) use super::record_state_shim::*;

    /// No reactor in the model: no pass is ever in progress.
    pub(crate) fn wait_for_pass() {}
}

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use record_state_core::RecordState;

/// The event as CUDA sees it, twice.
///
/// In the order of its calls: one word that only read-modify-writes change (Relaxed), so that
/// its modification order is the order in which CUDA sees the calls: the counted queries and
/// the waits in CUDA, the records into a capture in CUDA, and whether the last record CUDA
/// took went into a capture.
///
/// In what a record into a capture knows: each thread marks its calls in CUDA in a word of its
/// own (Relaxed stores), and the record reads the others' (Relaxed loads): loom lets such a load
/// return any store that happens-before does not hide, so a call whose return does not happen
/// before the record is seen as still in CUDA.
///
/// A call that breaks a property is noted in [`Explored`], not panicked on: a panic where
/// loom's objects are alive aborts the process. The model panics at the start of the next
/// execution instead.
struct Cuda {
    word: AtomicUsize,
    /// Per thread: the property its call in CUDA belongs to (1 a counted query, 2 a wait, 4 a
    /// record into a capture), 0 while none is.
    in_call: Vec<AtomicUsize>,
    explored: std::sync::Arc<Explored>,
}

/// One counted query in CUDA (bits 0..8).
const QUERY: usize = 1;
const QUERIES: usize = 0xff;
/// One wait in CUDA (bits 8..16).
const WAIT: usize = 1 << 8;
const WAITS: usize = 0xff << 8;
/// One record into a capture in CUDA (bits 16..24).
const RECORDING: usize = 1 << 16;
const RECORDINGS: usize = 0xff << 16;
/// The last record CUDA took went into a capture.
const LAST_CAPTURED: usize = 1 << 24;

impl Cuda {
    fn new(threads: usize, explored: std::sync::Arc<Explored>) -> Cuda {
        Cuda { word: AtomicUsize::new(0), in_call: (0..threads).map(|_| AtomicUsize::new(0)).collect(), explored }
    }

    /// `cudaEventQuery` (or `cudaEventElapsedTime`) of thread `thread`, from its start to its
    /// return.
    fn query(&self, thread: usize) {
        self.in_call[thread].store(1, Relaxed);
        let before = self.word.fetch_add(QUERY, Relaxed);
        if before & RECORDINGS != 0 {
            self.explored
                .violated(1, "a counted query reached CUDA while a record of its event into a capture was in CUDA");
        } else if before & LAST_CAPTURED != 0 {
            self.explored.violated(3, "a query reached CUDA while the last record CUDA took went into a capture");
        }
        self.word.fetch_sub(QUERY, Relaxed);
        self.in_call[thread].store(0, Relaxed);
        self.explored.queries_ran.fetch_add(1, Count);
    }

    /// `cudaEventSynchronize` of thread `thread`.
    fn wait(&self, thread: usize) {
        self.in_call[thread].store(2, Relaxed);
        let before = self.word.fetch_add(WAIT, Relaxed);
        if before & RECORDINGS != 0 {
            self.explored.violated(2, "a wait reached CUDA while a record of its event into a capture was in CUDA");
        } else if before & LAST_CAPTURED != 0 {
            self.explored.violated(2, "a wait reached CUDA while the last record CUDA took went into a capture");
        }
        self.word.fetch_sub(WAIT, Relaxed);
        self.in_call[thread].store(0, Relaxed);
        self.explored.waits_in_cuda.fetch_add(1, Count);
    }

    /// `cudaEventRecord` of thread `thread` on a capturing stream: a node of the capture's
    /// graph from now on.
    fn record_into_capture(&self, thread: usize) {
        self.in_call[thread].store(4, Relaxed);
        let before = self.word.fetch_add(RECORDING, Relaxed);
        if before & QUERIES != 0 {
            self.explored
                .violated(1, "a record into a capture reached CUDA while a counted query of its event was in CUDA");
        }
        if before & WAITS != 0 {
            self.explored.violated(2, "a record into a capture reached CUDA while a wait for its event was in CUDA");
        }
        if before & RECORDINGS != 0 {
            self.explored.violated(4, "two records of one event into captures were in CUDA at once");
        }
        for (other, in_call) in self.in_call.iter().enumerate() {
            let property = in_call.load(Relaxed);
            if other != thread && property != 0 {
                self.explored.violated(
                    property,
                    "a record into a capture reached CUDA where another call's return does not happen before it",
                );
            }
        }
        self.word.fetch_or(LAST_CAPTURED, Relaxed);
        self.word.fetch_sub(RECORDING, Relaxed);
        self.in_call[thread].store(0, Relaxed);
        self.explored.records_made.fetch_add(1, Count);
    }

    /// `cudaEventRecord` on a stream that is not capturing: a marker of work again.
    fn record_outside(&self) {
        self.word.fetch_and(!LAST_CAPTURED, Relaxed);
    }
}

/// What a thread of the model does, in order.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    /// A record into a capture, as `record_during_captures` makes it on a capturing stream:
    /// the turn, the mark (which waits for the counted queries), refused beside a wait in
    /// CUDA, the record, closed as captured.
    RecordIntoCapture,
    /// A record outside any capture, as `StreamRef::record`'s fast path makes it: the ticket,
    /// the record, noted.
    RecordOutside,
    /// A record as `record_during_captures` makes it on a stream that turns out not to be
    /// capturing: the turn, the mark, made beside a wait in CUDA (the stream's status says it
    /// is not capturing), the record, closed as not captured.
    RecordNotCaptured,
    /// A counted query (`Event::query` while captures may exist; `elapsed`): refused if the
    /// event's last record may be a captured one.
    Query,
    /// `Event::synchronize` while no capture may exist: a wait counted in CUDA, or, refused
    /// that (the event may be captured), one counted query of its polls.
    Synchronize,
}

/// The seeded bugs, each in the model's use of the core (or, for the two that lose `SeqCst`,
/// in the shim under the core).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    None,
    /// 1: the record into a capture is made before its mark, then marked and closed.
    RecordBeforeMark,
    /// 1: a query checks the mark and goes to CUDA without counting itself.
    UncountedQuery,
    /// 1, 2: the recording thread's `SeqCst` is lost: its read of the marker count (and of the
    /// waiters) may pass its mark, as if it read them first.
    RecordWithoutSeqCst,
    /// 2: the record into a capture never asks whether the event is waited for.
    NoWaiterCheck,
    /// 2: the record asks whether the event is waited for before it marks it.
    WaiterCheckBeforeMark,
    /// 2: the waiting thread's `SeqCst` is lost: its read of the mark may pass its count, as if
    /// it read the mark first.
    WaiterWithoutSeqCst,
    /// 3: the outside record reads its ticket after its record.
    TicketAfterRecord,
    /// 3: the record into a capture, once made, is abandoned rather than closed as captured.
    AbandonedAfterRecord,
    /// 4: the record into a capture takes no turn.
    NoTurn,
}

/// How the event starts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Start {
    NeverRecorded,
    Recorded,
}

/// One model: the main thread does `main` while each of `spawned` does its acts, then, once
/// they are joined, the main thread does `after`.
#[derive(Clone, Copy, Debug)]
struct Scenario {
    start: Start,
    main: &'static [Act],
    spawned: &'static [&'static [Act]],
    after: &'static [Act],
    bug: Bug,
    /// loom's preemption bound; `None` explores every interleaving (up to its partial-order
    /// reduction).
    preemption_bound: Option<usize>,
}

/// What a run of the model saw, over all its executions.
#[derive(Debug, Default)]
struct Explored {
    queries_ran: Counter,
    queries_refused: Counter,
    waits_in_cuda: Counter,
    waits_refused: Counter,
    records_made: Counter,
    records_refused: Counter,
    /// The executions, and those that broke a property.
    run: Exploration,
}

impl std::ops::Deref for Explored {
    type Target = Exploration;

    fn deref(&self) -> &Exploration {
        &self.run
    }
}

impl Scenario {
    /// Does `act` as thread `thread`.
    fn act(self, act: Act, thread: usize, state: &RecordState, cuda: &Cuda) {
        let explored = &cuda.explored;
        match act {
            Act::RecordIntoCapture => {
                if self.bug == Bug::RecordWithoutSeqCst {
                    shim::lose_seq_cst_on_this_thread();
                }
                let _turn = (self.bug != Bug::NoTurn).then(|| state.take_turn());
                if self.bug == Bug::RecordBeforeMark {
                    cuda.record_into_capture(thread);
                    let opened = state.open_capture_record();
                    state.close_capture_record(opened, true);
                    return;
                }
                let waited_for = self.bug == Bug::WaiterCheckBeforeMark && state.is_waited_for();
                let opened = state.open_capture_record();
                let waited_for = match self.bug {
                    Bug::NoWaiterCheck => false,
                    Bug::WaiterCheckBeforeMark => waited_for,
                    _ => state.is_waited_for(),
                };
                if waited_for {
                    state.abandon_capture_record(opened);
                    explored.records_refused.fetch_add(1, Count);
                    return;
                }
                cuda.record_into_capture(thread);
                if self.bug == Bug::AbandonedAfterRecord {
                    state.abandon_capture_record(opened);
                } else {
                    state.close_capture_record(opened, true);
                }
            }
            Act::RecordOutside => {
                if self.bug == Bug::TicketAfterRecord {
                    cuda.record_outside();
                    let ticket = state.before_record();
                    state.note_uncaptured_record(ticket);
                } else {
                    let ticket = state.before_record();
                    cuda.record_outside();
                    state.note_uncaptured_record(ticket);
                }
            }
            Act::RecordNotCaptured => {
                let _turn = state.take_turn();
                let opened = state.open_capture_record();
                cuda.record_outside();
                state.close_capture_record(opened, false);
            }
            Act::Query => self.query(thread, state, cuda),
            Act::Synchronize => {
                if self.bug == Bug::WaiterWithoutSeqCst {
                    shim::lose_seq_cst_on_this_thread();
                }
                if let Some(_waiting) = state.wait_in_cuda() {
                    cuda.wait(thread);
                } else {
                    explored.waits_refused.fetch_add(1, Count);
                    self.query(thread, state, cuda);
                }
            }
        }
    }

    /// A counted query of thread `thread`.
    fn query(self, thread: usize, state: &RecordState, cuda: &Cuda) {
        if self.bug == Bug::UncountedQuery {
            match state.refuse_captured() {
                Ok(()) => cuda.query(thread),
                Err(_) => drop(cuda.explored.queries_refused.fetch_add(1, Count)),
            }
            return;
        }
        match state.marker_call() {
            Ok(_in_flight) => cuda.query(thread),
            Err(_) => drop(cuda.explored.queries_refused.fetch_add(1, Count)),
        }
    }

    /// Runs every execution of the scenario, noting what they saw in `explored`; with `stop`,
    /// panics at the start of the execution after the first that broke that property.
    fn explore(self, stop: Option<usize>, explored: &std::sync::Arc<Explored>) {
        let seen = std::sync::Arc::clone(explored);
        let builder = loom_support::builder(self.preemption_bound);
        let start = std::time::Instant::now();
        builder.check(move || {
            seen.begin(stop);
            let state = Arc::new(match self.start {
                Start::NeverRecorded => RecordState::never_recorded(),
                Start::Recorded => RecordState::recorded(),
            });
            let cuda = Arc::new(Cuda::new(1 + self.spawned.len(), std::sync::Arc::clone(&seen)));
            let spawned: Vec<_> = self
                .spawned
                .iter()
                .enumerate()
                .map(|(index, acts)| {
                    let (state, cuda) = (Arc::clone(&state), Arc::clone(&cuda));
                    loom::thread::spawn(move || {
                        for &act in acts.iter() {
                            self.act(act, 1 + index, &state, &cuda);
                        }
                    })
                })
                .collect();
            for &act in self.main {
                self.act(act, 0, &state, &cuda);
            }
            for thread in spawned {
                thread.join().unwrap();
            }
            for &act in self.after {
                self.act(act, 0, &state, &cuda);
            }
        });
        eprintln!(
            "{self:?}: {} executions in {:.2?}; queries {} ran, {} refused; waits {} in CUDA, {} refused; records into \
             a capture {} made, {} refused; {} broke a property",
            explored.executions(),
            start.elapsed(),
            explored.queries_ran.load(Count),
            explored.queries_refused.load(Count),
            explored.waits_in_cuda.load(Count),
            explored.waits_refused.load(Count),
            explored.records_made.load(Count),
            explored.records_refused.load(Count),
            explored.violations(),
        );
    }

    /// Checks the scenario: no execution breaks a property. Returns what it explored.
    fn check(self) -> std::sync::Arc<Explored> {
        let explored = std::sync::Arc::new(Explored::default());
        self.explore(None, &explored);
        explored.assert_unbroken(&self);
        explored
    }

    /// Checks a scenario with a seeded bug: loom must find an execution that breaks `property`
    /// (and stops there).
    fn must_break(self, property: usize) {
        let explored = std::sync::Arc::new(Explored::default());
        loom_support::must_break(&self, property, &explored, || self.explore(Some(property), &explored));
    }
}

/// Property 1: a record into a capture, then one outside (so that queries may pass again),
/// against a thread of two counted queries: every interleaving.
const MARKER_CALLS: Scenario = Scenario {
    start: Start::Recorded,
    main: &[Act::RecordIntoCapture, Act::RecordOutside],
    spawned: &[&[Act::Query, Act::Query]],
    after: &[],
    bug: Bug::None,
    preemption_bound: None,
};

/// Property 1 with two threads of one counted query each: at most 3 preemptions.
const TWO_QUERIERS: Scenario =
    Scenario { spawned: &[&[Act::Query], &[Act::Query]], preemption_bound: Some(3), ..MARKER_CALLS };

/// Property 2: the same records against a thread of two synchronizes: every interleaving.
const WAITERS: Scenario = Scenario { spawned: &[&[Act::Synchronize, Act::Synchronize]], ..MARKER_CALLS };

/// Property 3: a record into a capture and one outside on two threads, then a query once they
/// are joined, from an event never recorded (the generation decides) and from a recorded one:
/// every interleaving.
const KINDS: Scenario = Scenario {
    start: Start::NeverRecorded,
    main: &[],
    spawned: &[&[Act::RecordIntoCapture], &[Act::RecordOutside]],
    after: &[Act::Query],
    bug: Bug::None,
    preemption_bound: None,
};

/// Property 3 again: a record into a capture and one that may go into a capture but does not
/// (then a query), on two threads, then a query: every interleaving.
const MAYBE_CAPTURED: Scenario = Scenario {
    start: Start::Recorded,
    main: &[],
    spawned: &[&[Act::RecordIntoCapture], &[Act::RecordNotCaptured, Act::Query]],
    after: &[Act::Query],
    bug: Bug::None,
    preemption_bound: None,
};

/// Property 3 with a query meanwhile: the interleavings of at most 4 preemptions.
const KINDS_AND_A_QUERY: Scenario = Scenario { main: &[Act::Query], preemption_bound: Some(4), ..KINDS };

/// Property 4: two records into captures, each followed by a record outside, on two threads,
/// then a query: every interleaving.
const TURNS: Scenario = Scenario {
    start: Start::Recorded,
    main: &[Act::RecordIntoCapture, Act::RecordOutside],
    spawned: &[&[Act::RecordIntoCapture, Act::RecordOutside]],
    after: &[Act::Query],
    bug: Bug::None,
    preemption_bound: None,
};

/// All four at once: a record into a capture and one outside, a thread that queries and one
/// that synchronizes, then a query: at most 4 preemptions.
const TOGETHER: Scenario = Scenario {
    start: Start::Recorded,
    main: &[Act::RecordIntoCapture, Act::RecordOutside],
    spawned: &[&[Act::Query], &[Act::Synchronize]],
    after: &[Act::Query],
    bug: Bug::None,
    preemption_bound: Some(4),
};

#[test]
fn a_record_into_a_capture_and_a_counted_query_never_overlap() {
    let explored = MARKER_CALLS.check();
    assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
}

#[test]
fn a_record_into_a_capture_and_two_threads_counted_queries_never_overlap() {
    let explored = TWO_QUERIERS.check();
    assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
}

#[test]
fn a_record_into_a_capture_is_refused_beside_a_wait_in_cuda() {
    let explored = WAITERS.check();
    for (what, count) in [
        ("a wait in CUDA", &explored.waits_in_cuda),
        ("a wait refused", &explored.waits_refused),
        ("a record made", &explored.records_made),
        ("a record refused", &explored.records_refused),
    ] {
        assert!(count.load(Count) > 0, "{what} in some execution");
    }
}

#[test]
fn a_query_never_passes_while_the_last_record_may_be_captured() {
    for start in [Start::NeverRecorded, Start::Recorded] {
        let explored = Scenario { start, ..KINDS }.check();
        assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
    }
}

#[test]
fn a_query_meanwhile_never_passes_while_the_last_record_may_be_captured() {
    for start in [Start::NeverRecorded, Start::Recorded] {
        let explored = Scenario { start, ..KINDS_AND_A_QUERY }.check();
        assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
    }
}

#[test]
fn a_query_never_passes_after_a_record_that_may_have_been_captured() {
    let explored = MAYBE_CAPTURED.check();
    assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
}

#[test]
fn records_into_captures_take_turns() {
    TURNS.check();
}

#[test]
fn records_queries_and_a_wait_together() {
    TOGETHER.check();
}

/// Seeded bugs of property 1.
#[test]
fn a_record_made_before_its_mark_is_caught() {
    Scenario { bug: Bug::RecordBeforeMark, ..MARKER_CALLS }.must_break(1);
}

#[test]
fn a_query_that_is_not_counted_is_caught() {
    Scenario { bug: Bug::UncountedQuery, ..MARKER_CALLS }.must_break(1);
}

#[test]
fn a_record_whose_read_of_the_count_passes_its_mark_is_caught() {
    Scenario { bug: Bug::RecordWithoutSeqCst, ..MARKER_CALLS }.must_break(1);
    Scenario { bug: Bug::RecordWithoutSeqCst, ..WAITERS }.must_break(2);
}

/// Seeded bugs of property 2.
#[test]
fn a_record_that_does_not_ask_for_waiters_is_caught() {
    Scenario { bug: Bug::NoWaiterCheck, ..WAITERS }.must_break(2);
}

#[test]
fn a_record_that_asks_for_waiters_before_its_mark_is_caught() {
    Scenario { bug: Bug::WaiterCheckBeforeMark, ..WAITERS }.must_break(2);
}

#[test]
fn a_waiter_whose_read_of_the_mark_passes_its_count_is_caught() {
    Scenario { bug: Bug::WaiterWithoutSeqCst, ..WAITERS }.must_break(2);
}

/// Seeded bugs of property 3.
#[test]
fn an_outside_record_that_reads_its_ticket_late_is_caught() {
    Scenario { bug: Bug::TicketAfterRecord, ..KINDS }.must_break(3);
}

#[test]
fn a_record_into_a_capture_abandoned_once_made_is_caught() {
    Scenario { bug: Bug::AbandonedAfterRecord, ..KINDS }.must_break(3);
}

/// Seeded bug of property 4.
#[test]
fn records_into_captures_without_the_turn_are_caught() {
    Scenario { bug: Bug::NoTurn, ..TURNS }.must_break(4);
}
