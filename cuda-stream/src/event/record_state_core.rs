//! The host-side core of an event's record state: the word (the kind of the last record, the
//! records that may go into a capture in progress and their generation), the record turn, and
//! the counts of the calls in CUDA that a record into a capture waits for (marker calls) or is
//! refused beside (waits). What the protocol is for, and its limits, are told in
//! [`record_state`](super::record_state), which re-exports what the crate calls.
//!
//! No CUDA, and no path of the crate but [`shim`](super::shim), where its atomics, the spin
//! wait's yield, the wait for the reactor's pass and the error type come from: the crate builds
//! it with std's, and the loom model `cuda-stream/tests/loom_record_state.rs` includes this
//! same file (`#[path]`) beside a `shim` of loom's. It checks that a record that may go into a
//! capture never is in CUDA with a counted query of its event, nor beside a wait counted in
//! CUDA, and that a query is never let through while the last record CUDA took may be a
//! captured one. `cuda-stream/tests/loom_reactor.rs` includes it too, with the reactor passes'
//! core, to check that the reactor never queries the event beside or after such a record.

use super::shim::{AtomicBool, AtomicU32, AtomicU64, Error, Ordering, Result, wait_for_pass, yield_now};

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
    pub(crate) fn never_recorded() -> RecordState {
        RecordState {
            word: AtomicU64::new(NEVER_RECORDED),
            in_flight: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            recording: AtomicBool::new(false),
        }
    }

    /// Recorded outside any capture (an event opened from another process).
    pub(crate) fn recorded() -> RecordState {
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
        wait_for_pass();
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
            yield_now();
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
            yield_now();
        }
    }
}
