//! A stream's tail: one event of the stream, recorded there only when something must wait for
//! the work enqueued so far. A use of device or page-locked memory on a stream of this crate
//! notes the tail's point instead of recording an event after itself (the memory's ledger); a
//! conflicting use elsewhere, a host access or the free records the tail once, for every use
//! noted before. A stream that uses a buffer again and again records nothing.
//!
//! A point is an epoch, kept in one word with a "noted since the last record" bit. A use reads
//! the word after its enqueue has returned (setting the bit if it is clear, in the same atomic
//! operation); a record first moves the epoch on and clears the bit (one swap), then records. A
//! record whose swap comes after a use's read covers that use: had CUDA ordered the record
//! before the use's enqueue, the swap (sequenced before the record) would happen before that
//! enqueue (CUDA's calls on one stream synchronize with each other) and so before the use's
//! read, which would have seen the new epoch. A use that read an epoch is covered by a record
//! whose swap went past it, and every use not yet covered left the bit set.
//!
//! A tail is never recorded into a capture: its records are refused on a capturing stream
//! ([`Error::CaptureMisuse`], before CUDA), and a stream's tail is recorded, where a use left
//! the bit set, before the stream becomes part of a capture of this crate (a begin, a join) and
//! before its handle goes to a library that may capture it (then its uses record at once). When
//! the stream ends (dropped, destroyed, or given up with `into_raw`) the tail is recorded a last
//! time, where the bit is set, and closed: later waits for its uses wait for that record.
//!
//! Its lock (`StreamTail.state`) is taken alone to see whether a record already covers a use,
//! and otherwise only inside the hold (the capture-transition lock's read side or a fast call,
//! taken first where the caller holds neither): under it, only the record's enqueue (nested in
//! that hold) and leaves.

use super::StreamRef;
use super::enqueue::InCapture;
use crate::event::Event;
use crate::ffi::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The "noted since the last record" bit of [`StreamTail::word`]; the epoch is the rest.
const NOTED: u64 = 1;

/// A stream's lazily recorded event (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct StreamTail {
    /// A view of the stream, used only until the tail is closed (the stream's end).
    stream: StreamRef,
    /// The epoch (shifted left by one) and the [`NOTED`] bit. Swapped only under `state`'s lock.
    word: AtomicU64,
    /// The stream's handle went to a library that may capture it: its uses record at once.
    lent: AtomicBool,
    state: Mutex<TailState>,
}

#[derive(Debug, Default)]
struct TailState {
    /// Created at the first record.
    event: Option<Arc<Event>>,
    /// The epoch that the last successful record's swap set (0: none yet).
    recorded_through: u64,
    /// The stream has ended: nothing is recorded any more.
    closed: bool,
}

impl StreamTail {
    /// The tail of `stream` (a view of a stream this crate created), recorded nowhere yet.
    pub(crate) fn new(stream: StreamRef) -> StreamTail {
        StreamTail { stream, word: AtomicU64::new(0), lent: AtomicBool::new(false), state: Mutex::default() }
    }

    /// Whether uses must record at once (the handle went to a library that may capture it).
    pub(crate) fn lent(&self) -> bool {
        self.lent.load(Ordering::Acquire)
    }

    fn state(&self) -> MutexGuard<'_, TailState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The point a use enqueued on the stream before this call is noted at; leaves the
    /// [`NOTED`] bit set. One load once the bit is set.
    #[inline]
    pub(crate) fn point(&self) -> u64 {
        let mut word = self.word.load(Ordering::Acquire);
        if word & NOTED == 0 {
            word = self.word.fetch_or(NOTED, Ordering::AcqRel);
        }
        word >> 1
    }

    /// The tail's event, recorded after every use noted at `point` or before: recorded now if
    /// no record since covers it.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] on a capturing stream (nothing recorded); an ended stream whose
    /// last record failed; CUDA's errors creating or recording the event.
    pub(crate) fn flush(&self, point: u64) -> Result<Arc<Event>> {
        // A stream that joined a capture after its uses were recorded answers here, without
        // the hold's refusal of a capturing stream.
        if let Some(event) = self.state().covering(point) {
            return Ok(event);
        }
        self.with_hold(|state| match state.covering(point) {
            Some(event) => Ok(event),
            None if state.closed => Err(Error::Size(ENDED_UNRECORDED)),
            None => self.record(state),
        })
    }

    /// Records the tail if a use left the bit set: before the stream becomes part of a capture.
    ///
    /// # Errors
    /// As [`StreamTail::flush`].
    pub(crate) fn settle(&self) -> Result<()> {
        if self.word.load(Ordering::Acquire) & NOTED == 0 {
            return Ok(());
        }
        self.with_hold(|state| match state.closed {
            true => Err(Error::Size(ENDED_UNRECORDED)),
            false => self.record(state).map(drop),
        })
    }

    /// The handle goes to a library that may capture the stream: records what uses noted, and
    /// from now on they record at once.
    ///
    /// # Errors
    /// As [`StreamTail::flush`].
    #[cfg(feature = "cudarc")]
    pub(crate) fn lend(&self) -> Result<()> {
        self.lent.store(true, Ordering::Release);
        self.settle()
    }

    /// The stream ends (before its handle is destroyed or given up): a last record where a use
    /// left the bit set, then none. A failed record is reported to the waits that needed it.
    pub(crate) fn close(&self) {
        if self.word.load(Ordering::Acquire) & NOTED != 0 {
            let _ = self.with_hold(|state| self.record(state).map(drop));
        }
        self.state().closed = true;
    }

    /// Runs `f` on the state inside the hold (see the [module docs](self)), where the stream
    /// is surely not capturing: [`Error::CaptureMisuse`] otherwise, before `f`.
    fn with_hold<R>(&self, f: impl FnOnce(&mut TailState) -> Result<R>) -> Result<R> {
        self.stream.outside_transitions(InCapture::Refused(TAIL_IN_CAPTURE), || f(&mut self.state()))
    }

    /// Moves the epoch on, clearing the bit, then records the event (created on first use).
    /// A failed record sets the bit again: the uses it was to cover are still pending.
    fn record(&self, state: &mut TailState) -> Result<Arc<Event>> {
        let event = match &state.event {
            Some(event) => Arc::clone(event),
            None => Arc::clone(state.event.insert(Arc::new(Event::internal(self.stream.device())?))),
        };
        let epoch = (self.word.load(Ordering::Acquire) >> 1) + 1;
        self.word.swap(epoch << 1, Ordering::AcqRel);
        match self.stream.record_uncaptured(event.as_raw()) {
            Ok(()) => {
                state.recorded_through = epoch;
                Ok(event)
            }
            Err(error) => {
                self.word.fetch_or(NOTED, Ordering::AcqRel);
                Err(error)
            }
        }
    }
}

impl TailState {
    /// The event, if a record since covers a use noted at `point`.
    fn covering(&self, point: u64) -> Option<Arc<Event>> {
        self.event.as_ref().filter(|_| self.recorded_through > point).map(Arc::clone)
    }
}

/// A use is waited for on a stream that has ended, and its last record failed.
const ENDED_UNRECORDED: &str =
    "a use of this memory was on a stream that ended before its work could be marked: it is never known complete";

/// Why a tail is not recorded on a capturing stream.
pub(crate) const TAIL_IN_CAPTURE: &str = "the stream that used this memory is capturing, and its use was never marked \
     outside the capture (a capture this crate did not begin): nothing can wait for that use now";
