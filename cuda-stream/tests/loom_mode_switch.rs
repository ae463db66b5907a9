//! The mode switch under the loom model checker: the crate's own source of its core
//! (`src/call/mode_switch_core.rs`, included below by `#[path]`, not copied), compiled against
//! loom's atomics, lock, thread-local keys and statics instead of std's (the `shim` module below
//! stands where `src/call/shim.rs` stands in the crate).
//!
//! The callers modeled (`call/race/mod.rs`): a thread records an operation in the detector's
//! history as `check` does (`tracking`, then `this_threads_mode`, then under the history's lock
//! `live_model`: the history of the period `on_period` reads there, an older one replaced), then
//! reports what it found (`keep`); the switch's hook forgets the history when it is off
//! everywhere (`forget_history`: unless the history is of the current period). The properties:
//! 0. the word's period is the number of times the mode went off everywhere (its ON bits went
//!    from nonzero to zero) in the word's modification order, in every state it takes;
//! 1. a record is filed under the on-period current when it is filed, never one before the
//!    on-period in which its thread found the mode on;
//! 2. the history read (as `live_model` reads it) once the threads are joined holds every record
//!    filed in the current on-period and none of an earlier one: a mode switch never loses a
//!    record of an on-period, and never keeps one of an earlier period;
//! 3. off everywhere at the end, the hook has left no record of an earlier on-period;
//! 4. every reported item is taken once (`take_process_kept`, a scope's `take_kept`) or counted
//!    as dropped.
//!
//! The true on-period of a state is a ghost the shim keeps: its `AtomicU64` is a loom index into
//! a log of the values written (each with the number of times the ON bits went to zero up to
//! it), so that each load tells exactly which write it read. The core takes no `SeqCst`, so
//! loom's reading of it (acquire/release only) changes nothing here.
//!
//! The seeded bugs (the period read before the mode, the word changed in two steps, a hook that
//! forgets whatever history it finds) must each be caught: the model is shown to be able to fail.

use loom_support::Exploration;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize as Counter, Ordering::Relaxed as Count};

mod loom_support;

/// The crate's source of the mode switch's core, over the `shim` below.
#[allow(dead_code, unreachable_pub)]
#[path = "../src/call/mode_switch_core.rs"]
mod mode_switch_core;

/// What the core takes from `super::shim`, here loom's (see `src/call/shim.rs` for std's).
mod shim {
    use std::cell::Cell;

    pub(crate) use loom::sync::Mutex;
    pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
    pub(crate) use loom::thread::LocalKey;
    pub(crate) use std::sync::PoisonError;

    /// Each static of the core is a lazy static of one execution of the model.
    macro_rules! shared_statics {
        ($($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
            loom::lazy_static! { $($(#[$attr])* static ref $name: $t = $init;)* }
        };
    }
    pub(crate) use shared_statics;

    /// loom's atomics and locks are built at run time: the constructor is not `const`.
    macro_rules! const_in_the_crate {
        ($(#[$attr:meta])* $vis:vis const fn $($rest:tt)*) => {
            $(#[$attr])* $vis fn $($rest)*
        };
    }
    pub(crate) use const_in_the_crate;

    /// The word's bits that say whether the mode is on anywhere (the core's `ON_BITS`).
    const ON_BITS: u64 = (1 << 32) - 1;

    std::thread_local! {
        /// Whether the word changes in two steps (a seeded bug): the mode and scopes, then the
        /// period. loom runs every thread of a model on the test's own thread, so this is the
        /// test's.
        static TWO_STEPS: Cell<bool> = const { Cell::new(false) };
        /// The first state whose period is not its count of times off (property 0): its value
        /// and that count.
        static WORD_BROKEN: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
    }

    loom::thread_local! {
        /// The true on-period of the state this model thread last read or wrote.
        static LAST_SEEN: Cell<u64> = Cell::new(0);
    }

    /// Makes the words of this test change in two steps (or in one again).
    pub(crate) fn change_in_two_steps(two: bool) {
        TWO_STEPS.with(|two_steps| two_steps.set(two));
    }

    /// Takes the first state that broke property 0 since the last call.
    pub(crate) fn take_word_broken() -> Option<(u64, u64)> {
        WORD_BROKEN.with(Cell::take)
    }

    /// The true on-period (the count of times off everywhere) of the state this model thread
    /// last read or wrote.
    pub(crate) fn last_seen() -> u64 {
        LAST_SEEN.with(Cell::get)
    }

    /// std's `AtomicU64` as the core calls it, over a loom index into a log of its values, each
    /// with its true on-period.
    #[derive(Debug)]
    pub(crate) struct AtomicU64 {
        index: loom::sync::atomic::AtomicUsize,
        log: std::sync::Mutex<Vec<(u64, u64)>>,
    }

    impl AtomicU64 {
        pub(crate) fn new(value: u64) -> AtomicU64 {
            AtomicU64 { index: loom::sync::atomic::AtomicUsize::new(0), log: std::sync::Mutex::new(vec![(value, 0)]) }
        }

        /// The value at `index`, noted as this thread's last seen.
        fn seen(&self, index: usize) -> u64 {
            let (value, period) = self.log.lock().unwrap()[index];
            LAST_SEEN.with(|seen| seen.set(period));
            value
        }

        /// Writes `value` after the state at `index`: its index.
        fn push(&self, index: usize, value: u64) -> usize {
            let mut log = self.log.lock().unwrap();
            let (before, period) = log[index];
            let period = period + u64::from(before & ON_BITS != 0 && value & ON_BITS == 0);
            if value >> 32 != period {
                WORD_BROKEN.with(|broken| {
                    if broken.get().is_none() {
                        broken.set(Some((value, period)));
                    }
                });
            }
            log.push((value, period));
            log.len() - 1
        }

        pub(crate) fn load(&self, order: Ordering) -> u64 {
            self.seen(self.index.load(order))
        }

        pub(crate) fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
            let fetch = match order {
                Ordering::AcqRel | Ordering::Acquire => Ordering::Acquire,
                _ => Ordering::Relaxed,
            };
            self.fetch_update(order, fetch, |state| Some(state.wrapping_add(value))).unwrap_or_else(|state| state)
        }

        pub(crate) fn fetch_update(
            &self,
            set: Ordering,
            fetch: Ordering,
            mut update: impl FnMut(u64) -> Option<u64>,
        ) -> Result<u64, u64> {
            let two_steps = TWO_STEPS.with(Cell::get);
            let mut wanted = None;
            let first = self.index.fetch_update(set, fetch, |index| {
                let before = self.log.lock().unwrap()[index].0;
                let after = update(before)?;
                wanted = Some((before, after));
                // In two steps, the first leaves the period as it was.
                Some(self.push(index, if two_steps { (after & ON_BITS) | (before & !ON_BITS) } else { after }))
            });
            let index = match first {
                Ok(index) => index,
                Err(index) => return Err(self.seen(index)),
            };
            let before = self.seen(index);
            if let Some((before, after)) = wanted.filter(|&(before, after)| two_steps && (before ^ after) >> 32 != 0) {
                let added = (after & !ON_BITS).wrapping_sub(before & !ON_BITS);
                let second = self.index.fetch_update(set, fetch, |index| {
                    let now = self.log.lock().unwrap()[index].0;
                    Some(self.push(index, now.wrapping_add(added)))
                });
                let _ = self.seen(second.unwrap_or_else(|index| index));
            }
            Ok(before)
        }
    }
}

use loom::sync::Mutex;
use mode_switch_core::{Mode, ModeScope, ModeSwitch, ThreadScopes};

/// A mode for the model.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Level {
    Off,
    Report,
    Refuse,
}

impl Mode for Level {
    const OFF: Self = Level::Off;
    const REPORT: Self = Level::Report;
    const REFUSE: Self = Level::Refuse;
}

/// One operation in the history: the true on-period of the state its thread found on, and the
/// period it was filed under, with that read's true on-period.
#[derive(Copy, Clone, Debug)]
struct Record {
    id: usize,
    checked: u64,
    filed: u64,
    filed_in: u64,
}

/// The detector's history (its `Model`) of one period.
#[derive(Debug)]
struct History {
    period: u64,
    records: Vec<Record>,
}

loom::thread_local! {
    static SCOPES: ThreadScopes<Level, usize> = RefCell::new(Vec::new());
    static REPORTING_ONLY: Cell<bool> = Cell::new(false);
}

loom::lazy_static! {
    /// The switch, of one execution: keeps two items a list; forgets the history when off
    /// everywhere.
    static ref SWITCH: ModeSwitch<Level, usize> = ModeSwitch::new(&SCOPES, &REPORTING_ONLY, 2, Some(forget_history));
    /// The detector's `MODEL`.
    static ref HISTORY: Mutex<Option<History>> = Mutex::new(None);
}

std::thread_local! {
    /// The seeded bug of this test (loom runs every thread of a model on the test's thread).
    static BUG: Cell<Bug> = const { Cell::new(Bug::None) };
}

fn bug() -> Bug {
    BUG.with(Cell::get)
}

/// `forget_history` of `race/mod.rs`: run by the switch once it is off everywhere.
fn forget_history() {
    let mut history = HISTORY.lock().unwrap();
    if bug() == Bug::ForgetWhatever || history.as_ref().is_some_and(|history| history.period != SWITCH.on_period()) {
        *history = None;
    }
}

/// What a thread of the model does, in order.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    /// `set_process_mode`.
    Set(Level),
    /// `open_scope`, kept on the thread until `Close`.
    Open(Level),
    /// Takes the innermost scope's items, then drops it.
    Close,
    /// An operation checked and recorded as `race::check` does, its races reported.
    Record(usize),
}

/// The seeded bugs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    None,
    /// 1: the recording thread reads the period before it asks its mode.
    PeriodBeforeMode,
    /// 0: the word changes in two atomic steps: the mode and scopes, then the period.
    TwoSteps,
    /// 2: the hook forgets the history whatever its period (one another thread made since).
    ForgetWhatever,
}

/// One model: the main thread does `main` while each of `spawned` does its acts.
#[derive(Clone, Copy, Debug)]
struct Scenario {
    start: Level,
    main: &'static [Act],
    spawned: &'static [&'static [Act]],
    bug: Bug,
    preemption_bound: Option<usize>,
}

/// What a run of the model saw, over all its executions.
#[derive(Debug, Default)]
struct Explored {
    records: Counter,
    records_kept_at_the_end: Counter,
    records_forgotten: Counter,
    /// The executions, and those that broke a property.
    run: Exploration,
}

impl std::ops::Deref for Explored {
    type Target = Exploration;

    fn deref(&self) -> &Exploration {
        &self.run
    }
}

/// One execution's items: those reported and those taken.
#[derive(Default)]
struct Items {
    reported: Vec<usize>,
    taken: Vec<usize>,
    records: Vec<Record>,
}

impl Scenario {
    fn act(
        self,
        act: Act,
        scopes: &mut Vec<ModeScope<Level, usize>>,
        items: &std::sync::Mutex<Items>,
        explored: &Explored,
    ) {
        match act {
            Act::Set(level) => drop(SWITCH.set_process_mode(level)),
            Act::Open(level) => scopes.push(SWITCH.open_scope(level)),
            Act::Close => {
                let scope = scopes.pop().expect("a scope to close");
                items.lock().unwrap().taken.extend(scope.take_kept());
            }
            Act::Record(id) => {
                let early = (self.bug == Bug::PeriodBeforeMode).then(|| (SWITCH.on_period(), shim::last_seen()));
                if !SWITCH.is_on_anywhere() {
                    return;
                }
                let mode = SWITCH.this_threads_mode();
                let checked = shim::last_seen();
                if mode == Level::Off {
                    return;
                }
                let record = {
                    let mut history = HISTORY.lock().unwrap();
                    let (filed, filed_in) = early.unwrap_or_else(|| (SWITCH.on_period(), shim::last_seen()));
                    if history.as_ref().is_none_or(|history| history.period != filed) {
                        *history = Some(History { period: filed, records: Vec::new() });
                    }
                    let record = Record { id, checked, filed, filed_in };
                    history.as_mut().unwrap().records.push(record);
                    record
                };
                explored.records.fetch_add(1, Count);
                if record.filed != record.filed_in || record.filed_in < record.checked {
                    explored.violated(1, format!("{record:?} is filed under another on-period than its own"));
                }
                let mut items = items.lock().unwrap();
                items.records.push(record);
                if mode == Level::Report {
                    items.reported.push(id);
                    drop(items);
                    SWITCH.keep([id]);
                }
            }
        }
    }

    /// The checks once every thread is joined.
    fn after(self, items: &std::sync::Mutex<Items>, explored: &Explored) {
        let items = items.lock().unwrap();
        // Property 3: off everywhere, the hook left nothing of an earlier on-period.
        let off = !SWITCH.is_on_anywhere();
        let now = shim::last_seen();
        if off {
            if let Some(history) = HISTORY.lock().unwrap().as_ref() {
                if let Some(old) = history.records.iter().find(|record| record.filed_in < now) {
                    explored.violated(3, format!("off everywhere in on-period {now}, {old:?} is still kept"));
                }
            }
        }
        // Property 2: the history as `live_model` reads it now.
        let mut history = HISTORY.lock().unwrap();
        let period = SWITCH.on_period();
        let now = shim::last_seen();
        if history.as_ref().is_none_or(|history| history.period != period) {
            *history = Some(History { period, records: Vec::new() });
        }
        let kept = &history.as_ref().unwrap().records;
        for record in &items.records {
            let is_kept = kept.iter().any(|kept| kept.id == record.id);
            if record.filed_in == now && !is_kept {
                explored.violated(2, format!("{record:?} of the current on-period {now} is lost"));
            }
            if record.filed_in < now && is_kept {
                explored.violated(2, format!("{record:?} of an earlier on-period is kept in {now}"));
            }
            if is_kept {
                explored.records_kept_at_the_end.fetch_add(1, Count);
            } else {
                explored.records_forgotten.fetch_add(1, Count);
            }
        }
        drop(history);
        // Property 4: each reported item taken once, or counted as dropped.
        let mut taken = items.taken.clone();
        taken.extend(SWITCH.take_process_kept());
        taken.sort_unstable();
        let mut reported = items.reported.clone();
        reported.sort_unstable();
        if taken.len() + SWITCH.dropped() != reported.len() || !taken.iter().all(|item| reported.contains(item)) {
            explored.violated(4, format!("reported {reported:?}, taken {taken:?}, {} dropped", SWITCH.dropped()));
        }
    }

    fn explore(self, stop: Option<usize>, explored: &std::sync::Arc<Explored>) {
        BUG.with(|bug| bug.set(self.bug));
        shim::change_in_two_steps(self.bug == Bug::TwoSteps);
        let _ = shim::take_word_broken();
        let seen = std::sync::Arc::clone(explored);
        let builder = loom_support::builder(self.preemption_bound);
        let start = std::time::Instant::now();
        let note_word = |explored: &Explored| {
            if let Some((value, period)) = shim::take_word_broken() {
                explored
                    .violated(0, format!("the word {value:#x} says period {}, went off {period} times", value >> 32));
            }
        };
        builder.check(move || {
            note_word(&seen);
            seen.begin(stop);
            let items = std::sync::Arc::new(std::sync::Mutex::new(Items::default()));
            if self.start != Level::Off {
                SWITCH.set_process_mode(self.start);
            }
            let spawned: Vec<_> = self
                .spawned
                .iter()
                .map(|acts| {
                    let (items, seen) = (std::sync::Arc::clone(&items), std::sync::Arc::clone(&seen));
                    loom::thread::spawn(move || {
                        let mut scopes = Vec::new();
                        for &act in acts.iter() {
                            self.act(act, &mut scopes, &items, &seen);
                        }
                    })
                })
                .collect();
            let mut scopes = Vec::new();
            for &act in self.main {
                self.act(act, &mut scopes, &items, &seen);
            }
            for thread in spawned {
                thread.join().unwrap();
            }
            self.after(&items, &seen);
        });
        note_word(explored);
        eprintln!(
            "{self:?}: {} executions in {:.2?}; {} records, {} kept at the end, {} forgotten; {} broke a property",
            explored.executions(),
            start.elapsed(),
            explored.records.load(Count),
            explored.records_kept_at_the_end.load(Count),
            explored.records_forgotten.load(Count),
            explored.violations(),
        );
        if let Some(property) = stop {
            explored.stop_if_broken(property);
        }
    }

    fn check(self) -> std::sync::Arc<Explored> {
        let explored = std::sync::Arc::new(Explored::default());
        self.explore(None, &explored);
        explored.assert_unbroken(&self);
        explored
    }

    fn must_break(self, property: usize) {
        let explored = std::sync::Arc::new(Explored::default());
        loom_support::must_break(&self, property, &explored, || self.explore(Some(property), &explored));
    }
}

/// A thread records twice while another turns the process mode off and on again: every
/// interleaving.
const TOGGLE: Scenario = Scenario {
    start: Level::Report,
    main: &[Act::Set(Level::Off), Act::Set(Level::Report)],
    spawned: &[&[Act::Record(1), Act::Record(2)]],
    bug: Bug::None,
    preemption_bound: None,
};

/// Two threads' scopes (report, refuse) under a process mode that is off, each recording in it,
/// while the main thread records without a scope: every interleaving.
const SCOPES_ONLY: Scenario = Scenario {
    start: Level::Off,
    main: &[Act::Record(3)],
    spawned: &[
        &[Act::Open(Level::Report), Act::Record(1), Act::Close],
        &[Act::Open(Level::Refuse), Act::Record(2), Act::Close],
    ],
    bug: Bug::None,
    preemption_bound: None,
};

/// A thread records in a scope of its own while another records without one and the main
/// thread turns the process mode off and on again: at most 3 preemptions.
const TOGETHER: Scenario = Scenario {
    start: Level::Report,
    main: &[Act::Set(Level::Off), Act::Set(Level::Report)],
    spawned: &[&[Act::Record(1)], &[Act::Open(Level::Report), Act::Record(2), Act::Close]],
    bug: Bug::None,
    preemption_bound: Some(3),
};

#[test]
fn a_record_made_while_the_mode_turns_off_and_on_is_kept_iff_of_the_current_period() {
    let explored = TOGGLE.check();
    assert!(explored.records_kept_at_the_end.load(Count) > 0 && explored.records_forgotten.load(Count) > 0);
}

#[test]
fn scopes_closing_on_two_threads_end_their_on_period_once() {
    let explored = SCOPES_ONLY.check();
    // Every scope is closed at the end: each record is of an earlier on-period.
    assert!(explored.records.load(Count) > 0 && explored.records_kept_at_the_end.load(Count) == 0);
}

#[test]
fn records_in_and_out_of_scopes_while_the_mode_turns_off_and_on() {
    let explored = TOGETHER.check();
    assert!(explored.records_kept_at_the_end.load(Count) > 0 && explored.records_forgotten.load(Count) > 0);
}

#[test]
fn a_period_read_before_the_mode_is_caught() {
    Scenario { bug: Bug::PeriodBeforeMode, ..TOGGLE }.must_break(1);
}

#[test]
fn a_word_changed_in_two_steps_is_caught() {
    Scenario { bug: Bug::TwoSteps, ..TOGGLE }.must_break(0);
    Scenario { bug: Bug::TwoSteps, ..TOGGLE }.must_break(2);
}

#[test]
fn a_hook_that_forgets_another_periods_history_is_caught() {
    Scenario { bug: Bug::ForgetWhatever, ..TOGGLE }.must_break(2);
}
