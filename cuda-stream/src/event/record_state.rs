//! Where an event's last record went (never recorded, outside any capture, into a capture),
//! kept so that no call hands CUDA an event whose last record is a captured one: CUDA answers
//! `cudaErrorCapturedEvent` and invalidates the capture, and a query racing the capture's end
//! crashed libcuda (CUDA 13.0).
//!
//! Records of one event may come from several threads at once, and which one CUDA takes last
//! cannot be read back. So the state is one word: the kind of the last record, how many records
//! that may go into a capture are in progress, and a generation that each of them bumps. A
//! record outside any capture notes itself only if no such record began or was in progress
//! since it read the word; otherwise the event stays marked captured (a refusal, never a
//! crash) until a later record settles it.
//!
//! Calls that hand CUDA the event as a marker of work (query, elapsed) are counted while they
//! are in CUDA ([`RecordState::marker_call`]); a record that may go into a capture marks the
//! event first, then waits for the counted calls: one of the two sees the other (SeqCst on
//! both sides).
//!
//! A wait in CUDA for the event (`cudaEventSynchronize`) is counted apart
//! ([`RecordState::wait_in_cuda`]): it may last as long as the work it waits for, which may
//! itself wait for the thread that records, so a record into a capture never waits for it. The
//! two form the same pair (the waiter counts itself, then reads the mark; a record marks, then
//! reads the count), and a record into a capture that sees a waiter is abandoned
//! ([`RecordState::abandon_capture_record`]) and refused.
//!
//! The word, the turn and the counts are written in
//! [`record_state_core`](super::record_state_core), with no CUDA, so that the loom model
//! (`cuda-stream/tests/loom_record_state.rs`, and `loom_reactor.rs` against the reactor's passes)
//! checks that same source; this module re-exports them.

pub(crate) use super::record_state_core::{CAPTURED_EVENT, RecordState, WAITED_EVENT};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::error::Error;
    use std::sync::atomic::Ordering;

    fn captured(state: &RecordState) -> bool {
        state.refuse_captured().is_err()
    }

    #[test]
    fn records_outside_and_inside_captures_set_the_kind() {
        let state = RecordState::never_recorded();
        assert!(state.is_never_recorded() && !captured(&state));
        let ticket = state.before_record();
        state.note_uncaptured_record(ticket);
        assert!(!state.is_never_recorded() && !captured(&state));
        let opened = state.open_capture_record();
        assert!(captured(&state), "marked before the record");
        state.close_capture_record(opened, true);
        assert!(captured(&state), "it went into the capture");
        let ticket = state.before_record();
        state.note_uncaptured_record(ticket);
        assert!(!captured(&state), "recorded outside again, a marker again");
        let opened = state.open_capture_record();
        state.close_capture_record(opened, false);
        assert!(!captured(&state), "a record that turned out not to be captured");
    }

    #[test]
    fn a_record_outside_never_hides_a_record_into_a_capture_made_meanwhile() {
        // The outside record read the word, then a record that may go into a capture began:
        // which one CUDA took last is unknown, so the event stays captured.
        let state = RecordState::never_recorded();
        let ticket = state.before_record();
        let opened = state.open_capture_record();
        state.note_uncaptured_record(ticket);
        assert!(captured(&state), "in progress: the outside record does not clear the mark");
        state.close_capture_record(opened, true);
        assert!(captured(&state));
        // Even when that record has ended before the outside one notes itself.
        let state = RecordState::recorded();
        let ticket = state.before_record();
        let opened = state.open_capture_record();
        state.close_capture_record(opened, true);
        state.note_uncaptured_record(ticket);
        assert!(captured(&state), "begun after the ticket: the captured record may be the last");
    }

    #[test]
    fn overlapping_records_into_captures_clear_the_mark_only_when_alone() {
        let state = RecordState::recorded();
        let first = state.open_capture_record();
        let second = state.open_capture_record();
        state.close_capture_record(first, false);
        assert!(captured(&state), "the second is still in progress");
        state.close_capture_record(second, false);
        assert!(!captured(&state), "neither went into a capture");
        // One of two overlapping records went into a capture: it may be the last.
        let first = state.open_capture_record();
        let second = state.open_capture_record();
        state.close_capture_record(first, true);
        state.close_capture_record(second, false);
        assert!(captured(&state), "the captured one may have been made after the other");
        let first = state.open_capture_record();
        let second = state.open_capture_record();
        state.close_capture_record(second, false);
        state.close_capture_record(first, false);
        assert!(captured(&state), "the first ended last, but the second began after it");
        let alone = state.open_capture_record();
        state.close_capture_record(alone, false);
        assert!(!captured(&state), "a record alone, not captured, clears the mark");
    }

    #[test]
    fn a_captured_record_and_external_records() {
        let state = RecordState::never_recorded();
        state.note_external_record();
        assert!(!state.is_never_recorded() && !captured(&state), "counts as recorded (for elapsed)");
        let opened = state.open_capture_record();
        state.close_capture_record(opened, true);
        assert!(captured(&state));
        state.note_external_record();
        assert!(captured(&state), "an external record node changes nothing else");
        let ticket = state.before_record();
        state.note_uncaptured_record(ticket);
        assert!(!captured(&state));
    }

    /// Threads recording one event every way at once, each record's effect standing in for
    /// CUDA's (an atomic store of whether it went into a capture, at the moment it is made):
    /// whenever the threads are quiet, an event whose last record was captured is refused (the
    /// converse is not promised: an unknown order counts as captured); and no marker call is in
    /// CUDA while a record marked ahead goes into a capture.
    #[test]
    fn racing_records_never_leave_a_captured_last_record_unmarked() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let state = RecordState::recorded();
        let last_captured = AtomicBool::new(false);
        // Stand-ins for CUDA records into a capture being made, and marker calls that were in
        // CUDA at the same time (the marks must keep them apart).
        let (capturing, overlaps) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let quiet = std::sync::Barrier::new(4);
        // Quiet rounds in which the state was right.
        let rounds = AtomicUsize::new(0);
        // Miri (`./dev test`) interprets every step: a few rounds keep it to seconds.
        let quiet_rounds = if cfg!(miri) { 20 } else { 10_000 };
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (state, last_captured, quiet, rounds) = (&state, &last_captured, &quiet, &rounds);
                let (capturing, overlaps) = (&capturing, &overlaps);
                scope.spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(thread + 1);
                    for _ in 0..quiet_rounds {
                        for _ in 0..32 {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            match seed % 4 {
                                0 => {
                                    let ticket = state.before_record();
                                    last_captured.store(false, Ordering::SeqCst);
                                    state.note_uncaptured_record(ticket);
                                }
                                1 => {
                                    let opened = state.open_capture_record();
                                    let captured = seed & 16 != 0;
                                    if captured {
                                        capturing.fetch_add(1, Ordering::SeqCst);
                                    }
                                    last_captured.store(captured, Ordering::SeqCst);
                                    if captured {
                                        capturing.fetch_sub(1, Ordering::SeqCst);
                                    }
                                    state.close_capture_record(opened, captured);
                                }
                                2 => {
                                    // A record whose check saw no capture, caught by one that
                                    // began meanwhile: noted, then marked after it.
                                    let ticket = state.before_record();
                                    last_captured.store(true, Ordering::SeqCst);
                                    state.note_uncaptured_record(ticket);
                                    let opened = state.open_capture_record();
                                    state.close_capture_record(opened, true);
                                }
                                _ => {
                                    if let Ok(_in_cuda) = state.marker_call() {
                                        if capturing.load(Ordering::SeqCst) != 0 {
                                            overlaps.fetch_add(1, Ordering::Relaxed);
                                        }
                                    }
                                }
                            }
                        }
                        quiet.wait();
                        // Counted, not asserted here: a panic would leave the others at the
                        // barrier.
                        let right = captured(state) || !last_captured.load(Ordering::SeqCst);
                        if thread == 0 && right {
                            rounds.fetch_add(1, Ordering::Relaxed);
                        }
                        quiet.wait();
                    }
                });
            }
        });
        assert_eq!(overlaps.load(Ordering::Relaxed), 0, "a marker call was in CUDA during a captured record");
        assert_eq!(
            rounds.load(Ordering::Relaxed),
            quiet_rounds,
            "in some quiet rounds the last record went into a capture, and the event was not refused"
        );
    }

    #[test]
    fn a_wait_in_cuda_and_a_record_into_a_capture_exclude_each_other() {
        // The wait first: the record sees it, is abandoned, and leaves the event as it was.
        for state in [RecordState::recorded(), RecordState::never_recorded()] {
            let never = state.is_never_recorded();
            let waiting = state.wait_in_cuda().expect("a marker, not a captured record");
            let opened = state.open_capture_record();
            assert!(state.is_waited_for());
            state.abandon_capture_record(opened);
            assert!(!captured(&state) && state.is_never_recorded() == never, "as the last record left it");
            drop(waiting);
            assert!(!state.is_waited_for());
        }
        // The mark first: the wait stays out of CUDA.
        let state = RecordState::recorded();
        let opened = state.open_capture_record();
        assert!(state.wait_in_cuda().is_none(), "marked: the wait polls instead");
        assert!(!state.is_waited_for(), "a wait refused is not counted");
        state.close_capture_record(opened, true);
        assert!(state.wait_in_cuda().is_none(), "captured");
        // An abandoned record overlapping one that went into a capture leaves the mark.
        let state = RecordState::recorded();
        let (first, second) = (state.open_capture_record(), state.open_capture_record());
        state.close_capture_record(second, true);
        state.abandon_capture_record(first);
        assert!(captured(&state));
    }

    /// Threads waiting for one event in CUDA while others record it into captures, each side's
    /// effect standing in for CUDA's: no captured record is made while a wait is in CUDA.
    #[test]
    fn waits_in_cuda_never_overlap_a_captured_record() {
        use std::sync::atomic::AtomicUsize;
        let state = RecordState::recorded();
        let (waiting, capturing, overlaps) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        let (made, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
        // Miri (`./dev test`) interprets every step: a few hundred rounds keep it to seconds.
        let rounds = if cfg!(miri) { 200 } else { 20_000 };
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (state, waiting, capturing, overlaps) = (&state, &waiting, &capturing, &overlaps);
                let (made, refused) = (&made, &refused);
                scope.spawn(move || {
                    for round in 0..rounds {
                        if thread % 2 == 0 {
                            if let Some(_in_cuda) = state.wait_in_cuda() {
                                waiting.fetch_add(1, Ordering::SeqCst);
                                if capturing.load(Ordering::SeqCst) != 0 {
                                    overlaps.fetch_add(1, Ordering::Relaxed);
                                }
                                waiting.fetch_sub(1, Ordering::SeqCst);
                            }
                        } else {
                            let opened = state.open_capture_record();
                            if state.is_waited_for() {
                                state.abandon_capture_record(opened);
                                refused.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            capturing.fetch_add(1, Ordering::SeqCst);
                            if waiting.load(Ordering::SeqCst) != 0 {
                                overlaps.fetch_add(1, Ordering::Relaxed);
                            }
                            capturing.fetch_sub(1, Ordering::SeqCst);
                            state.close_capture_record(opened, round % 2 == 0);
                            made.fetch_add(1, Ordering::Relaxed);
                            // Recorded outside again, so that waits can reach CUDA.
                            let ticket = state.before_record();
                            state.note_uncaptured_record(ticket);
                        }
                    }
                });
            }
        });
        assert_eq!(overlaps.load(Ordering::Relaxed), 0, "a wait was in CUDA during a captured record");
        let (made, refused) = (made.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
        assert_eq!(made + refused, 2 * rounds);
        println!("{made} records made, {refused} refused beside a wait");
    }

    #[test]
    fn marker_calls_are_refused_on_a_captured_event_and_waited_for_by_a_mark() {
        let state = RecordState::recorded();
        let call = state.marker_call().expect("a recorded event");
        std::thread::scope(|scope| {
            let marking = scope.spawn(|| state.open_capture_record());
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!marking.is_finished(), "the mark waits for the call in CUDA");
            drop(call);
            let opened = marking.join().unwrap();
            assert!(matches!(state.marker_call(), Err(Error::CaptureMisuse(_))));
            state.close_capture_record(opened, false);
        });
        assert!(state.marker_call().is_ok());
    }
}
