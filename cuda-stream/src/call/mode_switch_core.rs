//! The host-side core of the mode switch ([`mode_switch`](super::mode_switch), whose docs tell
//! what it is for, and which re-exports what the crate calls): the state word (the process mode,
//! the count of live scopes that are not off, the count of times it went off everywhere), the
//! thread's scopes, and the items kept for whoever asks.
//!
//! No CUDA, and no path of the crate but [`shim`](super::shim), where its atomics, lock,
//! thread-local keys and statics come from: the crate builds it with std's, and the loom model
//! `cuda-stream/tests/loom_mode_switch.rs` includes this same file (`#[path]`) beside a `shim` of
//! loom's. It checks that a mode switch never loses a record of an on-period, and never keeps one
//! of an earlier period, and that no reported item is lost.

use super::shim::{AtomicU64, AtomicUsize, LocalKey, Mutex, Ordering, PoisonError, const_in_the_crate, shared_statics};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::marker::PhantomData;

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
pub(crate) const SCOPE: u64 = 0b100;
/// The bits of the state that say whether the mode is on anywhere: the process mode and the
/// count of scopes. Above them, the number of times it went off everywhere.
const ON_BITS: u64 = (1 << 32) - 1;
/// One more time off everywhere, in the state (above [`ON_BITS`]).
pub(crate) const WENT_OFF: u64 = 1 << 32;

/// `state` after a change that left it `changed`: one more time off everywhere if that change
/// turned it off.
fn counting_off(state: u64, changed: u64) -> u64 {
    if state & ON_BITS != 0 && changed & ON_BITS == 0 { changed.wrapping_add(WENT_OFF) } else { changed }
}

/// `mode` in [`MODE_BITS`]: 0 off, 1 report, 2 refuse.
pub(crate) fn encode<M: Mode>(mode: M) -> u64 {
    if mode == M::REPORT {
        1
    } else if mode == M::REFUSE {
        2
    } else {
        0
    }
}

/// The mode in the [`MODE_BITS`] of `state`.
pub(crate) fn decode<M: Mode>(state: u64) -> M {
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
    const_in_the_crate! {
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
    }

    /// Whether any thread's mode may be on (the process mode, or a live scope that is not
    /// off). One relaxed load: the fast path of every call that asks.
    #[inline(always)]
    pub(crate) fn is_on_anywhere(&self) -> bool {
        self.state.load(Ordering::Relaxed) & ON_BITS != 0
    }

    /// The on-period now, if the mode may be on anywhere (see [`ModeSwitch::is_on_anywhere`]
    /// and [`ModeSwitch::on_period`]), from one load of the state: what is recorded for that
    /// period while it is on belongs to it, never to a later one.
    pub(crate) fn on_now(&self) -> Option<u64> {
        let state = self.state.load(Ordering::Acquire);
        (state & ON_BITS != 0).then_some(state >> 32)
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
        shared_statics! {
            /// Scope ids, unique in the process: a guard finds its own entry whatever was opened
            /// and closed around it.
            static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        }
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
