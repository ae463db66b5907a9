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
//!
//! The switch's host-side core is [`mode_switch_core`](super::mode_switch_core), over the std
//! primitives of [`shim`](super::shim), which a loom model checks from the same source.

pub(crate) use super::mode_switch_core::{Mode, ModeScope, ModeSwitch, ThreadScopes};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::mode_switch_core::{SCOPE, WENT_OFF, decode, encode};
    use std::cell::{Cell, RefCell};
    use std::sync::atomic::{AtomicUsize, Ordering};

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
