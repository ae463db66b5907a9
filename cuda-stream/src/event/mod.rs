//! Events: markers recorded on a stream, to wait on, query, time, or share with another process.

// Layer 4 of docs/architecture.md, events. May use: ffi, call, device.

mod record_state;
mod record_state_core;
mod shim;

pub(crate) use self::record_state::{RecordState, WAITED_EVENT};

use crate::call::live;
use crate::call::race;
use crate::call::sync_debug::{self, SyncKind};
use crate::call::{capture_mode, live_captures, uncaptured_calls};
use crate::device::Device;
use crate::device::same_device;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, check, check_ready};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::ffi::c_uint;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::mem::ManuallyDrop;
use std::time::Duration;

/// How to create an event
/// ([`cudaEventCreateWithFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
/// The default is all off: no timing (cheaper to record), spin-waiting synchronize, local.
///
/// **Unlike `cudaEventCreate`**, whose events time by default, `EventFlags::default()` has
/// timing off (`cudaEventDisableTiming`, as PyTorch's and cudarc's events): for
/// [`Event::elapsed`], create both events with [`EventFlags::timing`]
/// (`cudaEventCreate(&e)` in C++ is `Event::new(device, EventFlags::timing())` here).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventFlags {
    /// Record timestamps, for [`Event::elapsed`] (else `cudaEventDisableTiming`).
    pub timing: bool,
    /// `cudaEventBlockingSync`: [`Event::synchronize`] sleeps instead of spinning.
    pub blocking_sync: bool,
    /// `cudaEventInterprocess`: shareable with another process through [`Event::ipc_handle`].
    /// CUDA requires timing off for it.
    pub interprocess: bool,
}

impl EventFlags {
    /// Flags with timing enabled.
    pub fn timing() -> EventFlags {
        EventFlags { timing: true, ..EventFlags::default() }
    }

    fn raw(self) -> c_uint {
        let mut flags = 0;
        if !self.timing {
            flags |= sys::cudaEventDisableTiming;
        }
        if self.blocking_sync {
            flags |= sys::cudaEventBlockingSync;
        }
        if self.interprocess {
            flags |= sys::cudaEventInterprocess;
        }
        flags as c_uint
    }
}

/// An event's creation flags as far as this process can know them: `None` where it cannot
/// (CUDA has no call that reads an event's flags back).
///
/// * An event created here: every flag is known.
/// * An event opened from another process ([`Event::from_ipc_handle`]): interprocess `Some(true)`
///   and timing `Some(false)` (CUDA requires `cudaEventDisableTiming` with
///   `cudaEventInterprocess`), but blocking sync `None`: the exporter may or may not have set it.
/// * A borrowed handle ([`Event::from_raw`]): nothing is known.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct KnownEventFlags {
    /// Whether the event records timestamps.
    pub timing: Option<bool>,
    /// Whether [`Event::synchronize`] sleeps instead of spinning.
    pub blocking_sync: Option<bool>,
    /// Whether the event can be shared with another process.
    pub interprocess: Option<bool>,
}

impl KnownEventFlags {
    /// Every flag, when every flag is known.
    pub fn exact(self) -> Option<EventFlags> {
        Some(EventFlags { timing: self.timing?, blocking_sync: self.blocking_sync?, interprocess: self.interprocess? })
    }
}

impl From<EventFlags> for KnownEventFlags {
    fn from(flags: EventFlags) -> KnownEventFlags {
        KnownEventFlags {
            timing: Some(flags.timing),
            blocking_sync: Some(flags.blocking_sync),
            interprocess: Some(flags.interprocess),
        }
    }
}

/// A CUDA event of one device. Owned events are destroyed on drop; borrowed ones
/// ([`Event::from_raw`]) never are.
///
/// `Eq` and `Hash` compare the event (device and handle), not the Rust value: a borrowed view
/// ([`Event::from_raw`]) equals the `Event` that owns the handle. A handle value that CUDA
/// reuses after a destroy cannot fool them: two `Event`s are alive together only while both
/// handles are (the contract of `from_raw`), and two live events never share a handle.
pub struct Event {
    raw: sys::cudaEvent_t,
    device: Device,
    ownership: EventOwnership,
    flags: KnownEventFlags,
    /// For an event opened from another process: the handle it was opened with, which is the
    /// event's IPC handle (CUDA refuses `cudaIpcGetEventHandle` on an opened event). Boxed: 64
    /// bytes that other events do not need.
    imported_from: Option<Box<sys::cudaIpcEventHandle_t>>,
    /// Where the last record went, and the calls in CUDA that it must not surprise.
    records: RecordState,
}

/// Who destroys an event's handle.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum EventOwnership {
    /// Ours, counted in [`crate::live_events`].
    Owned,
    /// Ours, for the crate's own bookkeeping (markers, graph-owned events): not counted.
    Internal,
    /// Someone else's.
    Borrowed,
}

// SAFETY: a cudaEvent_t is a handle the CUDA runtime lets any thread use.
unsafe impl Send for Event {}
// SAFETY: every method takes `&self` and makes thread-safe runtime calls; `records` is atomic.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event on `device`.
    ///
    /// # Errors
    /// `cudaErrorInvalidValue` for interprocess with timing; CUDA's errors (no device).
    pub fn new(device: Device, flags: EventFlags) -> Result<Event> {
        let event = Event::create(device, flags, EventOwnership::Owned)?;
        live::event_created();
        Ok(event)
    }

    /// An event without timing for the crate's own use, not counted in `live_events`.
    pub(crate) fn internal(device: Device) -> Result<Event> {
        Event::create(device, EventFlags::default(), EventOwnership::Internal)
    }

    fn create(device: Device, flags: EventFlags, ownership: EventOwnership) -> Result<Event> {
        let _current = device.make_current()?;
        let mut raw: sys::cudaEvent_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let code = unsafe { sys::cudaEventCreateWithFlags(&mut raw, flags.raw()) };
        check(code, "cudaEventCreateWithFlags")?;
        Ok(Event::wrap(raw, device, ownership, flags.into()))
    }

    fn wrap(raw: sys::cudaEvent_t, device: Device, ownership: EventOwnership, flags: KnownEventFlags) -> Event {
        Event { raw, device, ownership, flags, imported_from: None, records: RecordState::never_recorded() }
    }

    /// Wraps an event handle someone else owns; dropping the `Event` never destroys it.
    ///
    /// # Safety
    /// `raw` must be a valid event of `device`'s primary context, and stay valid while this
    /// `Event` is in use. Records made outside this crate are not seen, nor records through
    /// another `Event` of the same handle (each keeps its own state): while the event is last
    /// recorded inside a stream capture (by its owner, say), it must not be queried,
    /// synchronized, timed or awaited through this `Event` (CUDA would invalidate the capture,
    /// and such a query racing the capture's end crashed libcuda). Not called inside a raw
    /// launcher's closure, as for [`BorrowedStream::borrow_raw`](crate::BorrowedStream::borrow_raw).
    pub unsafe fn from_raw(raw: sys::cudaEvent_t, device: Device) -> Event {
        // Its owner may record it in a capture this crate cannot see.
        crate::call::uncaptured_calls::foreign_handle_seen();
        Event::wrap(raw, device, EventOwnership::Borrowed, KnownEventFlags::default())
    }

    /// Opens an event that another process exported with [`Event::ipc_handle`]
    /// ([`cudaIpcOpenEventHandle`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    /// The result is owned (closed on drop) and can be waited on, queried and synchronized;
    /// its [`ipc_handle`](Event::ipc_handle) is `handle`, so it can be passed on to a third
    /// process, and its [`flags`](Event::flags) say what can be known of the exporter's.
    ///
    /// # Safety
    /// The exporting process must keep the event alive while this one uses it: by NVIDIA's
    /// contract, using an imported event after its exporter destroyed it is undefined
    /// behaviour, and nothing in this process can detect it.
    ///
    /// # Errors
    /// `cudaErrorInvalidResourceHandle` or `cudaErrorMapBufferObjectFailed` for a handle that
    /// is not live; `cudaErrorInvalidValue` inside the exporting process.
    pub unsafe fn from_ipc_handle(device: Device, handle: sys::cudaIpcEventHandle_t) -> Result<Event> {
        let _current = device.make_current()?;
        let mut raw: sys::cudaEvent_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the handle is plain bytes the driver checks.
        check(unsafe { sys::cudaIpcOpenEventHandle(&mut raw, handle) }, "cudaIpcOpenEventHandle")?;
        // Interprocess events are created without timing (CUDA refuses the pair); whether the
        // exporter asked for blocking sync cannot be read from here.
        let flags = KnownEventFlags { timing: Some(false), blocking_sync: None, interprocess: Some(true) };
        live::event_created();
        let mut event = Event::wrap(raw, device, EventOwnership::Owned, flags);
        event.imported_from = Some(Box::new(handle));
        event.records = RecordState::recorded();
        Ok(event)
    }

    /// The handle another process opens with [`Event::from_ipc_handle`]
    /// ([`cudaIpcGetEventHandle`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    /// For an event that was itself opened from a handle, that same handle: CUDA refuses
    /// `cudaIpcGetEventHandle` on an opened event (`cudaErrorInvalidResourceHandle`), and the
    /// handle names the exporter's event, which every importer shares.
    ///
    /// # Errors
    /// [`Error::NotInterprocess`] unless created with [`EventFlags::interprocess`]; CUDA's errors.
    pub fn ipc_handle(&self) -> Result<sys::cudaIpcEventHandle_t> {
        refuse_inside_host_fn()?;
        if let Some(handle) = &self.imported_from {
            return Ok(**handle);
        }
        if self.flags.interprocess == Some(false) {
            return Err(Error::NotInterprocess);
        }
        // The runtime call names no stream: on a thread with no current context it would bind
        // device 0's, and an event of another device there crashed libcuda (CUDA 13.0).
        let _current = self.device().make_current()?;
        let mut handle = sys::cudaIpcEventHandle_t::default();
        // SAFETY: `handle` is a valid out-pointer; `raw` is live, of the current device.
        check(unsafe { sys::cudaIpcGetEventHandle(&mut handle, self.raw) }, "cudaIpcGetEventHandle")?;
        Ok(handle)
    }

    /// Where the last record went: for records, and for the calls that must not hand CUDA a
    /// captured event.
    #[inline(always)]
    pub(crate) fn records(&self) -> &RecordState {
        &self.records
    }

    /// [`Error::CaptureMisuse`] for an event whose last record went into a capture.
    #[inline(always)]
    pub(crate) fn refuse_captured(&self) -> Result<()> {
        self.records.refuse_captured()
    }

    /// Whether the work before the last record has completed (also true if never recorded)
    /// ([`cudaEventQuery`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    ///
    /// An event last recorded inside a stream capture is a node of the capture's graph, not a
    /// marker of work: CUDA answers `cudaErrorCapturedEvent` and invalidates the capture (and
    /// a query racing the capture's end crashed libcuda). Such an event is refused, before
    /// CUDA sees the call, until it is recorded outside a capture again. Which records count:
    /// every record through this crate on a stream that was capturing (or, with another thread
    /// beginning a capture of this crate at the same moment, may have been); a record made
    /// through raw FFI is not seen.
    ///
    /// # Errors
    /// Errors of earlier asynchronous work. [`Error::CaptureMisuse`], before CUDA sees the call,
    /// for an event last recorded in a capture, and while this thread has a Global or
    /// ThreadLocal capture begun through this crate in progress, or any thread has a Global one
    /// ([the rules](crate::capture#calls-refused-during-a-capture)).
    #[inline]
    pub fn query(&self) -> Result<bool> {
        if race::tracking() {
            return self.query_seen_by_the_race_detector();
        }
        self.query_checked()
    }

    /// [`Event::query`] while the race detector is on: an answer of true is a host wait for
    /// the work before the last record.
    #[cold]
    #[inline(never)]
    fn query_seen_by_the_race_detector(&self) -> Result<bool> {
        let snapshot = self.race_snapshot();
        let done = self.query_checked()?;
        if done {
            race::host_saw(snapshot);
        }
        Ok(done)
    }

    /// [`Event::query`], without telling the race detector.
    #[inline(always)]
    fn query_checked(&self) -> Result<bool> {
        refuse_inside_host_fn()?;
        // While no capture may be in progress: checked and made as one fast call, which a
        // record of this event into a capture waits for (a capture of this crate before it
        // begins, a record into a foreign capture of the per-thread stream before it records),
        // and which sees the mark of any record into a capture made before it.
        // Only the mark's load and the driver's call inside (the answer is made after the
        // thread's flag is cleared).
        capture_mode::ignore_other_threads_captures();
        let query = driver::prepare_event_query(self.raw)?;
        let fast = uncaptured_calls::outside_captures(|| (!self.records.is_captured()).then(|| query.call()));
        match fast {
            Some(Some(code)) => return driver::EventQuery::answer(code),
            Some(None) => return Err(Error::CaptureMisuse(record_state::CAPTURED_EVENT)),
            None => {}
        }
        // While captures of this crate are in progress, none begins or ends during the query
        // (CUDA 13.0 crashed when a query raced the end of a Global capture), so a record into
        // a capture is either seen (refused) or made after it. The hold first, then the count:
        // a call counted never waits (a record into a capture waits for the count while it
        // holds the lock as a reader).
        let _transitions = crate::call::transitions::unsafe_call_hold()?;
        let _in_flight = self.records.marker_call()?;
        crate::ffi::driver::event_query(self.raw)
    }

    /// Blocks until the work before the last record has completed
    /// ([`cudaEventSynchronize`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    ///
    /// While no stream of the process may be capturing (no capture of this crate is in
    /// progress and no foreign stream handle was wrapped; a per-thread stream that another
    /// library captures on its own thread is the exception, and a record of this event there
    /// is still refused as below), and unless the thread runs inside
    /// [`with_thread_mode`](crate::capture::with_thread_mode), it waits in `cudaEventSynchronize`,
    /// as C++ does: an event made with [`EventFlags::blocking_sync`] blocks the thread until
    /// the device signals; any other busy-waits (CUDA's rule for events, whatever the device's
    /// schedule flag, which governs stream and device synchronizes; the effects benchmark
    /// shows both beside C++ under each flag). Meanwhile a record of this event into a
    /// capture, on any thread, is refused with [`Error::CaptureMisuse`]: CUDA would see a
    /// captured event synchronized, and the record cannot wait for this wait (the work waited
    /// for may wait for the recording thread).
    ///
    /// While a stream may be capturing, it polls [`Event::query`] instead: each poll is a
    /// counted query, which a record into a capture waits for. Between polls it yields the
    /// thread; an event made with [`EventFlags::blocking_sync`], or borrowed with unknown
    /// flags, yields for [`SYNCHRONIZE_HOT_WINDOW`], then naps from 20 µs, doubling to 200 µs,
    /// so a long wait uses little CPU and is seen at most 200 µs late.
    ///
    /// # Errors
    /// Errors of earlier asynchronous work; [`Error::CaptureMisuse`] as for [`Event::query`]
    /// (also when, while it polls, the event is recorded into a capture).
    pub fn synchronize(&self) -> Result<()> {
        sync_debug::before_sync("cudaEventSynchronize", SyncKind::EventSynchronize)?;
        if !live_captures::may_capture() {
            refuse_inside_host_fn()?;
            // A capture that another thread begins during the wait cannot forbid it (unless
            // this thread chose Global itself: then each poll is a fast call, which a begin
            // waits for).
            if capture_mode::other_threads_captures_ignored() {
                // Counted while in CUDA, unless the last record may be a captured one (the
                // polls below then refuse it, or see it recorded outside again).
                if let Some(_waiting) = self.records.wait_in_cuda() {
                    return self.synchronize_checked_earlier();
                }
            }
        }
        let mut nap = Nap::new(self.flags.blocking_sync != Some(false));
        while !self.query()? {
            nap.wait();
        }
        Ok(())
    }

    /// Blocks until the work before the last record has completed, in CUDA, after the caller
    /// made the checks of [`Event::synchronize`] itself (an event of the crate's own that no
    /// capture records, or one counted by [`RecordState::wait_in_cuda`]).
    pub(crate) fn synchronize_checked_earlier(&self) -> Result<()> {
        let snapshot = self.race_snapshot();
        // Complete already (a wait that comes late): one query, which costs CUDA less than its
        // synchronize (0.6 of it on an H200).
        if !driver::event_query(self.raw)? {
            driver::event_synchronize(self.raw)?;
        }
        race::host_saw(snapshot);
        Ok(())
    }

    /// What a wait for this event waits for (the work before its last record), read before
    /// the wait, for [`race::host_saw`] after it: later work on any stream comes after it.
    #[inline(always)]
    pub(crate) fn race_snapshot(&self) -> Option<race::Snapshot> {
        race::snapshot(|model| model.event_clock(self.raw as usize))
    }

    /// The GPU time from `start` to this event, or `None` while either has not completed
    /// ([`cudaEventElapsedTime`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for events of two devices (their clocks are not comparable;
    /// CUDA would answer `cudaErrorInvalidResourceHandle`); [`Error::TimingDisabled`] if either
    /// event was created without timing, [`Error::EventNotRecorded`] if either was never
    /// recorded (these two first); [`Error::CaptureMisuse`] if either was last recorded inside a
    /// stream capture; [`Error::NegativeElapsed`] (with CUDA's value) if this event completed before
    /// `start` (events recorded on two streams); CUDA's errors.
    pub fn elapsed(&self, start: &Event) -> Result<Option<Duration>> {
        same_device("elapsed time is measured between events of one device", start.device, self.device)?;
        // What the events are (made without timing, never recorded) before what they hold now.
        for event in [start, self] {
            if event.flags.timing == Some(false) {
                return Err(Error::TimingDisabled);
            }
        }
        for event in [start, self] {
            if event.is_owned() && event.records.is_never_recorded() {
                return Err(Error::EventNotRecorded);
            }
        }
        start.refuse_captured()?;
        self.refuse_captured()?;
        // Ask first, so that an incomplete event is an answer rather than an error CUDA
        // reports (and compute-sanitizer flags).
        if !self.query()? || !start.query()? {
            return Ok(None);
        }
        // The runtime call binds a context on a thread that has none: this device's primary.
        let _current = self.device.make_current()?;
        // As in `query`: the hold (checked again: a capture that began since the queries above
        // may forbid the call), then the counts, refused if either event was recorded into a
        // capture since.
        let _transitions = crate::call::transitions::unsafe_call_hold()?;
        let _in_flight = (start.records.marker_call()?, self.records.marker_call()?);
        let mut ms: f32 = 0.0;
        // SAFETY: `ms` is a valid out-pointer; both events are live.
        let code = unsafe { sys::cudaEventElapsedTime(&mut ms, start.raw, self.raw) };
        if !check_ready(code, "cudaEventElapsedTime")? {
            return Ok(None);
        }
        if ms < 0.0 {
            return Err(Error::NegativeElapsed { before: Duration::from_secs_f64(f64::from(-ms) / 1000.0) });
        }
        Ok(Some(Duration::from_secs_f64(f64::from(ms) / 1000.0)))
    }

    /// The raw handle, for FFI. It stays owned by this `Event`.
    pub fn as_raw(&self) -> sys::cudaEvent_t {
        self.raw
    }

    /// Gives up ownership: returns the handle without destroying it.
    pub fn into_raw(self) -> sys::cudaEvent_t {
        if self.ownership == EventOwnership::Owned {
            live::event_released();
        }
        ManuallyDrop::new(self).raw
    }

    /// The device this event belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The flags it was created with, as far as they can be known (see [`KnownEventFlags`]).
    pub fn flags(&self) -> KnownEventFlags {
        self.flags
    }

    /// Whether dropping this `Event` destroys the handle.
    pub fn is_owned(&self) -> bool {
        self.ownership != EventOwnership::Borrowed
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ownership == EventOwnership::Owned {
            live::event_released();
        }
        if self.ownership != EventOwnership::Borrowed {
            // A later event may get the handle: it has no record (a borrowed view's drop
            // destroys nothing).
            race::update(|model| model.forget_event(self.raw as usize));
            let raw = self.raw as usize;
            // An event whose last record went (or may have gone) into a capture is destroyed
            // where no capture transition of this crate overlaps it: a destroy racing the end of
            // that capture on another thread crashed libcuda (cuEventDestroy, CUDA 13.0; the API
            // fuzzer's join race, on two H200s and on an H100, 2026-11-27). The state is final:
            // the drop holds the only handle. Events of the crate's bookkeeping (a buffer's
            // ledger, under its lock) are never recorded into a capture, and take nothing.
            let captured = self.records.is_captured();
            // Errors cannot be reported from drop and leave nothing behind. Inside a host
            // function the destroy is made outside it.
            crate::ffi::inside_host_fn::call_outside_host_fn(move || {
                let _transitions = captured.then(crate::call::transitions::no_capture_transitions);
                // SAFETY: we own the handle and nothing uses it after this.
                let _ = unsafe { crate::ffi::driver::event_destroy(raw as sys::cudaEvent_t) };
            });
        }
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        (self.device, self.raw) == (other.device, other.raw)
    }
}

impl Eq for Event {}

impl Hash for Event {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.device, self.raw as usize).hash(state);
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("raw", &self.raw)
            .field("device", &self.device.ordinal())
            .field("ownership", &self.ownership)
            .field("flags", &self.flags)
            .finish()
    }
}

/// How long [`Event::synchronize`] of an event made with [`EventFlags::blocking_sync`] polls
/// without sleeping before it starts to nap.
pub const SYNCHRONIZE_HOT_WINDOW: Duration = Duration::from_micros(50);

/// The pause between two polls of [`Event::synchronize`].
struct Nap {
    /// `None`: yield between polls, never sleep.
    sleeping: Option<(std::time::Instant, Duration)>,
}

impl Nap {
    const FIRST: Duration = Duration::from_micros(20);
    const LONGEST: Duration = Duration::from_micros(200);

    fn new(may_sleep: bool) -> Nap {
        Nap { sleeping: may_sleep.then(|| (std::time::Instant::now(), Nap::FIRST)) }
    }

    fn wait(&mut self) {
        match &mut self.sleeping {
            Some((started, nap)) if started.elapsed() >= SYNCHRONIZE_HOT_WINDOW => {
                std::thread::sleep(*nap);
                *nap = (*nap * 2).min(Nap::LONGEST);
            }
            _ => std::thread::yield_now(),
        }
    }
}
