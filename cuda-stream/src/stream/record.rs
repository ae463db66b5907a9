//! Ordering between streams and events: records, waits and `wait_stream`. Records and
//! `wait_stream` are aware of captures (a record into a capture marks its event as captured; a
//! `wait_stream` in a capture on work outside it becomes an external-event node the graph
//! keeps). A wait that may make its stream join a capture is a capture transition
//! ([`StreamRef::join_point`]; the capture docs' "Who is in a capture").

use super::capture_node::{Added, CaptureNode, add_to_capture};
use super::capture_status::{CaptureStatus, capture_state, refuse_legacy};
use super::enqueue::{Via, Work};
use super::{AsStream, Builtin, StreamRef};
use crate::call::live_captures;
use crate::call::race;
use crate::call::race::model::{Step, Use};
use crate::call::transitions::no_capture_transitions;
use crate::call::uncaptured_calls;
use crate::device::keep_alive::graph_mutations;
use crate::device::{Device, same_device};
use crate::event::{Event, EventFlags};
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, carry, check, unpack};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::cell::RefCell;
use std::ffi::c_uint;
use std::sync::Arc;

thread_local! {
    /// One marker event per device for `wait_stream`, so that no event is created or destroyed
    /// per call (but on a thread whose thread-locals are being destroyed: see `new_marker`).
    /// Thread-local: the record and the wait that use it happen on this thread, in
    /// order, so no other call can re-record it in between. Not counted in `live_events`.
    static MARKERS: RefCell<Markers> = const { RefCell::new(Markers(Vec::new())) };
}

/// This thread's marker events, by device ordinal. A marker's last record may have gone into a
/// capture (a `wait_stream` between two streams of one): at the thread's exit they are
/// destroyed under the read side of the capture-transition lock, never beside a capture's end
/// on another thread (a destroy racing an end crashed libcuda; see `Event`'s drop).
struct Markers(Vec<Option<Event>>);

impl Drop for Markers {
    fn drop(&mut self) {
        let _transitions = no_capture_transitions();
        self.0.clear();
    }
}

impl StreamRef {
    /// Records `event` here: it completes when the work enqueued so far has
    /// ([`cudaEventRecord`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) if the event belongs to another device; CUDA's errors.
    #[inline]
    pub fn record(&self, event: &Event) -> Result<()> {
        same_device("an event is recorded on a stream of its own device", self.device, event.device())?;
        // The per-thread stream may be captured by another library on this thread at any time.
        if self.is_thread_bound() {
            return self.record_during_captures(event);
        }
        // While no capture may be in progress, one CUDA call; a capture of this crate does not
        // begin until it has returned (a real record overlapping a captured record of the same
        // event, or its capture's end, crashed libcuda).
        let fast = self.enqueue_outside_captures(
            record_work(event.as_raw()),
            || true,
            |via| {
                let ticket = event.records().before_record();
                self.record_via(via, event.as_raw(), 0).map(|()| ticket)
            },
        );
        let Some(recorded) = fast else {
            return self.record_during_captures(event);
        };
        event.records().note_uncaptured_record(recorded?);
        if self.caught_by_a_capture_begun_meanwhile() {
            // Marked as a record into a capture of its own (opened, then closed as captured).
            // The mark comes after the record here: a call between the two is the window of a
            // capture that begins between a check and a call (the capture docs' limits).
            let opened = event.records().open_capture_record();
            event.records().close_capture_record(opened, true);
        }
        Ok(())
    }

    /// [`StreamRef::record`] while some stream may be capturing. The event is marked as
    /// captured before the record and the reactor's pass in progress is waited for, so that no
    /// query reaches CUDA while its last record may be a captured one; after the record, with
    /// no capture of this crate beginning or ending meanwhile, the stream's status says whether
    /// it was (a stream that joined a capture in between is still capturing, so the event stays
    /// marked). A failed record counts as captured: CUDA's previous record of the event, which
    /// may be a captured one, is then still the last (the crate's own refusals come before the
    /// mark). A record that may go into a capture while another thread waits for the event in
    /// CUDA is refused ([`Event::synchronize`]).
    #[cold]
    #[inline(never)]
    fn record_during_captures(&self, event: &Event) -> Result<()> {
        // The crate's own refusals (inside a host function, another thread's per-thread stream,
        // the legacy stream during a capture) come first: they leave the event as it was.
        let _current = self.enter()?;
        let _transitions = no_capture_transitions();
        // The graph-mutation lock before the event's turn (the lock order): the record may go
        // into a capture of this crate (`enqueue` then takes it), and a raw launcher that holds
        // it may record.
        let _graph = live_captures::any().then(graph_mutations);
        // One such record of the event at a time in CUDA (a real record overlapping a captured
        // one crashed libcuda).
        let _turn = event.records().take_turn();
        // Marked captured; the queries and the reactor's pass that read it before are waited
        // for.
        let opened = event.records().open_capture_record();
        // Another thread waits for the event in CUDA (`Event::synchronize`), which a record
        // into a capture must not overlap and must not wait for (the work waited for may
        // wait for this thread): refused, unless the stream is surely not capturing. The mark
        // first, then the count: a wait that counts itself later sees the mark and polls.
        if event.records().is_waited_for() {
            match self.may_be_capturing() {
                Ok(false) => {}
                capturing => {
                    event.records().abandon_capture_record(opened);
                    capturing?;
                    return Err(Error::CaptureMisuse(crate::event::WAITED_EVENT));
                }
            }
        }
        // A capture that no begin of this crate announced: another library's, of this thread's
        // per-thread stream (stable during this call: only this thread can begin or end it).
        // Queries of the event made as fast calls (which may be in progress while no capture is
        // counted, or while a foreign mark is not yet settled) are waited for, as a capture's
        // begin waits; never from inside a fast call of this thread (a raw launcher's closure):
        // two threads doing so would wait for each other's calls forever. Refused there instead.
        if self.is_thread_bound()
            && uncaptured_calls::fast_calls_may_be_in_progress()
            && self.may_be_capturing() != Ok(false)
        {
            if uncaptured_calls::in_fast_call() {
                event.records().abandon_capture_record(opened);
                return Err(Error::CaptureMisuse(UNANNOUNCED_CAPTURE_IN_LAUNCHER));
            }
            uncaptured_calls::wait_for_uncaptured_calls();
        }
        let recorded = self.record_raw(event.as_raw(), 0);
        let captured = recorded.is_err() || self.may_be_capturing() != Ok(false);
        event.records().close_capture_record(opened, captured);
        recorded
    }

    /// Whether this stream may be in a capture at all, without a CUDA call: while no stream of
    /// the process may be capturing ([`live_captures::may_capture`]), it is not; but the
    /// per-thread stream can be captured by another library on this thread (cudarc's safe
    /// `per_thread_stream().begin_capture`) without any handle being wrapped.
    #[inline(always)]
    pub(crate) fn may_be_captured_now(&self) -> bool {
        live_captures::may_capture() || self.is_thread_bound()
    }

    /// Whether a record just made here, after a check that saw no capture possible, may have
    /// gone into a capture that began meanwhile (counted before CUDA began it). Unknown counts
    /// as captured (a refusal, never a crash).
    fn caught_by_a_capture_begun_meanwhile(&self) -> bool {
        live_captures::may_capture() && self.may_be_capturing().unwrap_or(true)
    }

    /// Whether this stream is capturing, or its capture is invalidated (not yet ended). The
    /// legacy stream never is (and asking it fails while another stream captures in Global
    /// mode).
    pub(crate) fn may_be_capturing(&self) -> Result<bool> {
        if self.builtin().is_some_and(Builtin::is_legacy) {
            return Ok(false);
        }
        Ok(self.capture_status()? != CaptureStatus::None)
    }

    /// Records `event` here with CUDA's record flags
    /// ([`cudaEventRecordWithFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    ///
    /// With [`RecordFlags::external`] on a stream being captured, the record becomes an
    /// event-record node of the graph (`cudaGraphAddEventRecordNode` after the stream's work so
    /// far, as `cudaEventRecordExternal` would add it; see the
    /// [capture docs](crate::capture#what-a-captures-graph-keeps-and-how-it-gets-there)): every
    /// launch of the graph records the event, which other streams and processes can wait on. The node names the
    /// event by its handle, so the graph keeps the event alive (a clone of the `Arc`, held by a
    /// CUDA user object of the graph) for as long as any graph or executable made from it may
    /// record it: dropping your `Arc` never frees an event a launch still records. Outside a
    /// capture the flag changes nothing and nothing is kept.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) if the event belongs to another device; CUDA's errors.
    pub fn record_with(&self, event: &Arc<Event>, flags: RecordFlags) -> Result<()> {
        same_device("an event is recorded on a stream of its own device", self.device, event.device())?;
        if !flags.external {
            return self.record(event);
        }
        refuse_inside_host_fn()?;
        let mut kept = Some(Box::new(Arc::clone(event)));
        // No capture of this crate begins, ends or is joined until the record is in: the graph
        // read is the one the node goes into, and it lives meanwhile; no call of this crate
        // captures into that graph meanwhile (see `add_to_capture`).
        let transition = crate::call::transitions::capture_transition()?;
        // The graph-mutation lock before the event's turn (the lock order; `add_to_capture`
        // takes it again, nested).
        let _graph = graph_mutations();
        // Not beside another thread's record of the event into a capture (see `record`).
        let _turn = event.records().take_turn();
        let ticket = event.records().before_record();
        // In an active capture, an event-record node added to the capture's graph, which keeps
        // the event (see `capture_node`): it records the event at each launch, and the event
        // stays what its last real record made it (counted as recorded, for `elapsed`, if it
        // never was).
        let record = CaptureNode::EventRecord(event.as_raw());
        if let Added::Node = add_to_capture(self, None, &mut kept, record, &transition)? {
            event.records().note_external_record();
            return Ok(());
        }
        // Not capturing (or a broken capture, which CUDA then reports): a real record. The flag
        // means nothing outside a capture, and CUDA refuses it (cudaErrorIllegalState) during
        // this thread's Global capture; it is kept only where a foreign capture may begin on
        // the stream before the record (a foreign handle was wrapped: no capture of this crate
        // begins under the transition, and only this thread can capture its per-thread
        // stream), which it then makes an external node rather than a captured record.
        let flags = if live_captures::foreign() { sys::cudaEventRecordExternal } else { 0 };
        self.record_raw(event.as_raw(), flags)?;
        // A foreign capture that began since the status read made the record an external node,
        // not a real record: the event stays what its last real record made it.
        if !self.caught_by_a_capture_begun_meanwhile() {
            event.records().note_uncaptured_record(ticket);
        }
        Ok(())
    }

    /// Creates an event with `event_flags` and records it here with `record_flags`, in one call
    /// (see [`StreamRef::record_with`]).
    ///
    /// # Errors
    /// CUDA's errors creating or recording the event (`cudaErrorInvalidValue` for interprocess
    /// with timing).
    pub fn record_event_with(&self, event_flags: EventFlags, record_flags: RecordFlags) -> Result<Arc<Event>> {
        let event = Arc::new(Event::new(self.device, event_flags)?);
        self.record_with(&event, record_flags)?;
        Ok(event)
    }

    #[inline(always)]
    pub(crate) fn record_raw(&self, event: sys::cudaEvent_t, flags: c_uint) -> Result<()> {
        self.enqueue(record_work(event), |via| self.record_via(via, event, flags))
    }

    /// The record itself, through `via`.
    #[inline(always)]
    fn record_via(&self, via: Via, event: sys::cudaEvent_t, flags: c_uint) -> Result<()> {
        match via {
            Via::Driver => driver::event_record(event, self.raw, flags),
            // SAFETY: `event` is live, of the device whose stream the special handle `raw`
            // names, which is current; `flags` is one of CUDA's record flags.
            Via::Runtime => check(unsafe { sys::cudaEventRecordWithFlags(event, self.raw, flags) }, "cudaEventRecord"),
        }
    }

    /// Records a new event (default [`EventFlags`]: no timing) and returns it.
    ///
    /// # Errors
    /// CUDA's errors creating or recording the event.
    pub fn record_event(&self) -> Result<Event> {
        let event = Event::new(self.device, EventFlags::default())?;
        self.record(&event)?;
        Ok(event)
    }

    /// Makes later work on this stream wait until `event` completes; the host does not block
    /// ([`cudaStreamWaitEvent`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// The event may belong to another device.
    ///
    /// # Errors
    /// CUDA's errors; on a capturing stream, an event recorded outside the capture is
    /// `cudaErrorStreamCaptureIsolation` and CUDA invalidates the capture (use
    /// [`StreamRef::wait_stream`], which handles that case).
    #[inline]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // While no capture may be in progress (a capture of this crate does not begin until
        // the call has returned) and the event's last record went into none, the wait joins
        // none: one CUDA call. The mark is read inside the fast call, after its flag: a record
        // into a capture that marks the event and then waits for the fast calls is never
        // overlapped by a wait that read the mark unset.
        let uncaptured = || !event.records().is_captured();
        let fast = self.enqueue_outside_captures(wait_work(event.as_raw()), uncaptured, |via| {
            self.wait_via(via, event.as_raw(), 0)
        });
        if let Some(waited) = fast {
            return waited;
        }
        // A wait on an event recorded into a capture makes this stream join that capture.
        self.join_point(|| self.wait_raw(event.as_raw(), 0))
    }

    /// Runs `wait`, a wait of this stream that may make it join a capture (CUDA's fork: a
    /// stream that waits on captured work becomes part of that capture), as a capture
    /// transition: under the write side of the capture-transition lock, as a begin or an end.
    /// Every call that checks a stream's capture status and then acts on it holds the read
    /// side from its check to its call, so no stream joins a capture in between (a record
    /// that checked "not capturing" and then went into another thread's capture named an event
    /// that graph did not keep, and crashed libcuda).
    ///
    /// Until a foreign handle was seen, a wait may join a capture the crate did not count
    /// (another library's capture of its thread's per-thread stream): it is counted while it is
    /// made (no call takes the fast path meanwhile, and the fast calls made before it have
    /// returned), and if it joined a capture whose id is not one of this crate's (or its status
    /// cannot be read), the process is marked as one where captures the crate cannot count
    /// exist ([`uncaptured_calls::foreign_handle_seen`]): no call assumes "no capture" any more.
    /// A wait that joined nothing (an event whose capture ended), or a capture of this crate,
    /// leaves the fast paths as they were. A stream of an [`SmPartition`](crate::SmPartition) that joined a capture
    /// gives its graph a reference of its green context, which the graph's kernel nodes name.
    #[cold]
    #[inline(never)]
    pub(crate) fn join_point(&self, wait: impl FnOnce() -> Result<()>) -> Result<()> {
        // The crate's own refusals before any lock is taken (inside a host function, another
        // thread's per-thread stream, the legacy stream during a capture): a misuse never
        // reaches the join's bookkeeping.
        let _entered = self.enter()?;
        let transition = crate::call::transitions::capture_transition()?;
        // Until a foreign handle was seen, a capture this crate did not count (another library's
        // capture of its thread's per-thread stream) may be joined here: the wait is counted
        // while it is made, after the fast calls that assumed no capture have returned, as a
        // begin is.
        let uncounted = (!live_captures::foreign()).then(|| {
            let join = live_captures::uncounted_join();
            uncaptured_calls::wait_for_uncaptured_calls();
            join
        });
        // Once a foreign handle was seen, the fast calls that read the mark unset may still be
        // in progress until the thread that set it has waited for them (found by
        // tests/loom_joins.rs): the join waits for them too.
        if uncounted.is_none() && uncaptured_calls::fast_calls_may_be_in_progress() {
            uncaptured_calls::wait_for_uncaptured_calls();
        }
        // Whether this wait is what makes the stream join (read only where it matters; never
        // on the legacy stream, which joins no capture and whose status read fails, and may
        // disturb, while another stream captures in Global mode).
        let partition = self.partition.is_some();
        let legacy = self.builtin().is_some_and(Builtin::is_legacy);
        let was_capturing = (!legacy && (partition || uncounted.is_some())).then(|| self.may_be_capturing());
        let waited = wait();
        // Read whatever the wait returned (a failed wait may still have joined); a status that
        // cannot be read counts as a join of a capture the crate did not count.
        let (mut joined_graph, mut foreign_join) = (None, false);
        if let Some(Ok(false) | Err(_)) = was_capturing {
            match capture_state(self) {
                Ok(state) if state.info.status == CaptureStatus::None => {}
                Ok(state) => {
                    foreign_join = !live_captures::is_counted(state.info.id);
                    joined_graph = Some(state.graph);
                }
                // CUDA could not say (a sticky error, say): counted as a foreign join.
                Err(Error::Cuda { .. }) => foreign_join = true,
                Err(_) => {}
            }
        }
        if uncounted.is_some() && foreign_join {
            // Joined a capture the crate cannot count: from now on, as once a foreign handle
            // was wrapped, no call assumes that no capture exists.
            uncaptured_calls::foreign_handle_seen();
        }
        drop(uncounted);
        waited?;
        if let (true, Some(graph)) = (partition, joined_graph) {
            self.keep_partition_in(graph)?;
        }
        drop(transition);
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn wait_raw(&self, event: sys::cudaEvent_t, flags: c_uint) -> Result<()> {
        self.enqueue(wait_work(event), |via| self.wait_via(via, event, flags))
    }

    /// The wait itself, through `via`.
    #[inline(always)]
    fn wait_via(&self, via: Via, event: sys::cudaEvent_t, flags: c_uint) -> Result<()> {
        match via {
            Via::Driver => driver::stream_wait_event(self.raw, event, flags),
            // SAFETY: `event` is live, `raw` a special handle of the current device; `flags` is
            // one of CUDA's wait flags.
            Via::Runtime => check(unsafe { sys::cudaStreamWaitEvent(self.raw, event, flags) }, "cudaStreamWaitEvent"),
        }
    }

    /// Makes later work on this stream wait for the work enqueued on `other` so far. Costs one
    /// record and one wait, plus a capture-status read while some stream of the process may be
    /// capturing (a capture of this crate is in progress, or a foreign handle was ever
    /// wrapped, see [`BorrowedStream::borrow_raw`](crate::BorrowedStream::borrow_raw)); the marker event is created once per
    /// thread and device, never per call (a call from a thread-local's destructor, once the
    /// thread's markers are gone, creates one for the call and never destroys it).
    ///
    /// During stream capture:
    /// * both streams in the same capture, or `self` not capturing: an ordinary dependency (a
    ///   stream that waits on a capturing one joins its capture, CUDA's fork);
    /// * `self` capturing and `other` not: the graph gets an external wait on `other`'s work so
    ///   far (`cudaEventWaitExternal`), with an event the graph keeps alive; the capture stays
    ///   valid;
    /// * the two in different captures: [`Error::CaptureMisuse`](crate::Error::CaptureMisuse), and neither capture is touched.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) for streams of two different captures; CUDA's errors.
    #[inline]
    pub fn wait_stream(&self, other: impl AsStream) -> Result<()> {
        let other = other.as_stream();
        // While no capture may be in progress (a capture of this crate does not begin until
        // the call has returned), neither stream is in one and the wait joins none. The
        // per-thread stream may be captured by another library at any time.
        if !self.is_thread_bound() && !other.is_thread_bound() {
            if let Some(waited) = uncaptured_calls::outside_captures(|| carry(self.wait_stream_now(&other))) {
                return unpack(waited);
            }
        }
        if self.may_be_captured_now() && self.capture_status()? != CaptureStatus::None {
            return wait_stream_in_capture(self, &other);
        }
        self.wait_stream_joining(&other)
    }

    /// `wait_stream` from a stream that was not capturing when checked, while `other` may be
    /// (a capture of this crate is in progress, or one of the two is a per-thread stream that
    /// another library may capture): the wait is a [join point](StreamRef::join_point). A
    /// stream that joined a capture meanwhile takes the in-capture path instead.
    #[cold]
    #[inline(never)]
    fn wait_stream_joining(&self, other: &StreamRef) -> Result<()> {
        // `other`, if it is this thread's per-thread stream (only this thread may use it), is
        // not captured by another library: none begins its capture during this call. Then, as
        // in `wait_stream`, while no capture of this crate may be in progress, the wait joins
        // none (`self`, if it is the per-thread stream, was read by the caller: not capturing).
        let other_captured = other.is_thread_bound() && other.may_be_capturing()?;
        if !other_captured {
            if let Some(waited) = uncaptured_calls::outside_captures(|| carry(self.wait_stream_now(other))) {
                return unpack(waited);
            }
        }
        let mut in_capture = false;
        self.join_point(|| {
            // Under the transition lock: no capture begins, ends or is joined meanwhile.
            in_capture = self.may_be_capturing()?;
            if in_capture { Ok(()) } else { self.wait_stream_now(other) }
        })?;
        if in_capture { wait_stream_in_capture(self, other) } else { Ok(()) }
    }

    /// `wait_stream` through this thread's marker event of `other`'s device: the wait itself,
    /// with no capture check (a caller that may make this stream join a capture makes it a
    /// [join point](StreamRef::join_point)).
    #[inline]
    pub(crate) fn wait_stream_now(&self, other: &StreamRef) -> Result<()> {
        let marker = match this_threads_marker(other.device) {
            Some(marker) => marker,
            None => new_marker(other.device)?,
        };
        if self.builtin().is_none() && other.builtin().is_none() && !race::tracking() {
            // Two real handles: no context to make current, one check for both calls.
            refuse_inside_host_fn()?;
            return driver::record_then_wait(marker, other.raw, self.raw);
        }
        other.record_raw(marker, 0)?;
        self.wait_raw(marker, 0)
    }
}

/// This thread's marker event of `device`, if it has one (and the thread is not being torn
/// down). The handle is used by this thread only, within one call, while [`MARKERS`] keeps it.
#[inline(always)]
fn this_threads_marker(device: Device) -> Option<sys::cudaEvent_t> {
    let slot = device.ordinal() as usize;
    MARKERS.try_with(|markers| markers.try_borrow().ok()?.0.get(slot)?.as_ref().map(Event::as_raw)).ok().flatten()
}

/// Creates this thread's marker event of `device`, once per thread and device. On a thread
/// being torn down, whose markers are gone, the event is one for this call that is never
/// destroyed (its record may be in a capture: leaked rather than destroyed beside one's end).
///
/// # Errors
/// CUDA's errors creating it.
#[cold]
#[inline(never)]
fn new_marker(device: Device) -> Result<sys::cudaEvent_t> {
    let marker = Event::internal(device)?;
    let raw = marker.as_raw();
    let mut marker = Some(marker);
    let slot = device.ordinal() as usize;
    let _ = MARKERS.try_with(|markers| {
        if let Ok(mut markers) = markers.try_borrow_mut() {
            if markers.0.len() <= slot {
                markers.0.resize_with(slot + 1, || None);
            }
            markers.0[slot] = marker.take();
        }
    });
    std::mem::forget(marker);
    Ok(raw)
}

/// A record of `event`, as the one enqueue path takes it.
#[inline(always)]
fn record_work(event: sys::cudaEvent_t) -> Work<fn() -> Vec<Use>> {
    Work::named("cudaEventRecord").step(Step::Record(event as usize)).through_driver()
}

/// Why a record into another library's capture of the per-thread stream is refused inside a
/// raw launcher.
const UNANNOUNCED_CAPTURE_IN_LAUNCHER: &str = "an event is not recorded on a per-thread stream that another library is \
     capturing from inside a raw launcher: the record would wait for other threads' calls, which may wait for this one";

/// A wait for `event`, as the one enqueue path takes it.
#[inline(always)]
fn wait_work(event: sys::cudaEvent_t) -> Work<fn() -> Vec<Use>> {
    Work::named("cudaStreamWaitEvent").step(Step::WaitEvent(event as usize)).through_driver()
}

impl Event {
    /// Records this event on `stream` (the same as [`StreamRef::record`](crate::StreamRef::record)).
    ///
    /// # Errors
    /// As [`StreamRef::record`](crate::StreamRef::record).
    #[inline]
    pub fn record(&self, stream: impl AsStream) -> Result<()> {
        stream.as_stream().record(self)
    }
}

/// CUDA's flags for recording an event
/// ([`cudaEventRecordWithFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RecordFlags {
    /// `cudaEventRecordExternal`: during stream capture, the record is a node of the graph
    /// that records the event at every launch, instead of a dependency inside the capture.
    pub external: bool,
}

impl RecordFlags {
    /// `cudaEventRecordExternal`.
    pub fn external() -> RecordFlags {
        RecordFlags { external: true }
    }
}

/// `this.wait_stream(other)` while `this` is being captured (see [`StreamRef::wait_stream`]).
pub(crate) fn wait_stream_in_capture(this: &StreamRef, other: &StreamRef) -> Result<()> {
    refuse_inside_host_fn()?;
    // No capture of this crate begins, ends or is joined until the wait is in: the graph read
    // here is the one that keeps the event, and it stays alive until the wait that needs the
    // event is in it (another thread could otherwise end the capture and destroy the graph in
    // between, or begin a new capture that the wait would go into); no call of this crate
    // captures into that graph meanwhile (see `add_to_capture`).
    let transitions = crate::call::transitions::capture_transition()?;
    let mine = capture_state(this)?;
    if mine.info.status == CaptureStatus::None {
        // Its capture ended since the caller's check: the wait may join another capture now.
        drop(transitions);
        return this.wait_stream_joining(other);
    }
    if mine.info.status != CaptureStatus::Active {
        // A broken capture: let CUDA report it, as it does for every other call.
        return this.wait_stream_now(other);
    }
    refuse_legacy(other, "a capturing stream cannot wait on the legacy stream (it would break the capture)")?;
    let theirs = capture_state(other)?;
    match theirs.info.status {
        CaptureStatus::Active if theirs.info.id == mine.info.id => this.wait_stream_now(other),
        CaptureStatus::None => {
            // `other`'s work so far runs outside the graph: the graph waits for it as an
            // external event, recorded now, never again, and kept alive by the graph; the wait
            // is a node added to the graph (see `capture_node`).
            let event = Event::internal(other.device())?;
            other.record_raw(event.as_raw(), 0)?;
            let wait = CaptureNode::EventWait(event.as_raw());
            match add_to_capture(this, Some(mine.info.id), &mut Some(Box::new(event)), wait, &transitions)? {
                Added::Node => Ok(()),
                Added::NotCapturing => {
                    Err(Error::CaptureMisuse("the capture of the waiting stream ended during the wait"))
                }
            }
        }
        _ => Err(Error::CaptureMisuse("the two streams belong to different captures (CUDA would invalidate both)")),
    }
}
