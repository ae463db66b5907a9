//! The order of a buffer's uses across streams: work on the home stream needs nothing; work on
//! another stream waits for the home stream's work (the allocation first) and for the last use
//! on every other stream, then leaves an event of its own, which later uses and the free wait
//! for. Events are kept per stream and recorded again, never created per use; a stream that
//! already waited for the home stream's current event does not wait again.

use crate::call::live_captures;
use crate::call::race;
use crate::call::transitions::{NoTransitions, no_capture_transitions};
use crate::event::Event;
use crate::ffi::driver;
use crate::ffi::error::Result;
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::stream::StreamRef;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// How many streams' slots a buffer keeps before it drops those whose use has completed.
const PRUNE_AT: usize = 8;

/// A buffer's ordering state.
#[derive(Debug, Default)]
pub(super) struct Uses {
    /// The home stream enqueued uses since `home_event` was last recorded.
    home_dirty: AtomicBool,
    /// `state.others` holds events: the home stream has uses elsewhere to wait for.
    others_pending: AtomicBool,
    /// A use could not be ordered before the free: the drop leaks the memory.
    leak: AtomicBool,
    /// The address was handed out for work on the home stream that the buffer does not see:
    /// every use elsewhere records the home stream's event again.
    exported: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Recorded on the home stream after its uses, when another stream needs them.
    home_event: Option<Event>,
    /// How many times `home_event` was recorded.
    home_generation: u64,
    /// The last use on each other stream.
    others: Vec<OtherUse>,
}

#[derive(Debug)]
struct OtherUse {
    stream: StreamKey,
    /// Recorded after the stream's last use of the buffer.
    event: Event,
    /// The `home_generation` the stream last waited for.
    seen_home: u64,
}

/// Which stream a use was on: its identity (device, handle, thread) and, for a stream this
/// crate created, CUDA's id, which is never reused. Two keys with equal ids are one stream;
/// equal identities without ids may be a stream and a later one that reused its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StreamKey {
    identity: (crate::device::Device, usize, u64),
    id: Option<u64>,
}

impl StreamKey {
    fn of(stream: &StreamRef) -> StreamKey {
        StreamKey { identity: stream.identity(), id: stream.known_id() }
    }

    /// Certainly the same stream (so its own earlier use is already ordered before this one).
    fn certainly_same(&self, other: &StreamKey) -> bool {
        self.id.is_some() && self.id == other.id
    }

    /// Perhaps the same stream: the slot to record this stream's use in.
    fn same_slot(&self, other: &StreamKey) -> bool {
        self.identity == other.identity
    }
}

impl Uses {
    /// Whether the memory must be leaked rather than freed.
    pub(super) fn leaked(&self) -> bool {
        self.leak.load(Ordering::Acquire)
    }

    pub(super) fn mark_leaked(&self) {
        self.leak.store(true, Ordering::Release);
    }

    /// The address was handed out for work on the home stream: from now on, every use
    /// elsewhere waits for the home stream's work up to that use.
    pub(super) fn exported(&self) {
        self.exported.store(true, Ordering::Release);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before work on `stream` that uses the buffer: orders it after the buffer's earlier uses.
    /// Returns the home generation `stream` has now waited for (for [`Uses::after`]).
    fn before(&self, home: &StreamRef, stream: &StreamRef) -> Result<u64> {
        if stream == home {
            if self.others_pending.load(Ordering::Acquire) {
                self.home_waits_for_others(home)?;
            }
            return Ok(0);
        }
        let mut state = self.state();
        let dirty = self.home_dirty.swap(false, Ordering::AcqRel);
        if dirty || self.exported.load(Ordering::Acquire) || state.home_event.is_none() {
            let event = match state.home_event.take() {
                Some(event) => event,
                None => Event::internal(home.device())?,
            };
            if let Err(error) = home.record_raw(event.as_raw(), 0) {
                self.home_dirty.store(true, Ordering::Release);
                state.home_event = Some(event);
                return Err(error);
            }
            state.home_event = Some(event);
            state.home_generation += 1;
        }
        let key = StreamKey::of(stream);
        let generation = state.home_generation;
        let mine = state.others.iter().find(|other| other.stream.certainly_same(&key));
        if mine.is_none_or(|mine| mine.seen_home != generation) {
            if let Some(home_event) = &state.home_event {
                stream.wait_raw(home_event.as_raw(), 0)?;
            }
        }
        for other in &state.others {
            if !other.stream.certainly_same(&key) {
                stream.wait_raw(other.event.as_raw(), 0)?;
            }
        }
        Ok(generation)
    }

    /// After work on `stream` that uses the buffer: on the home stream, notes it for the next
    /// use elsewhere; on another stream, records the stream's event after it.
    fn after(&self, home: &StreamRef, stream: &StreamRef, generation: u64) -> Result<()> {
        if stream == home {
            self.home_dirty.store(true, Ordering::Release);
            return Ok(());
        }
        let key = StreamKey::of(stream);
        let mut state = self.state();
        let recorded = match state.others.iter_mut().find(|other| other.stream.same_slot(&key)) {
            Some(slot) => {
                // Recorded again after this use, which waited for the slot's earlier event
                // (`before` waits for every event it is not certain is its own): the new
                // record covers the old one.
                slot.stream = key;
                slot.seen_home = generation;
                stream.record_raw(slot.event.as_raw(), 0)
            }
            None => Event::internal(stream.device()).and_then(|event| {
                // Queries only while no stream of the process can be capturing (a query would
                // break a capture of this thread's).
                if state.others.len() >= PRUNE_AT && !live_captures::may_capture() {
                    // Slots whose last use has completed order nothing any more.
                    state.others.retain(|other| !seen_complete(&other.event));
                }
                stream.record_raw(event.as_raw(), 0)?;
                state.others.push(OtherUse { stream: key, event, seen_home: generation });
                Ok(())
            }),
        };
        self.others_pending.store(!state.others.is_empty(), Ordering::Release);
        if recorded.is_err() {
            self.mark_leaked();
        }
        recorded
    }

    /// The home stream waits for the last use on every other stream (before work there, and
    /// before the free). On failure, the events not yet waited for are kept.
    pub(super) fn home_waits_for_others(&self, home: &StreamRef) -> Result<()> {
        if !self.others_pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut state = self.state();
        // The home stream's work now includes what it waits for: a use elsewhere from here on
        // records the home stream's event again (also if a wait below fails).
        self.home_dirty.store(true, Ordering::Release);
        while let Some(other) = state.others.last() {
            home.wait_raw(other.event.as_raw(), 0)?;
            state.others.pop();
        }
        self.others_pending.store(false, Ordering::Release);
        Ok(())
    }
}

/// How much of [`ordered_use`] holds the capture-transition lock.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum Hold {
    /// From the checks to the last record, the enqueue included (this crate's own CUDA calls).
    Throughout,
    /// The checks and the waits before, then the checks and the records after, each under
    /// it; not the enqueue (a caller's closure, which may take the lock itself).
    ChecksAndWaits,
}

/// One buffer a use touches: its home stream and its ordering state.
pub(super) struct Touched<'a> {
    pub(super) home: &'a StreamRef,
    pub(super) uses: &'a Uses,
}

/// Runs `enqueue` (work on `stream` that uses the buffers `touched`), ordered after each
/// buffer's earlier uses and noted for its later ones and its free, also when `enqueue`
/// panics. No capture of this crate begins or ends meanwhile (as `hold` says): CUDA captures
/// allocations, copies and fills rather than refusing them, and this crate's refusals come
/// first. A use that cannot be noted afterwards marks its buffer leaked.
pub(super) fn ordered_use<R>(
    stream: &StreamRef,
    touched: &[Touched<'_>],
    hold: Hold,
    enqueue: impl FnOnce() -> Result<R>,
) -> Result<R> {
    // Refused inside a host function before the lock: a host function blocked behind a
    // waiting writer would hold up the work that the writer's readers wait for.
    refuse_inside_host_fn()?;
    let transitions = no_capture_transitions();
    refuse_capture(stream)?;
    for buffer in touched {
        refuse_capture(buffer.home)?;
    }
    let mut generations = [0u64; 2];
    for (buffer, generation) in touched.iter().zip(generations.iter_mut()) {
        *generation = buffer.uses.before(buffer.home, stream)?;
    }
    let held = match hold {
        Hold::Throughout => Some(transitions),
        Hold::ChecksAndWaits => {
            drop(transitions);
            None
        }
    };
    let after = After { touched, stream, generations, held, done: false };
    let result = enqueue();
    after.finish()?;
    result
}

/// The notes after a use: at `finish`, or, if that is never reached (a panic), when dropped,
/// under the capture-transition lock (`held`, or taken now).
struct After<'a, 'b> {
    touched: &'b [Touched<'a>],
    stream: &'a StreamRef,
    generations: [u64; 2],
    held: Option<NoTransitions>,
    done: bool,
}

impl After<'_, '_> {
    fn finish(mut self) -> Result<()> {
        self.done = true;
        self.note()
    }

    fn note(&mut self) -> Result<()> {
        let _transitions = match self.held.take() {
            Some(held) => held,
            None => no_capture_transitions(),
        };
        let mut noted = Ok(());
        for (buffer, &generation) in self.touched.iter().zip(&self.generations) {
            // A capture of either stream begun meanwhile (during a caller's closure) would take
            // the record: the use is then not noted, and the buffer leaks.
            let this = refuse_capture(buffer.home)
                .and_then(|()| refuse_capture(self.stream))
                .and_then(|()| buffer.uses.after(buffer.home, self.stream, generation));
            if this.is_err() {
                buffer.uses.mark_leaked();
                noted = noted.and(this);
            }
        }
        noted
    }
}

impl Drop for After<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.note();
        }
    }
}

/// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) while `stream` may be captured and is: graph replays would
/// outlive the buffer. One load while no capture can be in progress.
pub(super) fn refuse_capture(stream: &StreamRef) -> Result<()> {
    if stream.may_be_captured_now() {
        stream.refuse_capturing(CAPTURED)?;
    }
    Ok(())
}

pub(super) const CAPTURED: &str =
    "device memory is not allocated, copied, filled or freed during a capture (a replay would outlive it)";

/// Whether the work before `event`'s last record has completed (a query), told to the race
/// detector when it has: what the caller stops waiting for is done.
pub(super) fn seen_complete(event: &Event) -> bool {
    let snapshot = event.race_snapshot();
    let done = driver::event_query(event.as_raw()) == Ok(true);
    if done {
        race::host_saw(snapshot);
    }
    done
}
