//! A mode switch of three levels (off, report, refuse), chosen process-wide and per thread
//! for a scope, with the items each level reports kept for whoever asks: the machinery that
//! the sync-debug mode ([`sync_debug`](super::sync_debug)) and the race detector
//! ([`race`](super::race)) share.
//!
//! One atomic word holds the process mode and counts the live scopes whose mode is not off:
//! while it is zero, the mode is off on every thread, and asking costs one relaxed load
//! ([`ModeSwitch::is_on_anywhere`]). Otherwise the calling thread's innermost scope decides,
//! and without one the process mode. Thread-local statics cannot be generic: each user
//! declares its own two (the thread's open scopes, and its reporting-only flag) and hands
//! them to its [`ModeSwitch`]. Every access to them tolerates the thread's teardown, when its
//! locals are gone: it never panics.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread::LocalKey;

/// A mode of three levels, as a [`ModeSwitch`] keeps it.
pub(crate) trait Mode: Copy + PartialEq + 'static {
    /// Nothing is done, nothing is kept.
    const OFF: Self;
    /// The call goes on; what it finds is reported and kept.
    const REPORT: Self;
    /// The call is refused (inside [`ModeSwitch::reporting_only`], it reports instead).
    const REFUSE: Self;
}

/// The bits of [`ModeSwitch`]'s state that hold the process mode.
const MODE_BITS: u64 = 0b11;
/// One live scope whose mode is not off, in [`ModeSwitch`]'s state (above [`MODE_BITS`]).
const SCOPE: u64 = 0b100;
/// The bits of the state that say whether the mode is on anywhere: the process mode and the
/// count of scopes. Above them, the number of times it went off everywhere.
const ON_BITS: u64 = (1 << 32) - 1;
/// One more time off everywhere, in the state (above [`ON_BITS`]).
const WENT_OFF: u64 = 1 << 32;

/// `state` after a change that left it `changed`: one more time off everywhere if that change
/// turned it off.
fn counting_off(state: u64, changed: u64) -> u64 {
    if state & ON_BITS != 0 && changed & ON_BITS == 0 { changed.wrapping_add(WENT_OFF) } else { changed }
}

/// `mode` in [`MODE_BITS`]: 0 off, 1 report, 2 refuse.
fn encode<M: Mode>(mode: M) -> u64 {
    if mode == M::REPORT {
        1
    } else if mode == M::REFUSE {
        2
    } else {
        0
    }
}

/// The mode in the [`MODE_BITS`] of `state`.
fn decode<M: Mode>(state: u64) -> M {
    match state & MODE_BITS {
        1 => M::REPORT,
        2 => M::REFUSE,
        _ => M::OFF,
    }
}

/// One open scope of a thread: its mode and the items reported under it.
pub(crate) struct OpenScope<M, T> {
    /// Which guard it belongs to ([`ModeScope`]'s id).
    id: u64,
    /// The mode the scope's thread follows while it is the innermost one.
    mode: M,
    /// The items reported under it, not yet taken.
    kept: Vec<T>,
}

/// A thread's open scopes of one [`ModeSwitch`], innermost last: the type of the thread-local
/// that its user declares.
pub(crate) type ThreadScopes<M, T> = RefCell<Vec<OpenScope<M, T>>>;

/// A mode of three levels, process-wide and per thread for a scope, and the items reported
/// under it (see the [module docs](self)). Lives in a `static`: [`ModeSwitch::new`] is const.
pub(crate) struct ModeSwitch<M: Mode, T: 'static> {
    /// Bits 0-1: the process mode ([`MODE_BITS`]); bits 2-31 count the live scopes whose mode
    /// is not off, in steps of [`SCOPE`] (all zero: off everywhere); bits 32-63 count the times
    /// it went off everywhere ([`ModeSwitch::on_period`]), changed in the same atomic step.
    state: AtomicU64,
    /// Each thread's open scopes.
    scopes: &'static LocalKey<ThreadScopes<M, T>>,
    /// Whether the thread runs inside [`ModeSwitch::reporting_only`]. A thread-local of its
    /// own without a destructor, so that it still answers while the thread's scopes are torn
    /// down.
    reporting_only: &'static LocalKey<Cell<bool>>,
    /// The items reported without a scope, at most [`ModeSwitch::keep_at_most`].
    process_kept: Mutex<Vec<T>>,
    /// How many items one list keeps (the process's, and each scope's).
    keep_at_most: usize,
    /// How many reported items were not kept: their list was full.
    dropped: AtomicUsize,
    /// Runs after the process mode is set or a counted scope closes, when the mode is then
    /// off everywhere.
    when_off_everywhere: Option<fn()>,
}

impl<M: Mode, T: 'static> ModeSwitch<M, T> {
    /// A switch off everywhere that keeps each thread's scopes in `scopes` and its
    /// reporting-only flag in `reporting_only` (thread-locals that nothing else uses), keeps
    /// at most `keep_at_most` items in a list, and runs `when_off_everywhere` each time a
    /// change leaves it off everywhere.
    pub(crate) const fn new(
        scopes: &'static LocalKey<ThreadScopes<M, T>>,
        reporting_only: &'static LocalKey<Cell<bool>>,
        keep_at_most: usize,
        when_off_everywhere: Option<fn()>,
    ) -> Self {
        ModeSwitch {
            state: AtomicU64::new(0),
            scopes,
            reporting_only,
            process_kept: Mutex::new(Vec::new()),
            keep_at_most,
            dropped: AtomicUsize::new(0),
            when_off_everywhere,
        }
    }

    /// Whether any thread's mode may be on (the process mode, or a live scope that is not
    /// off). One relaxed load: the fast path of every call that asks.
    #[inline(always)]
    pub(crate) fn is_on_anywhere(&self) -> bool {
        self.state.load(Ordering::Relaxed) & ON_BITS != 0
    }

    /// How many times the mode went off everywhere so far: what was observed while it was on
    /// belongs to one value of it (a history kept across a time off would miss what happened
    /// meanwhile). Read with the state's other bits in one load.
    pub(crate) fn on_period(&self) -> u64 {
        self.state.load(Ordering::Acquire) >> 32
    }

    /// Sets the process mode, for every thread without a scope of its own; returns the
    /// previous one.
    pub(crate) fn set_process_mode(&self, mode: M) -> M {
        let previous = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                Some(counting_off(state, (state & !MODE_BITS) | encode(mode)))
            })
            .unwrap_or_else(|state| state);
        self.after_change();
        decode(previous)
    }

    /// The process mode.
    pub(crate) fn process_mode(&self) -> M {
        decode(self.state.load(Ordering::Acquire))
    }

    /// The calling thread's mode: its innermost scope's (also an off one under a process
    /// mode that is on), else the process mode; inside [`ModeSwitch::reporting_only`],
    /// refuse reports.
    pub(crate) fn this_threads_mode(&self) -> M {
        let scoped = self.scopes.try_with(|scopes| scopes.borrow().last().map(|scope| scope.mode)).ok().flatten();
        let mode = scoped.unwrap_or_else(|| decode(self.state.load(Ordering::Acquire)));
        if mode == M::REFUSE && self.reporting_only.try_with(Cell::get).unwrap_or(false) { M::REPORT } else { mode }
    }

    /// Runs `run` (a destructor, which cannot fail) with refuse turned into report on this
    /// thread.
    pub(crate) fn reporting_only<R>(&self, run: impl FnOnce() -> R) -> R {
        if !self.is_on_anywhere() {
            return run();
        }
        /// Puts the thread's flag back as it was, also when `run` unwinds.
        struct Restore(&'static LocalKey<Cell<bool>>, bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = self.0.try_with(|flag| flag.set(self.1));
            }
        }
        let _restore =
            Restore(self.reporting_only, self.reporting_only.try_with(|flag| flag.replace(true)).unwrap_or(false));
        run()
    }

    /// Keeps `items`, reported on this thread: in its innermost scope, or without one in the
    /// process's list; those past a full list are counted in [`ModeSwitch::dropped`].
    pub(crate) fn keep(&self, items: impl IntoIterator<Item = T>) {
        let mut items = items.into_iter();
        let kept_in_a_scope = self.scopes.try_with(|scopes| {
            let mut scopes = scopes.borrow_mut();
            let innermost = scopes.last_mut()?;
            self.keep_in(&mut innermost.kept, &mut items);
            Some(())
        });
        if kept_in_a_scope.ok().flatten().is_none() {
            self.keep_in(&mut self.process_kept.lock().unwrap_or_else(PoisonError::into_inner), &mut items);
        }
    }

    /// Moves `items` into `list` up to [`ModeSwitch::keep_at_most`], and counts the rest.
    fn keep_in(&self, list: &mut Vec<T>, items: &mut impl Iterator<Item = T>) {
        list.extend(items.by_ref().take(self.keep_at_most.saturating_sub(list.len())));
        self.dropped.fetch_add(items.count(), Ordering::Relaxed);
    }

    /// Takes the items reported without a scope so far.
    pub(crate) fn take_process_kept(&self) -> Vec<T> {
        std::mem::take(&mut *self.process_kept.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// How many reported items were not kept (beyond `keep_at_most` in one list).
    pub(crate) fn dropped(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Opens a scope with `mode` on this thread: until the returned guard drops, the thread
    /// follows `mode`, and the items it reports are kept in the scope. Only a scope that is
    /// not off is counted in the state, so an off one alone keeps every call on the fast
    /// path. Opened while the thread's locals are torn down, the scope is inert: the thread
    /// follows the process mode.
    pub(crate) fn open_scope(&'static self, mode: M) -> ModeScope<M, T> {
        /// Scope ids, unique in the process: a guard finds its own entry whatever was opened
        /// and closed around it.
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let opened = self.scopes.try_with(|scopes| scopes.borrow_mut().push(OpenScope { id, mode, kept: Vec::new() }));
        let counted = opened.is_ok() && mode != M::OFF;
        if counted {
            self.state.fetch_add(SCOPE, Ordering::AcqRel);
        }
        ModeScope { switch: self, id, counted, not_send: PhantomData }
    }

    /// Runs [`ModeSwitch::when_off_everywhere`] if the mode is now off everywhere.
    fn after_change(&self) {
        if let Some(when_off_everywhere) = self.when_off_everywhere {
            if !self.is_on_anywhere() {
                when_off_everywhere();
            }
        }
    }
}

/// A scope of this thread ([`ModeSwitch::open_scope`]): the thread's previous mode comes back
/// when it drops, and the scopes opened inside it and leaked close with it (leaked, they stay
/// counted). Not `Send`: it belongs to its thread.
#[must_use = "the scope ends when this guard drops"]
pub(crate) struct ModeScope<M: Mode, T: 'static> {
    /// The switch it belongs to.
    switch: &'static ModeSwitch<M, T>,
    /// Its entry's id in the thread's open scopes (none there when it could not be opened, the
    /// thread's locals torn down, or when a scope opened before it has closed it).
    id: u64,
    /// Whether it counts in the switch's state (its mode is not off).
    counted: bool,
    /// Ties the guard to its thread.
    not_send: PhantomData<*const ()>,
}

impl<M: Mode, T: 'static> ModeScope<M, T> {
    /// Takes the items reported in this scope so far.
    pub(crate) fn take_kept(&self) -> Vec<T> {
        let take = |scopes: &ThreadScopes<M, T>| {
            let mut scopes = scopes.borrow_mut();
            scopes.iter_mut().find(|scope| scope.id == self.id).map(|scope| std::mem::take(&mut scope.kept))
        };
        self.switch.scopes.try_with(take).ok().flatten().unwrap_or_default()
    }
}

impl<M: Mode, T: 'static> fmt::Debug for ModeScope<M, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModeScope").field("id", &self.id).field("counted", &self.counted).finish()
    }
}

impl<M: Mode, T: 'static> Drop for ModeScope<M, T> {
    fn drop(&mut self) {
        // Its entry and those of the scopes opened after it (leaked ones) close; none of a
        // scope opened after this one was closed by an outer scope.
        let _ = self.switch.scopes.try_with(|scopes| {
            let mut scopes = scopes.borrow_mut();
            if let Some(at) = scopes.iter().position(|scope| scope.id == self.id) {
                scopes.truncate(at);
            }
        });
        if self.counted {
            let _ = self
                .switch
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| Some(counting_off(state, state - SCOPE)));
            self.switch.after_change();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mode for the tests.
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

    /// A switch of its own for one test (tests run in parallel, and count scopes), keeping
    /// two items a list, and running the `fn()` given (if any) when it is off everywhere.
    macro_rules! own_switch {
        () => {
            own_switch!(None)
        };
        ($when_off_everywhere:expr) => {{
            thread_local! {
                static SCOPES: ThreadScopes<Level, u32> = const { RefCell::new(Vec::new()) };
                static REPORTING_ONLY: Cell<bool> = const { Cell::new(false) };
            }
            static SWITCH: ModeSwitch<Level, u32> = ModeSwitch::new(&SCOPES, &REPORTING_ONLY, 2, $when_off_everywhere);
            &SWITCH
        }};
    }

    #[test]
    fn modes_encode_in_two_bits() {
        for mode in [Level::Off, Level::Report, Level::Refuse] {
            assert_eq!(decode::<Level>(encode(mode) | (7 * SCOPE) | (3 * WENT_OFF)), mode);
        }
    }

    #[test]
    fn only_scopes_that_are_not_off_turn_the_switch_on() {
        let switch = own_switch!();
        assert!(!switch.is_on_anywhere());
        let off = switch.open_scope(Level::Off);
        assert!(!switch.is_on_anywhere(), "an off scope alone keeps the fast path");
        let report = switch.open_scope(Level::Report);
        assert!(switch.is_on_anywhere());
        drop(report);
        assert!(!switch.is_on_anywhere());
        drop(off);
        assert_eq!(switch.process_mode(), Level::Off);
    }

    #[test]
    fn closing_the_last_counted_scope_runs_the_hook() {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let switch = own_switch!(Some(|| {
            RUNS.fetch_add(1, Ordering::Relaxed);
        }));
        drop(switch.open_scope(Level::Off));
        assert_eq!(RUNS.load(Ordering::Relaxed), 0, "an off scope is not counted");
        let outer = switch.open_scope(Level::Report);
        drop(switch.open_scope(Level::Refuse));
        assert_eq!(RUNS.load(Ordering::Relaxed), 0, "still on");
        drop(outer);
        assert_eq!(RUNS.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn the_innermost_scope_decides_and_keeps() {
        let switch = own_switch!();
        let outer = switch.open_scope(Level::Report);
        switch.keep([1]);
        {
            let inner = switch.open_scope(Level::Refuse);
            assert_eq!(switch.this_threads_mode(), Level::Refuse);
            switch.keep([2]);
            assert_eq!(inner.take_kept(), [2]);
            {
                let _off = switch.open_scope(Level::Off);
                assert_eq!(switch.this_threads_mode(), Level::Off, "also an off scope decides");
            }
            assert_eq!(switch.this_threads_mode(), Level::Refuse);
        }
        assert_eq!(switch.this_threads_mode(), Level::Report);
        switch.keep([3]);
        assert_eq!(outer.take_kept(), [1, 3]);
        assert!(outer.take_kept().is_empty(), "taken");
    }

    #[test]
    fn a_leaked_inner_scope_closes_with_the_outer_one_and_stays_counted() {
        let switch = own_switch!();
        let outer = switch.open_scope(Level::Report);
        std::mem::forget(switch.open_scope(Level::Refuse));
        assert_eq!(switch.this_threads_mode(), Level::Refuse);
        drop(outer);
        assert_eq!(switch.this_threads_mode(), Level::Off, "no scope left: the process mode");
        assert!(switch.is_on_anywhere(), "the leaked scope is still counted");
        switch.keep([1]);
        assert_eq!(switch.take_process_kept(), [1], "kept without a scope");
    }

    #[test]
    fn a_scope_dropped_out_of_order_never_closes_one_opened_after_it() {
        let switch = own_switch!();
        let (first, second) = (switch.open_scope(Level::Report), switch.open_scope(Level::Refuse));
        // The first closes the second with it (as if leaked), ...
        drop(first);
        assert_eq!(switch.this_threads_mode(), Level::Off);
        let (third, fourth) = (switch.open_scope(Level::Report), switch.open_scope(Level::Refuse));
        // ... so the second's drop finds no entry of its own, and leaves the fourth open.
        drop(second);
        assert_eq!(switch.this_threads_mode(), Level::Refuse, "the fourth still decides");
        switch.keep([4]);
        assert_eq!(fourth.take_kept(), [4]);
        drop(fourth);
        assert_eq!(switch.this_threads_mode(), Level::Report, "the third decides");
        drop(third);
        assert!(!switch.is_on_anywhere(), "every counted scope uncounted once");
    }

    #[test]
    fn each_time_off_everywhere_starts_a_new_on_period_in_the_same_atomic_step() {
        let switch = own_switch!();
        let start = switch.on_period();
        let outer = switch.open_scope(Level::Report);
        let inner = switch.open_scope(Level::Refuse);
        let _off = switch.open_scope(Level::Off);
        drop(inner);
        assert_eq!(switch.on_period(), start, "still on: the outer scope");
        drop(outer);
        assert_eq!(switch.on_period(), start + 1, "off everywhere once");
        assert!(!switch.is_on_anywhere(), "the period's bits are not the on bits");
        assert_eq!(switch.set_process_mode(Level::Report), Level::Off);
        assert_eq!(switch.on_period(), start + 1, "turning on starts nothing");
        assert_eq!(switch.set_process_mode(Level::Report), Level::Report);
        assert_eq!(switch.set_process_mode(Level::Off), Level::Report);
        assert_eq!(switch.on_period(), start + 2, "off everywhere again");
        switch.set_process_mode(Level::Off);
        assert_eq!(switch.on_period(), start + 2, "off to off is no new period");
    }

    #[test]
    fn reporting_only_turns_refuse_into_report() {
        let switch = own_switch!();
        let _refuse = switch.open_scope(Level::Refuse);
        assert_eq!(switch.reporting_only(|| switch.this_threads_mode()), Level::Report);
        assert_eq!(switch.this_threads_mode(), Level::Refuse, "restored");
        let unwound = std::panic::catch_unwind(|| switch.reporting_only(|| panic!("in a drop")));
        assert!(unwound.is_err());
        assert_eq!(switch.this_threads_mode(), Level::Refuse, "restored when it unwinds");
    }

    #[test]
    fn items_past_the_cap_are_counted() {
        let switch = own_switch!();
        let scope = switch.open_scope(Level::Report);
        switch.keep([1, 2, 3]);
        switch.keep([4]);
        assert_eq!(scope.take_kept(), [1, 2]);
        assert_eq!(switch.dropped(), 2);
        switch.keep([5]);
        assert_eq!(scope.take_kept(), [5], "room again once taken");
    }

    #[test]
    fn another_thread_does_not_see_this_threads_scope() {
        let switch = own_switch!();
        let _scope = switch.open_scope(Level::Refuse);
        std::thread::scope(|threads| {
            threads
                .spawn(|| {
                    assert!(switch.is_on_anywhere(), "counted for every thread");
                    assert_eq!(switch.this_threads_mode(), Level::Off, "but decides only on its own");
                    switch.keep([1]);
                })
                .join()
                .unwrap()
        });
        assert_eq!(switch.take_process_kept(), [1], "the other thread's item has no scope");
    }
}
