//! The reactor's polling passes against records into a capture and dropped futures, under the
//! loom model checker: the crate's own sources of the passes' core
//! (`src/call/reactor_passes_core.rs`: the pass count, a pass in progress and the mark it reads
//! before each query, the wait for the pass in progress), of an event's record state
//! (`src/event/record_state_core.rs`: the mark, and the record into a capture that waits for the
//! pass) and of the capture-transition lock (`src/call/transitions_core.rs`, with the fast calls'
//! core it asks), included below by `#[path]`, not copied, and compiled against loom's
//! primitives (the `call::shim` and `event::shim` modules stand where `src/call/shim.rs` and
//! `src/event/shim.rs` stand in the crate; the record state's `wait_for_pass` is the passes'
//! core's, as in the crate).
//!
//! The callers modeled:
//! * the reactor (`completion/reactor.rs`, `serve` and `poll`), a thread of passes: each takes
//!   the read side of the capture-transition lock, begins a pass, and for each pending future
//!   either finds it dropped (its signal's count, as `is_dropped` reads `Arc::strong_count`,
//!   modeled Relaxed: the weakest it could be) and forgets it, or queries its event through the pass (the mark, then the query in
//!   CUDA); a refused event's future resolves with the refusal and is polled no more; the pass
//!   ends, then the lock is released. (`POLLING`, which only the exit hook also takes, is left
//!   out.)
//! * a recording thread (`stream/record.rs`, `record_during_captures`): under the read side it
//!   marks the watched event captured and waits for the marker calls and the reactor's pass in
//!   progress (`open_capture_record`), makes the record into the capture in CUDA, and closes it
//!   as captured; later the capture ends (a transition, under the write side); then, in some
//!   scenarios, the event is recorded outside any capture again (the record's fast path:
//!   ticket, record, note), after which it may be queried again. (The event's turn, the
//!   graph-mutation lock and the check for waiters in CUDA are left out: one recorder, no
//!   waiter; `loom_record_state.rs` checks them.)
//! * a dropping thread (`completion/mod.rs`, `Completion`'s drop): the signal's count falls
//!   (Release, as `Arc`'s drop), then it waits for the pass in progress; once that returns, the
//!   owner of the event (one from `Event::from_raw`) may destroy it.
//!
//! The properties:
//! 1. a reactor query of the watched event and its record into a capture never are in CUDA at
//!    once, and the query's return happens before the record;
//! 2. no reactor query of the watched event reaches CUDA after its record into the capture while
//!    that record is the last CUDA took of it;
//! 3. no query of a dropped future's event reaches CUDA once its drop has returned, and every
//!    query of it returned before (happens before) the drop's return;
//! 4. the capture does not end while a reactor query is in CUDA (the pass holds the read side),
//!    nor before such a query's return.
//!
//! CUDA is one word here ([`Cuda`]) that only read-modify-writes change, so that its
//! modification order is the order in which CUDA sees the calls; they are Relaxed, so the
//! oracle adds no synchronization that the protocol lacks. A second view asks what the other
//! threads know: the reactor marks its query in CUDA in a word of its own (Relaxed stores),
//! which the recorder, the capture's end and the dropper read (Relaxed) as they act: a query
//! whose return does not happen before is seen as still in CUDA.
//!
//! The pass's `SeqCst` fence and the waiter's are loom's, which models `fence(SeqCst)`; the pass
//! count's own `SeqCst` accesses are loom's too, which it reads as `AcqRel` (so the pass and its
//! waiter pair through their fences alone); the record state's `SeqCst` accesses are fenced as in
//! `loom_record_state.rs` (its docs say why).
//!
//! The seeded bugs (a record that does not wait for the pass, a reactor that reads the mark
//! before its pass begins, a pass that ends before its query is made, a pass that begins
//! without its fence or ends without Release, a pass that queries without reading the mark, a
//! drop that does not wait or waits without its fence, a pass outside the transition lock's
//! read side) must each be caught: the model is shown to be able to fail.

use loom_support::Exploration;
use std::sync::atomic::{AtomicUsize as Counter, Ordering::Relaxed as Count};

mod loom_support;

/// The call layer's cores the model runs, from the crate's sources (the module's files are
/// looked up in `src/call/`), over the `shim` below, as in the crate.
#[path = "../src/call"]
mod call {
    #[allow(dead_code, unreachable_pub)]
    #[path = "fast_call_core.rs"]
    mod fast_call_core;

    #[allow(dead_code, unreachable_pub)]
    #[path = "transitions_core.rs"]
    pub(crate) mod transitions_core;

    #[allow(dead_code, unreachable_pub)]
    #[path = "reactor_passes_core.rs"]
    pub(crate) mod reactor_passes_core;

    /// The call layer's loom shim, shared with `loom_fast_calls.rs` and `loom_joins.rs`.
    #[allow(dead_code, unused_imports)]
    #[path = "../../tests/loom_support/call_shim.rs"]
    mod loom_call;

    /// What the cores take from `super::shim`, here loom's (see `src/call/shim.rs` for std's):
    /// the call layer's loom shim, with a counted yield, and a fence and a 64-bit atomic that a
    /// seeded bug can weaken on one model thread.
    pub(crate) mod shim {
        #[allow(unused_imports)]
        pub(crate) use super::loom_call::*;

        use std::cell::Cell;

        std::thread_local! {
            /// The yields of the cores' spin waits (here, the waits for a pass) so far: loom runs
            /// every thread of a model on the test's own thread, so this counts the test's.
            static YIELDS: Cell<usize> = const { Cell::new(0) };
        }

        /// loom's yield, counted.
        pub(crate) fn yield_now() {
            YIELDS.with(|yields| yields.set(yields.get() + 1));
            loom::thread::yield_now();
        }

        /// The yields of the spin waits so far, on this test's thread.
        pub(crate) fn yields() -> usize {
            YIELDS.with(Cell::get)
        }

        loom::thread_local! {
            /// Whether this model thread's fences are lost (a seeded bug).
            static FENCES_LOST: Cell<bool> = Cell::new(false);
            /// Whether this model thread's `Release` on a 64-bit atomic is lost (a seeded bug).
            static RELEASE_LOST: Cell<bool> = Cell::new(false);
        }

        /// Makes this model thread's fences do nothing.
        pub(crate) fn lose_fences_on_this_thread() {
            FENCES_LOST.with(|lost| lost.set(true));
        }

        /// Makes this model thread's `Release` read-modify-writes of a 64-bit atomic `Relaxed`.
        pub(crate) fn lose_release_on_this_thread() {
            RELEASE_LOST.with(|lost| lost.set(true));
        }

        /// loom's fence, unless this thread lost its fences.
        pub(crate) fn fence(order: Ordering) {
            if !FENCES_LOST.with(Cell::get) {
                loom::sync::atomic::fence(order);
            }
        }

        /// loom's `AtomicU64`, the methods the passes' core calls, whose `Release` a seeded bug
        /// can take away on one thread.
        #[derive(Debug)]
        pub(crate) struct AtomicU64(loom::sync::atomic::AtomicU64);

        impl AtomicU64 {
            pub(crate) fn new(value: u64) -> AtomicU64 {
                AtomicU64(loom::sync::atomic::AtomicU64::new(value))
            }

            pub(crate) fn load(&self, order: Ordering) -> u64 {
                self.0.load(order)
            }

            pub(crate) fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
                let order =
                    if order == Ordering::Release && RELEASE_LOST.with(Cell::get) { Ordering::Relaxed } else { order };
                self.0.fetch_add(value, order)
            }
        }
    }
}

/// The event layer's core the model runs, from the crate's source (looked up in `src/event/`),
/// over the `shim` below, as in the crate.
#[path = "../src/event"]
mod event {
    #[allow(dead_code, unreachable_pub)]
    #[path = "record_state_core.rs"]
    pub(crate) mod record_state_core;

    /// The record state's loom shim, shared with `loom_record_state.rs`.
    #[allow(dead_code, unused_imports)]
    #[path = "../../tests/loom_support/record_state_shim.rs"]
    mod fenced;

    /// What the core takes from `super::shim`, here loom's (see `src/event/shim.rs` for std's):
    /// the shim shared with `loom_record_state.rs`, and the crate's wait for the reactor's pass,
    /// which a seeded bug can skip on one model thread.
    pub(crate) mod shim {
        pub(crate) use super::fenced::*;

        use std::cell::Cell;

        loom::thread_local! {
            /// Whether this model thread's records skip the wait for the pass (a seeded bug).
            static PASS_WAIT_SKIPPED: Cell<bool> = Cell::new(false);
        }

        /// Makes this model thread's records into a capture skip the wait for the pass.
        pub(crate) fn skip_the_pass_wait_on_this_thread() {
            PASS_WAIT_SKIPPED.with(|skipped| skipped.set(true));
        }

        /// The crate's wait (`src/event/shim.rs` re-exports the same), unless skipped.
        pub(crate) fn wait_for_pass() {
            if !PASS_WAIT_SKIPPED.with(Cell::get) {
                crate::call::reactor_passes_core::wait_for_pass();
            }
        }
    }
}

use call::reactor_passes_core::{Pass, Polled, wait_for_pass};
use call::shim::{lose_fences_on_this_thread, lose_release_on_this_thread, yields};
use call::transitions_core::{capture_transition, no_capture_transitions};
use event::record_state_core::RecordState;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering::Relaxed, Ordering::Release};
use std::cell::Cell;

/// The two events of the model: the watched one, which the recorder records into a capture,
/// and the other future's (which may be dropped).
const WATCHED: usize = 1;
const OTHER: usize = 2;

/// Queries of the watched event in CUDA (bits 0..4).
const QUERY_WATCHED: usize = 1;
const QUERIES_WATCHED: usize = 0xf;
/// Queries of the other future's event in CUDA (bits 4..8).
const QUERY_OTHER: usize = 1 << 4;
const QUERIES_OTHER: usize = 0xf << 4;
/// The watched event's record into the capture is in CUDA.
const RECORDING: usize = 1 << 8;
/// The last record of the watched event that CUDA took went into the capture.
const LAST_CAPTURED: usize = 1 << 9;
/// The capture is in progress.
const CAPTURING: usize = 1 << 10;
/// The other future was dropped, and its event destroyed by its owner.
const DESTROYED: usize = 1 << 11;

/// CUDA as the properties see it, twice (see the module docs): one word in CUDA's order, and
/// the reactor's query in CUDA as the other threads know it.
///
/// A call that breaks a property is noted in [`Explored`], not panicked on: a panic where
/// loom's objects are alive aborts the process. The model panics at the start of the next
/// execution instead.
struct Cuda {
    word: AtomicUsize,
    /// The event the reactor queries in CUDA ([`WATCHED`], [`OTHER`]), 0 while none.
    reactor_in_call: AtomicUsize,
    explored: std::sync::Arc<Explored>,
}

impl Cuda {
    fn new(explored: std::sync::Arc<Explored>) -> Cuda {
        Cuda { word: AtomicUsize::new(CAPTURING), reactor_in_call: AtomicUsize::new(0), explored }
    }

    /// The reactor's `cuEventQuery` of `event`, from its start to its return.
    fn query(&self, event: usize) {
        self.reactor_in_call.store(event, Relaxed);
        let one = if event == WATCHED { QUERY_WATCHED } else { QUERY_OTHER };
        let before = self.word.fetch_add(one, Relaxed);
        if event == WATCHED && before & RECORDING != 0 {
            self.explored
                .violated(1, "a reactor query reached CUDA while a record of its event into a capture was in CUDA");
        } else if event == WATCHED && before & LAST_CAPTURED != 0 {
            self.explored.violated(
                2,
                "a reactor query reached CUDA after a record of its event into a capture, the last record CUDA took",
            );
        } else if event == OTHER && before & DESTROYED != 0 {
            self.explored.violated(3, "a query of a dropped future's event reached CUDA after the drop returned");
        }
        self.word.fetch_sub(one, Relaxed);
        self.reactor_in_call.store(0, Relaxed);
        let ran = if event == WATCHED { &self.explored.queries_ran } else { &self.explored.other_queried };
        ran.fetch_add(1, Count);
    }

    /// The record of the watched event into the capture (`cudaEventRecord` on the capturing
    /// stream), from its start to its return.
    fn record_into_capture(&self) {
        let before = self.word.fetch_or(RECORDING | LAST_CAPTURED, Relaxed);
        if before & QUERIES_WATCHED != 0 {
            self.explored
                .violated(1, "a record into a capture reached CUDA while a reactor query of its event was in CUDA");
        }
        if self.reactor_in_call.load(Relaxed) == WATCHED {
            self.explored.violated(
                1,
                "a record into a capture reached CUDA where a reactor query's return does not happen before it",
            );
        }
        self.word.fetch_and(!RECORDING, Relaxed);
        self.explored.records_made.fetch_add(1, Count);
    }

    /// A record of the watched event outside any capture: the last record CUDA took is a marker.
    fn record_outside(&self) {
        self.word.fetch_and(!LAST_CAPTURED, Relaxed);
    }

    /// `cudaStreamEndCapture`.
    fn end_capture(&self) {
        let before = self.word.fetch_and(!CAPTURING, Relaxed);
        if before & (QUERIES_WATCHED | QUERIES_OTHER) != 0 {
            self.explored.violated(4, "the capture ended while a reactor query was in CUDA");
        }
        if self.reactor_in_call.load(Relaxed) != 0 {
            self.explored.violated(4, "the capture ended where a reactor query's return does not happen before it");
        }
    }

    /// The owner destroys the dropped future's event (`cudaEventDestroy`), once the drop has
    /// returned.
    fn destroy_dropped_event(&self) {
        let before = self.word.fetch_or(DESTROYED, Relaxed);
        if before & QUERIES_OTHER != 0 {
            self.explored.violated(3, "a dropped future's event was destroyed while a query of it was in CUDA");
        }
        if self.reactor_in_call.load(Relaxed) == OTHER {
            self.explored
                .violated(3, "a dropped future's event was destroyed where a query of it does not happen before");
        }
    }
}

/// A pending future as the model keeps it: its event's record state, and its signal's count
/// (the reactor's entry and the `Completion`, as `Arc`'s strong count).
struct Future {
    state: RecordState,
    signal: AtomicUsize,
}

impl Future {
    fn new() -> Future {
        Future { state: RecordState::recorded(), signal: AtomicUsize::new(2) }
    }

    /// `Completion`'s drop: the signal's count falls (Release, as `Arc`'s drop).
    fn drop_completion(&self) {
        self.signal.fetch_sub(1, Release);
    }

    /// The reactor's `is_dropped`: only its entry holds the signal (`Arc::strong_count`,
    /// Relaxed).
    fn is_dropped(&self) -> bool {
        self.signal.load(Relaxed) == 1
    }
}

/// An event as a pass of the model queries it, through the core's [`Polled`]: the mark of its
/// record state, then the query in [`Cuda`].
struct Polling<'a> {
    state: &'a RecordState,
    event: usize,
    cuda: &'a Cuda,
    /// The mark as read before the pass began (a seeded bug), instead of now.
    read_early: Option<bool>,
    /// Whether the mark is not read at all (a seeded bug).
    unread: bool,
    /// Whether the query is made once the pass has ended (a seeded bug): noted here, made later.
    defer: bool,
    deferred: Cell<bool>,
}

impl Polled for Polling<'_> {
    type Error = event::shim::Error;

    fn refuse_captured(&self) -> Result<(), Self::Error> {
        match self.read_early {
            _ if self.unread => Ok(()),
            Some(true) => Err(event::shim::Error::CaptureMisuse("captured, as read before the pass")),
            Some(false) => Ok(()),
            None => self.state.refuse_captured(),
        }
    }

    fn query(&self) -> Result<bool, Self::Error> {
        if self.defer {
            self.deferred.set(true);
        } else {
            self.cuda.query(self.event);
        }
        // Never complete: the future stays pending until it is refused or dropped.
        Ok(false)
    }
}

/// The seeded bugs, each in the model's use of the cores or in the shims under them (a lost
/// fence, a lost `Release`, a skipped wait).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    None,
    /// 1: the record into a capture does not wait for the pass in progress.
    RecordSkipsThePassWait,
    /// 1: the reactor reads the mark before it begins its pass.
    MarkReadBeforeThePass,
    /// 1: the pass ends (the count even again) before its query is made in CUDA.
    QueryAfterThePassEnds,
    /// 1, 3: the reactor's pass begins without its fence.
    PassBeginsWithoutItsFence,
    /// 1, 3: the reactor's pass ends without Release: a waiter that sees it ended does not see
    /// its query returned.
    PassEndsWithoutRelease,
    /// 2: the pass queries the event without reading its mark.
    MarkNotRead,
    /// 3: the dropped future's drop does not wait for the pass in progress.
    DropSkipsThePassWait,
    /// 3: the drop waits without its fence.
    DropWaitsWithoutItsFence,
    /// 4: the pass is made without the read side of the capture-transition lock.
    PassOutsideTheLock,
}

/// What the recording thread does with the watched event.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Record {
    /// Nothing (no watched future either).
    None,
    /// Records it into the capture, then ends the capture.
    IntoCapture,
    /// As `IntoCapture`, then records it outside any capture.
    IntoCaptureThenOutside,
}

/// The other future, on an event that no record into a capture touches.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Other {
    /// None.
    None,
    /// Pending throughout: every pass queries its event.
    Pending,
    /// Dropped by a thread, after which its event's owner destroys the event.
    Dropped,
}

/// One model: the reactor makes `passes` passes on a thread of its own, over the watched
/// event's future (with `record`) and the other future (with `other`); the model's main thread
/// records (or drops, without `record`), a third thread drops (with both).
#[derive(Clone, Copy, Debug)]
struct Scenario {
    passes: usize,
    record: Record,
    other: Other,
    bug: Bug,
    /// loom's preemption bound; `None` explores every interleaving (up to its partial-order
    /// reduction).
    preemption_bound: Option<usize>,
}

/// What a run of the model saw, over all its executions.
#[derive(Debug, Default)]
struct Explored {
    /// Reactor queries of the watched event made in CUDA, and refused by its mark.
    queries_ran: Counter,
    queries_refused: Counter,
    /// Records of the watched event into the capture.
    records_made: Counter,
    /// Queries of the other future's event, and passes that found it dropped.
    other_queried: Counter,
    dropped_seen: Counter,
    /// Yields of the waits for a pass (a recorder's, a dropper's): each spins while a pass runs.
    spins: Counter,
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
    /// The reactor's thread: its passes over the pending futures.
    fn reactor(self, watched: &Future, other: &Future, cuda: &Cuda) {
        match self.bug {
            Bug::PassBeginsWithoutItsFence => lose_fences_on_this_thread(),
            Bug::PassEndsWithoutRelease => lose_release_on_this_thread(),
            _ => {}
        }
        let (mut watching, mut polling_other) = (self.record != Record::None, self.other != Other::None);
        for _ in 0..self.passes {
            let transitions = (self.bug != Bug::PassOutsideTheLock).then(no_capture_transitions);
            let read_early = (self.bug == Bug::MarkReadBeforeThePass && watching).then(|| watched.state.is_captured());
            let pass = Pass::begin();
            let mut deferred = Vec::new();
            if watching {
                let polling = self.polling(&watched.state, WATCHED, cuda, read_early);
                if pass.query(&polling).is_err() {
                    // Resolved with the refusal: polled no more.
                    watching = false;
                    cuda.explored.queries_refused.fetch_add(1, Count);
                }
                if polling.deferred.get() {
                    deferred.push(WATCHED);
                }
            }
            if polling_other {
                if other.is_dropped() {
                    polling_other = false;
                    cuda.explored.dropped_seen.fetch_add(1, Count);
                } else {
                    let polling = self.polling(&other.state, OTHER, cuda, None);
                    let _ = pass.query(&polling);
                    if polling.deferred.get() {
                        deferred.push(OTHER);
                    }
                }
            }
            drop(pass);
            for event in deferred {
                cuda.query(event);
            }
            drop(transitions);
        }
    }

    fn polling<'a>(
        self,
        state: &'a RecordState,
        event: usize,
        cuda: &'a Cuda,
        read_early: Option<bool>,
    ) -> Polling<'a> {
        Polling {
            state,
            event,
            cuda,
            read_early,
            unread: self.bug == Bug::MarkNotRead,
            defer: self.bug == Bug::QueryAfterThePassEnds,
            deferred: Cell::new(false),
        }
    }

    /// The recording thread: the watched event into the capture as `record_during_captures`
    /// records it, the capture's end, and perhaps a record outside.
    fn recorder(self, watched: &Future, cuda: &Cuda) {
        if self.bug == Bug::RecordSkipsThePassWait {
            event::shim::skip_the_pass_wait_on_this_thread();
        }
        {
            let _transitions = no_capture_transitions();
            let opened = watched.state.open_capture_record();
            cuda.record_into_capture();
            watched.state.close_capture_record(opened, true);
        }
        {
            let _transition = capture_transition().expect("no hold on the recorder");
            cuda.end_capture();
        }
        if self.record == Record::IntoCaptureThenOutside {
            let ticket = watched.state.before_record();
            cuda.record_outside();
            watched.state.note_uncaptured_record(ticket);
        }
    }

    /// The dropping thread: `Completion`'s drop, then the owner destroys the event.
    fn dropper(self, dropped: &Future, cuda: &Cuda) {
        if self.bug == Bug::DropWaitsWithoutItsFence {
            lose_fences_on_this_thread();
        }
        dropped.drop_completion();
        if self.bug != Bug::DropSkipsThePassWait {
            wait_for_pass();
        }
        cuda.destroy_dropped_event();
    }

    /// Runs every execution of the scenario, noting what they saw in `explored`; with `stop`,
    /// panics at the start of the execution after the first that broke that property.
    fn explore(self, stop: Option<usize>, explored: &std::sync::Arc<Explored>) {
        let seen = std::sync::Arc::clone(explored);
        let builder = loom_support::builder(self.preemption_bound);
        let start = std::time::Instant::now();
        let yields_before = yields();
        builder.check(move || {
            seen.begin(stop);
            let (watched, other) = (Arc::new(Future::new()), Arc::new(Future::new()));
            let cuda = Arc::new(Cuda::new(std::sync::Arc::clone(&seen)));
            let reactor = {
                let (watched, other, cuda) = (Arc::clone(&watched), Arc::clone(&other), Arc::clone(&cuda));
                loom::thread::spawn(move || self.reactor(&watched, &other, &cuda))
            };
            let dropper = (self.other == Other::Dropped && self.record != Record::None).then(|| {
                let (other, cuda) = (Arc::clone(&other), Arc::clone(&cuda));
                loom::thread::spawn(move || self.dropper(&other, &cuda))
            });
            match (self.record, self.other) {
                (Record::None, Other::Dropped) => self.dropper(&other, &cuda),
                (Record::None, _) => {}
                _ => self.recorder(&watched, &cuda),
            }
            reactor.join().unwrap();
            if let Some(dropper) = dropper {
                dropper.join().unwrap();
            }
        });
        explored.spins.fetch_add(yields() - yields_before, Count);
        eprintln!(
            "{self:?}: {} executions in {:.2?}; queries of the watched event {} ran, {} refused; {} records into \
             the capture; the other future's event {} queried, {} found dropped; {} spins waiting for a pass; {} \
             broke a property",
            explored.executions(),
            start.elapsed(),
            explored.queries_ran.load(Count),
            explored.queries_refused.load(Count),
            explored.records_made.load(Count),
            explored.other_queried.load(Count),
            explored.dropped_seen.load(Count),
            explored.spins.load(Count),
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

/// Properties 1, 2 and 4: two passes over the watched event's future against its record into
/// the capture and the capture's end: every interleaving.
const RECORD: Scenario =
    Scenario { passes: 2, record: Record::IntoCapture, other: Other::None, bug: Bug::None, preemption_bound: None };

/// The same, then a record outside, against three passes: a pass after that record may query
/// the event again. Every interleaving.
const RECORD_THEN_OUTSIDE: Scenario = Scenario { passes: 3, record: Record::IntoCaptureThenOutside, ..RECORD };

/// Property 4 with a query to overlap: two passes over the watched event's future and another,
/// pending throughout, whose event every pass queries (also while the capture ends): at most 3
/// preemptions.
const RECORD_BESIDE_ANOTHER: Scenario = Scenario { other: Other::Pending, preemption_bound: Some(3), ..RECORD };

/// Property 3: three passes over a future that the main thread drops: every interleaving.
const DROP: Scenario = Scenario { passes: 3, record: Record::None, other: Other::Dropped, ..RECORD };

/// All at once: three passes over both futures, a recorder (into the capture, then outside) and
/// a dropper: at most 2 preemptions. (At 3, loom finds a schedule in which the two waiters spin
/// in turn for ever while the reactor never runs: it models no fairness, and stops at its limit
/// of branches.)
const TOGETHER: Scenario = Scenario {
    passes: 3,
    record: Record::IntoCaptureThenOutside,
    other: Other::Dropped,
    preemption_bound: Some(2),
    ..RECORD
};

#[test]
fn a_pass_never_queries_an_event_beside_or_after_its_record_into_a_capture() {
    let explored = RECORD.check();
    assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
    assert!(explored.spins.load(Count) > 0, "a record waited for a pass");
}

#[test]
fn a_pass_queries_an_event_recorded_outside_again_and_never_the_captured_record() {
    let explored = RECORD_THEN_OUTSIDE.check();
    assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
}

#[test]
fn a_capture_never_ends_while_a_pass_queries() {
    let explored = RECORD_BESIDE_ANOTHER.check();
    assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
    assert!(explored.other_queried.load(Count) > 0, "the other event queried");
}

#[test]
fn a_dropped_future_s_event_is_queried_no_more_once_the_drop_returned() {
    let explored = DROP.check();
    assert!(explored.other_queried.load(Count) > 0 && explored.dropped_seen.load(Count) > 0, "both outcomes");
    assert!(explored.spins.load(Count) > 0, "a drop waited for a pass");
}

#[test]
fn a_record_a_drop_and_the_passes_together() {
    let explored = TOGETHER.check();
    assert!(explored.queries_ran.load(Count) > 0 && explored.queries_refused.load(Count) > 0, "both outcomes");
    assert!(explored.other_queried.load(Count) > 0 && explored.dropped_seen.load(Count) > 0, "both outcomes");
}

/// Seeded bug of property 1: the record waits for the marker calls but not for the pass.
#[test]
fn a_record_that_does_not_wait_for_the_pass_is_caught() {
    Scenario { bug: Bug::RecordSkipsThePassWait, ..RECORD }.must_break(1);
}

/// Seeded bug of property 1: the mark read before the pass begins (the count still even), so
/// the record does not wait for a pass that queries the event on that stale read.
#[test]
fn a_reactor_that_reads_the_mark_before_its_pass_is_caught() {
    Scenario { bug: Bug::MarkReadBeforeThePass, ..RECORD }.must_break(1);
}

/// Seeded bug of property 1: the count is even again while the pass's query is made.
#[test]
fn a_query_made_once_the_pass_ended_is_caught() {
    Scenario { bug: Bug::QueryAfterThePassEnds, ..RECORD }.must_break(1);
}

/// Seeded bug of properties 1 and 3: the pass's fence (which pairs with the waiter's) is lost.
#[test]
fn a_pass_that_begins_without_its_fence_is_caught() {
    Scenario { bug: Bug::PassBeginsWithoutItsFence, ..RECORD }.must_break(1);
    Scenario { bug: Bug::PassBeginsWithoutItsFence, ..DROP }.must_break(3);
}

/// Seeded bug of properties 1 and 3: the pass ends without Release.
#[test]
fn a_pass_that_ends_without_release_is_caught() {
    Scenario { bug: Bug::PassEndsWithoutRelease, ..RECORD }.must_break(1);
    Scenario { bug: Bug::PassEndsWithoutRelease, ..DROP }.must_break(3);
}

/// Seeded bug of property 2: the pass queries the event whatever its mark.
#[test]
fn a_pass_that_does_not_read_the_mark_is_caught() {
    Scenario { bug: Bug::MarkNotRead, ..RECORD }.must_break(2);
}

/// Seeded bug of property 3: the drop does not wait for the pass.
#[test]
fn a_drop_that_does_not_wait_for_the_pass_is_caught() {
    Scenario { bug: Bug::DropSkipsThePassWait, ..DROP }.must_break(3);
}

/// Seeded bug of property 3: the drop's wait without its fence (which pairs with the pass's).
#[test]
fn a_drop_that_waits_without_its_fence_is_caught() {
    Scenario { bug: Bug::DropWaitsWithoutItsFence, ..DROP }.must_break(3);
}

/// Seeded bug of property 4: the pass without the read side of the capture-transition lock.
#[test]
fn a_pass_outside_the_transition_lock_is_caught() {
    Scenario { bug: Bug::PassOutsideTheLock, ..RECORD_BESIDE_ANOTHER }.must_break(4);
}
