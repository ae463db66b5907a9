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

use crate::ffi::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The error of a record into a capture of an event that another thread waits for in CUDA.
pub(crate) const WAITED_EVENT: &str = "the event is being waited for (Event::synchronize on another thread): \
                                       recorded into a capture now, CUDA would see a captured event \
                                       synchronized; record it once the wait has returned";

/// The error of a call on an event whose last record went into a capture.
pub(crate) const CAPTURED_EVENT: &str = "the event was last recorded inside a stream capture: it is a node of the \
                                         capture's graph, not a marker of work, until it is recorded outside a \
                                         capture again (CUDA would invalidate the capture)";

/// The kind of the last record, in the word's low bits.
const KIND: u64 = 0b11;
/// Never recorded through this crate.
const NEVER_RECORDED: u64 = 0;
/// Last recorded outside any capture: a marker of work, to query, synchronize and time.
const RECORDED: u64 = 1;
/// Last recorded while its stream was (or may have been) capturing: a node of the capture's
/// graph, not a marker. Refused until the event is recorded outside a capture again.
const CAPTURED: u64 = 2;
/// Set when one of the records in progress went into a capture: the last of them to end
/// leaves the event captured.
const STICKY: u64 = 1 << 2;
/// One record that may go into a capture, in progress (bits 3..23).
const OPEN: u64 = 1 << 3;
const OPEN_MASK: u64 = ((1 << 20) - 1) << 3;
/// One record that may go into a capture, begun (bits 23..64).
const GENERATION: u64 = 1 << 23;
/// Everything but the generation.
const LOW: u64 = GENERATION - 1;

/// What a record outside any capture read before it was made ([`RecordState::before_record`]).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Ticket(u64);

/// A record that may go into a capture, marked ([`RecordState::open_capture_record`]); closed
/// or abandoned once, by value.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The word the mark left.
    marked: u64,
    /// The kind of the last record before the mark.
    before: u64,
}

/// A call of [`RecordState::marker_call`] in CUDA; uncounted on drop.
pub(crate) struct InFlight<'a>(&'a AtomicU32);

impl Drop for InFlight<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A wait of [`RecordState::wait_in_cuda`] in CUDA; uncounted on drop.
pub(crate) struct Waiting<'a>(&'a AtomicU32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A turn of [`RecordState::take_turn`]; the next record's on drop.
pub(crate) struct Turn<'a>(&'a AtomicBool);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The record bookkeeping of one event.
#[derive(Debug)]
pub(crate) struct RecordState {
    word: AtomicU64,
    /// Marker calls in CUDA.
    in_flight: AtomicU32,
    /// Waits in CUDA ([`RecordState::wait_in_cuda`]).
    waiters: AtomicU32,
    /// Held by a record that may go into a capture ([`RecordState::take_turn`]): two such
    /// records of one event never overlap in CUDA (a real record of an event overlapping a
    /// captured one of it crashed libcuda, CUDA 13.0).
    recording: AtomicBool,
}

impl RecordState {
    /// Never recorded.
    pub(crate) const fn never_recorded() -> RecordState {
        RecordState {
            word: AtomicU64::new(NEVER_RECORDED),
            in_flight: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            recording: AtomicBool::new(false),
        }
    }

    /// Recorded outside any capture (an event opened from another process).
    pub(crate) const fn recorded() -> RecordState {
        RecordState {
            word: AtomicU64::new(RECORDED),
            in_flight: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            recording: AtomicBool::new(false),
        }
    }

    /// Whether the event was never recorded through this crate.
    pub(crate) fn is_never_recorded(&self) -> bool {
        self.word.load(Ordering::Acquire) & KIND == NEVER_RECORDED
    }

    /// [`Error::CaptureMisuse`] for an event whose last record went (or may have gone) into a
    /// capture.
    #[inline(always)]
    pub(crate) fn refuse_captured(&self) -> Result<()> {
        self.refuse_captured_as(Ordering::Acquire)
    }

    /// Whether the event's last record went (or may have gone) into a capture: one load.
    #[inline(always)]
    pub(crate) fn is_captured(&self) -> bool {
        self.word.load(Ordering::Acquire) & KIND == CAPTURED
    }

    #[inline(always)]
    fn refuse_captured_as(&self, order: Ordering) -> Result<()> {
        if self.word.load(order) & KIND == CAPTURED { Err(Error::CaptureMisuse(CAPTURED_EVENT)) } else { Ok(()) }
    }

    /// Read before a record that cannot go into a capture (no capture may be in progress, or
    /// the stream is not capturing): one load.
    #[inline(always)]
    pub(crate) fn before_record(&self) -> Ticket {
        Ticket(self.word.load(Ordering::Acquire))
    }

    /// Notes a record made outside any capture, unless a record that may go into a capture
    /// began or was in progress since `ticket` was read: then which record is last is unknown,
    /// and the event stays as that record leaves it.
    #[inline(always)]
    pub(crate) fn note_uncaptured_record(&self, ticket: Ticket) {
        let Ticket(mut seen) = ticket;
        if seen & (KIND | OPEN_MASK) == RECORDED {
            // Already a marker, and no record into a capture in progress: nothing to note (a
            // record into a capture that begins later marks the event itself). The common
            // case, one load.
            return;
        }
        let generation = seen & !LOW;
        loop {
            if seen & OPEN_MASK != 0 || seen & !LOW != generation {
                return;
            }
            match self.word.compare_exchange_weak(seen, generation | RECORDED, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => return,
                Err(current) => seen = current,
            }
        }
    }

    /// Marks the event captured before a record that may go into a capture, and waits for what
    /// read it before the mark: the marker calls in CUDA, and the reactor's pass in progress
    /// (later passes see the mark and never query the event).
    /// [`RecordState::close_capture_record`] takes the returned mark back after the record.
    pub(crate) fn open_capture_record(&self) -> Opened {
        let mut marked = 0;
        let previous = self.word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
            debug_assert!(word & OPEN_MASK != OPEN_MASK, "2^20 records of one event in progress");
            marked = (word.wrapping_add(GENERATION) + OPEN) & !KIND | CAPTURED;
            Some(marked)
        });
        self.wait_for_marker_calls();
        crate::call::reactor_passes::wait_for_pass();
        Opened { marked, before: previous.unwrap_or_else(|word| word) & KIND }
    }

    /// Whether a wait for the event is in CUDA ([`RecordState::wait_in_cuda`]), read after
    /// [`RecordState::open_capture_record`] marked it: a wait counted later sees the mark and
    /// stays out of CUDA.
    pub(crate) fn is_waited_for(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) != 0
    }

    /// Counts a wait for the event in CUDA, unless its last record is (or may be) a captured
    /// one: `None` then. Counted, then checked (SeqCst): a record into a capture either is
    /// seen here or sees the count ([`RecordState::is_waited_for`]) and is not made.
    pub(crate) fn wait_in_cuda(&self) -> Option<Waiting<'_>> {
        // Checked first too, as `marker_call` does: a wait that is refused anyway is not
        // counted, so a record into a capture never sees it.
        if self.is_captured() {
            return None;
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let waiting = Waiting(&self.waiters);
        (self.word.load(Ordering::SeqCst) & KIND != CAPTURED).then_some(waiting)
    }

    /// Takes back the mark of a record that [`RecordState::open_capture_record`] opened and that
    /// was not made: the event is left as its last record made it, unless another record that
    /// may go into a capture began since, is still in progress, or went into a capture
    /// meanwhile (then it stays marked). A record outside any capture made meanwhile on another
    /// thread does not note itself while the mark is open, so an event never recorded before
    /// may be left "never recorded" after it ([`Event::elapsed`](crate::Event::elapsed) then
    /// says so until the next record): a refusal, never a captured event handed to CUDA.
    pub(crate) fn abandon_capture_record(&self, opened: Opened) {
        let before = opened.before;
        self.close(opened, false, before);
    }

    /// Ends a record that [`RecordState::open_capture_record`] marked: `captured` says whether
    /// it went into a capture (unknown counts as captured). Outside one, the event counts as
    /// recorded outside, unless another record that may go into a capture began since, is
    /// still in progress, or went into a capture while this one was in progress.
    pub(crate) fn close_capture_record(&self, opened: Opened, captured: bool) {
        self.close(opened, captured, RECORDED);
    }

    /// Closes `opened`; `captured` says whether it went into a capture, and `alone` is the
    /// kind the event takes when no other such record overlapped it and it did not.
    fn close(&self, opened: Opened, captured: bool, alone_kind: u64) {
        let generation = opened.marked & !LOW;
        let _ = self.word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
            debug_assert!(word & OPEN_MASK != 0, "a record closed that was not open");
            let mut word = word - OPEN;
            if captured {
                word |= STICKY;
            }
            let last = word & OPEN_MASK == 0;
            let alone = last && word & !LOW == generation && word & STICKY == 0;
            if alone {
                word = word & !KIND | alone_kind;
            }
            if last {
                word &= !STICKY;
            }
            Some(word)
        });
    }

    /// Waits for the turn of this event's records that may go into a capture, held until the
    /// returned guard drops: such records of one event never overlap in CUDA.
    pub(crate) fn take_turn(&self) -> Turn<'_> {
        while self.recording.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::thread::yield_now();
        }
        Turn(&self.recording)
    }

    /// Notes an external record node added to a capture: an event never recorded counts as
    /// recorded from now on (a launch records it); any other state stays.
    pub(crate) fn note_external_record(&self) {
        let _ = self.word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
            (word & KIND == NEVER_RECORDED).then_some(word | RECORDED)
        });
    }

    /// Counts a call that hands the event to CUDA as a marker of work, and refuses it if the
    /// event's last record is a captured one. Checked, counted, checked again (SeqCst): a
    /// record into a capture either is seen by the second check or waits for this call to
    /// return; the first check keeps refused calls from counting, so a recorder waits only for
    /// calls that read the event before its mark.
    #[inline(always)]
    pub(crate) fn marker_call(&self) -> Result<InFlight<'_>> {
        self.refuse_captured()?;
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let in_flight = InFlight(&self.in_flight);
        self.refuse_captured_as(Ordering::SeqCst)?;
        Ok(in_flight)
    }

    /// Waits for the marker calls in CUDA: each is one CUDA call that does not wait for the
    /// device.
    fn wait_for_marker_calls(&self) {
        while self.in_flight.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (state, last_captured, quiet, rounds) = (&state, &last_captured, &quiet, &rounds);
                let (capturing, overlaps) = (&capturing, &overlaps);
                scope.spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(thread + 1);
                    for _ in 0..10_000 {
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
            10_000,
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
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (state, waiting, capturing, overlaps) = (&state, &waiting, &capturing, &overlaps);
                let (made, refused) = (&made, &refused);
                scope.spawn(move || {
                    for round in 0..20_000 {
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
        assert_eq!(made + refused, 40_000);
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
