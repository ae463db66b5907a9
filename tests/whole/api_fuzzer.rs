//! API-sequence fuzzer: random programs over the whole public API of `cuda_stream`, each made
//! from a fixed seed, run on device 0.
//!
//! A program is 40 to 80 operations chosen by [`Rng`] from the seed: owned, built-in and borrowed
//! streams created, dropped and destroyed; events recorded, waited on, queried, synchronized and
//! timed; `wait_stream` and `fork`; tiny kernels (empty, tag, spins of at most 50 µs); `FnOnce`
//! host functions and host callbacks; completion futures (polled, or blocked on when no capture
//! is active); graph captures in all three modes, with repeatable host functions, forks and joins,
//! ended or dropped; graphs instantiated, uploaded, launched on any stream and dropped in any order
//! with launches pending; pool leases up to exhaustion; nested `as_current`; and bursts of 2 to 4
//! threads doing random operations on the program's shared streams. And actors the crate does not
//! control:
//! * events recorded inside a capture, then queried, synchronized, timed and awaited (polled, or
//!   kept pending), on the capturing thread or a spawned one, and by threads racing the capture's
//!   end (one of them perhaps recording the event again outside the capture meanwhile); outside
//!   a capture, such an event checked, recorded outside again, and used;
//! * raw captures: a program stream wrapped with `BorrowedStream::borrow_raw`, captured through
//!   raw FFI (`cudaStreamBeginCapture`, any mode; Relaxed when a spawned thread checks events
//!   meanwhile, since a Global capture forbids its queries), crate operations on it and on other
//!   streams from the capturing thread only, then the raw `cudaStreamEndCapture` (perhaps while
//!   that thread checks the events recorded in it), and `cudaGraphDestroy` of the graph;
//! * a non-primary context of cudarc's (`CudaContext::new_non_primary`) made current, crate
//!   operations meanwhile (streams, events, pool leases, completions, `wait_stream`, captures,
//!   kernels, host functions), the context destroyed, then everything made meanwhile used and
//!   dropped. Where no such context can be made, the actor is skipped for the program.
//!
//! What must hold, checked for every program:
//! * every call returns `Ok` or a typed [`Error`]: nothing panics, crashes or hangs, no call made
//!   outside a host function says [`Error::InsideHostFn`], and no error is sticky (no kernel here
//!   faults);
//! * no host closure runs after it was dropped: each owns a drop flag, and a run that finds its
//!   flag already set is counted as a violation (never a panic inside the host function);
//! * a refused host function is dropped at once and never runs; a `FnOnce` host function on a
//!   capturing stream, and a capture's host function on a stream outside the capture, are refused
//!   with [`Error::CaptureMisuse`]; captured host functions do not run during the capture;
//! * inside host functions the crate refuses CUDA calls ([`Error::InsideHostFn`]);
//! * what the crate decides without CUDA: priorities outside the range, `ipc_handle` without the
//!   interprocess flag, `elapsed` without timing or records, pool exhaustion, the per-thread
//!   stream of one thread used on another, the identity of built-in and borrowed streams, the
//!   current stream inside nested `as_current`;
//! * an event whose last record went into a capture (this crate's or a raw one) is refused with
//!   [`Error::CaptureMisuse`] by `query`, `synchronize` and `elapsed` (either end), and its
//!   `completion` resolves at once with it; recorded outside a capture again, it works normally
//!   (never `CaptureMisuse` while no capture is in progress). The program tracks where each
//!   event's last record went, so this is exact wherever no other thread may record it; racing
//!   such a record, the calls give `Ok` or `CaptureMisuse`. A capture that only such refused
//!   calls touched is still active afterwards, and ends `Ok`, also when they race its end (the
//!   end gives `Ok` or a typed error when a record races it too). Checked while no completion
//!   of the program is pending: the reactor's query of an event that is being recorded into a
//!   capture invalidates it, a limit the crate documents;
//! * during a raw capture of a `BorrowedStream`: `is_non_blocking` and `id` are refused with
//!   `CaptureMisuse`; `priority`, `device`, `capture_status` (`Active`) and `capture_info`
//!   succeed; `FnOnce` host functions on it are refused (dropped, never run); the owning
//!   `Stream` knows its flags, priority and id; the capture is still active after every
//!   operation, and the raw end returns `cudaSuccess`;
//! * what the crate makes while a non-primary context is current is in the device's primary
//!   context: all of it works, without an error, after that context is destroyed, and drops
//!   cleanly; a stream of that context is refused with [`Error::ForeignContext`] by
//!   `borrow_raw`, `borrow_raw_on` and `from_cudarc` (its default stream too), and `to_cudarc`
//!   refuses to lend a stream to that context;
//! * afterwards every closure is freed, every completion has resolved, and the live counts of
//!   streams, events and host closures are back where they started.
//!
//! Knobs:
//! * `CUDA_STREAM_FUZZ_PROGRAMS`: how many programs; default 1,000, or 50 under
//!   compute-sanitizer (`CUDA_STREAM_SANITIZER`).
//! * `CUDA_STREAM_FUZZ_FIRST`: the first seed (default 0): seeds `FIRST..FIRST + N`.
//! * `CUDA_STREAM_FUZZ_SEED`: run only the program of this seed (a failure names its seed).
//! * `CUDA_STREAM_FUZZ_TRACE=1`: print every operation, every call's outcome and the live counts
//!   (to stderr, uncaptured): for a failing seed.
//!
//! A watchdog aborts the process, naming the seed and the operation, if one operation of a
//! program has not returned after 60 s (600 s under compute-sanitizer): a hang is a failure too.

use cuda_stream::{
    BorrowedStream, Builtin, BuiltinStream, Capture, CaptureStatus, Completion, CudaCode, Device, Error, Event,
    EventFlags, Graph, GraphExec, NULL_STREAM_IS_PER_THREAD, Ownership, Priority, PriorityRange, Result, Stream,
    StreamLease, StreamOptions, StreamPool, StreamRef, capture, check, live_events, live_host_fns, live_streams, sys,
};
use cuda_stream_tests::{Current as CurrentStream, HeldStream, Rng, TagLog, block_on, gpu_or_skip, poll_until, scaled};
use cudarc::driver::CudaContext;
use std::any::Any;
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

const PROGRAMS_VAR: &str = "CUDA_STREAM_FUZZ_PROGRAMS";
const SEED_VAR: &str = "CUDA_STREAM_FUZZ_SEED";
const FIRST_VAR: &str = "CUDA_STREAM_FUZZ_FIRST";
const TRACE_VAR: &str = "CUDA_STREAM_FUZZ_TRACE";

/// Bounds on what one program holds at a time.
const MAX_STREAMS: usize = 16;
const MAX_EVENTS: usize = 12;
const MAX_GRAPHS: usize = 6;
const MAX_EXECS: usize = 6;

/// How long host closures (graph closures are freed by CUDA on a thread of its own) may take to
/// be freed once a program's work is done.
const SETTLE: Duration = Duration::from_secs(5);

/// Tests that count live handles and closures run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// Totals over all programs (the spawned threads of a program add to them too).
static CALLS: AtomicU64 = AtomicU64::new(0);
static OKS: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static HOST_RUNS: AtomicU64 = AtomicU64::new(0);
/// Host closures that ran after their drop flag was set.
static VIOLATIONS: AtomicU64 = AtomicU64::new(0);
/// Crate calls made inside a host function that were not refused with `InsideHostFn`.
static REFUSALS_MISSED: AtomicU64 = AtomicU64::new(0);
/// Host callbacks that were handed an error status (none is expected; counted, not asserted).
static CALLBACK_ERRORS: AtomicU64 = AtomicU64::new(0);
static ERROR_KINDS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
static TAGS: AtomicU32 = AtomicU32::new(0);

// ---------------------------------------------------------------------------------------------
// Drop flags
// ---------------------------------------------------------------------------------------------

/// The closure has run (at least once).
const RAN: u8 = 1;
/// The closure has been dropped.
const DROPPED: u8 = 2;

/// Owned by one host closure: records its runs, and its drop. The state stays readable through
/// the `Arc` after the closure is gone.
struct Token(Arc<AtomicU8>);

impl Token {
    fn new() -> (Token, Arc<AtomicU8>) {
        let state = Arc::new(AtomicU8::new(0));
        (Token(Arc::clone(&state)), state)
    }

    /// Called by the closure each time it runs, on CUDA's host thread: atomics only, never a
    /// panic, never a wait.
    fn run(&self) {
        if self.0.fetch_or(RAN, Ordering::SeqCst) & DROPPED != 0 {
            VIOLATIONS.fetch_add(1, Ordering::SeqCst);
        }
        HOST_RUNS.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.0.fetch_or(DROPPED, Ordering::SeqCst);
    }
}

/// Inside a host function: a crate call that would reach CUDA must be refused before it does.
fn probe_refusal() {
    if !matches!(Device::count(), Err(Error::InsideHostFn)) {
        REFUSALS_MISSED.fetch_add(1, Ordering::SeqCst);
    }
}

/// A refused closure was dropped before the call returned, and never ran.
fn expect_dropped_unrun(state: &AtomicU8, what: &str) {
    let state = state.load(Ordering::SeqCst);
    assert_eq!(state, DROPPED, "{what}: a refused closure must be dropped at once and never run (state {state:#04b})");
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// Whether to print every operation and call (`CUDA_STREAM_FUZZ_TRACE=1`).
fn tracing() -> bool {
    static TRACING: OnceLock<bool> = OnceLock::new();
    *TRACING.get_or_init(|| std::env::var(TRACE_VAR).is_ok_and(|value| value == "1"))
}

/// Counts one call and checks what must hold of every result; returns whether it was `Ok`.
fn note<T>(what: &str, result: &Result<T>) -> bool {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if tracing() {
        let outcome = result.as_ref().map_or_else(kind_of, |_| "Ok".to_string());
        let _ = writeln!(std::io::stderr(), "      {what}: {outcome}");
    }
    match result {
        Ok(_) => {
            OKS.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(error) => {
            ERRORS.fetch_add(1, Ordering::Relaxed);
            assert!(
                !matches!(error, Error::InsideHostFn),
                "{what}: InsideHostFn from a call made outside any host function: {error}"
            );
            assert!(!error.is_sticky(), "{what}: a sticky error with no faulting kernel anywhere: {error}");
            *ERROR_KINDS.lock().unwrap_or_else(PoisonError::into_inner).entry(kind_of(error)).or_default() += 1;
            false
        }
    }
}

/// Counts a call that cannot fail.
fn note_infallible() {
    CALLS.fetch_add(1, Ordering::Relaxed);
    OKS.fetch_add(1, Ordering::Relaxed);
}

fn skip() {
    SKIPPED.fetch_add(1, Ordering::Relaxed);
}

/// A short name for an error: the CUDA API and code, or the variant.
fn kind_of(error: &Error) -> String {
    match error {
        Error::Cuda { api, code } => format!("{api}: {}", code.name()),
        other => format!("{other:?}").split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default().to_string(),
    }
}

/// The per-thread stream of one thread is refused on every other.
fn expect_wrong_thread<T: std::fmt::Debug>(bound: bool, what: &str, result: &Result<T>) {
    if bound {
        assert!(
            matches!(result, Err(Error::WrongThread)),
            "{what}: the main thread's per-thread stream used on another thread must be WrongThread: {result:?}"
        );
    }
}

/// Prints one line of the trace (`CUDA_STREAM_FUZZ_TRACE=1`) that is no call's outcome.
fn trace(line: std::fmt::Arguments<'_>) {
    if tracing() {
        let _ = writeln!(std::io::stderr(), "      {line}");
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string())
}

// ---------------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------------

fn builtin_of(stream: &StreamRef) -> Option<Builtin> {
    match stream.ownership() {
        Ownership::Builtin(builtin) => Some(builtin),
        _ => None,
    }
}

/// The legacy stream: never part of a capture.
fn is_legacy(stream: &StreamRef) -> bool {
    match builtin_of(stream) {
        Some(Builtin::Legacy) => true,
        Some(Builtin::Null) => !NULL_STREAM_IS_PER_THREAD,
        _ => false,
    }
}

/// A per-thread stream: usable only on the thread that made it.
fn is_thread_bound(stream: &StreamRef) -> bool {
    match builtin_of(stream) {
        Some(Builtin::PerThread) => true,
        Some(Builtin::Null) => NULL_STREAM_IS_PER_THREAD,
        _ => false,
    }
}

/// A tiny kernel: empty, a tag of at most 20 µs, or a spin of at most 50 µs.
fn kernel(stream: &StreamRef, log: &TagLog, kind: u8, micros: u8) -> Result<()> {
    match kind % 3 {
        0 => cuda_stream_tests::empty(stream),
        1 => {
            let tag = TAGS.fetch_add(1, Ordering::Relaxed);
            cuda_stream_tests::tag(stream, log, tag, Duration::from_micros(u64::from(micros % 21)))
        }
        _ => cuda_stream_tests::spin(stream, Duration::from_micros(u64::from(micros % 51))),
    }
}

/// Enqueues a `FnOnce` host function (or a host callback) holding a drop flag, and checks what
/// must hold of the result. Returns the result and the flag.
fn once_host_fn(stream: &StreamRef, probe: bool, callback: bool) -> (Result<()>, Arc<AtomicU8>) {
    let status = stream.capture_status();
    note("StreamRef::capture_status", &status);
    let capturing = matches!(status, Ok(CaptureStatus::Active | CaptureStatus::Invalidated));
    let (token, state) = Token::new();
    let (what, result) = if callback {
        let result = stream.launch_host_callback(move |status| {
            token.run();
            if status.is_err() {
                CALLBACK_ERRORS.fetch_add(1, Ordering::Relaxed);
            }
            if probe {
                probe_refusal();
            }
        });
        ("StreamRef::launch_host_callback", result)
    } else {
        let result = stream.launch_host_fn(move || {
            token.run();
            if probe {
                probe_refusal();
            }
        });
        ("StreamRef::launch_host_fn", result)
    };
    note(what, &result);
    if capturing {
        assert!(
            matches!(result, Err(Error::CaptureMisuse(_))),
            "{what} on a capturing stream must be refused with CaptureMisuse: {result:?}"
        );
    }
    if result.is_err() {
        expect_dropped_unrun(&state, what);
    }
    (result, state)
}

/// Runs `innermost` inside `as_current` of each stream in turn, checking at every level that
/// `with_current` sees the innermost stream, before and after the levels inside it.
fn nest(device: Device, streams: &[&StreamRef], innermost: &mut dyn FnMut()) {
    let Some((first, rest)) = streams.split_first() else {
        innermost();
        return;
    };
    first.as_current(|| {
        assert!(StreamRef::with_current(device, |current| current == *first), "as_current makes the stream current");
        nest(device, rest, innermost);
        assert!(
            StreamRef::with_current(device, |current| current == *first),
            "the outer stream is current again after an inner as_current returned"
        );
    });
}

/// Nothing is current on this thread: `with_current` sees the null stream.
fn expect_nothing_current(device: Device) {
    assert!(
        StreamRef::with_current(device, |current| *current == *BuiltinStream::null(device)),
        "with no as_current running, the current stream is the null stream"
    );
}

// ---------------------------------------------------------------------------------------------
// Captures
// ---------------------------------------------------------------------------------------------

/// A capture of any mode.
enum AnyCapture<'a> {
    Global(Capture<'a, capture::Global>),
    ThreadLocal(Capture<'a, capture::ThreadLocal>),
    Relaxed(Capture<'a, capture::Relaxed>),
}

impl AnyCapture<'_> {
    fn begin(stream: &StreamRef, mode: u8) -> Result<AnyCapture<'_>> {
        match mode % 3 {
            0 => stream.begin_capture(capture::Global).map(AnyCapture::Global),
            1 => stream.begin_capture(capture::ThreadLocal).map(AnyCapture::ThreadLocal),
            _ => stream.begin_capture(capture::Relaxed).map(AnyCapture::Relaxed),
        }
    }

    fn id(&self) -> u64 {
        match self {
            AnyCapture::Global(capture) => capture.id(),
            AnyCapture::ThreadLocal(capture) => capture.id(),
            AnyCapture::Relaxed(capture) => capture.id(),
        }
    }

    fn launch_host_fn<F: Fn() + Send + Sync + 'static>(&mut self, stream: &StreamRef, f: F) -> Result<()> {
        match self {
            AnyCapture::Global(capture) => capture.launch_host_fn(stream, f),
            AnyCapture::ThreadLocal(capture) => capture.launch_host_fn(stream, f),
            AnyCapture::Relaxed(capture) => capture.launch_host_fn(stream, f),
        }
    }

    fn end(self) -> Result<Graph> {
        match self {
            AnyCapture::Global(capture) => capture.end(),
            AnyCapture::ThreadLocal(capture) => capture.end(),
            AnyCapture::Relaxed(capture) => capture.end(),
        }
    }
}

/// The capture in progress: at most one at a time, of an owned non-blocking stream, always on
/// the program's main thread.
struct Active<'a> {
    capture: AnyCapture<'a>,
    origin: &'a Stream,
    /// Which capture of the program this is (for the events recorded during it).
    generation: u64,
    /// Refused calls on events recorded in it were made: if it is still active when it ends, it
    /// must end `Ok`.
    checked: bool,
    /// Threads that call events recorded in it while it ends.
    racers: Vec<Racer>,
}

/// Adds a repeatable host function to the capture on `target`, and checks what must hold.
fn capture_host_fn(capture: &mut AnyCapture<'_>, target: &StreamRef, probe: bool) -> Arc<AtomicU8> {
    // Certainly outside the capture: the legacy stream, or a stream that reports no capture.
    let outside = is_legacy(target) || {
        let info = target.capture_info();
        note("StreamRef::capture_info", &info);
        matches!(info, Ok(info) if info.status == CaptureStatus::None)
    };
    let (token, state) = Token::new();
    let result = capture.launch_host_fn(target, move || {
        token.run();
        if probe {
            probe_refusal();
        }
    });
    let what = "Capture::launch_host_fn";
    note(what, &result);
    if outside {
        assert!(
            matches!(result, Err(Error::CaptureMisuse(_))),
            "{what} on a stream outside the capture must be refused with CaptureMisuse: {result:?}"
        );
    }
    if matches!(result, Err(Error::CaptureMisuse(_))) {
        expect_dropped_unrun(&state, what);
    }
    assert_eq!(state.load(Ordering::SeqCst) & RAN, 0, "{what}: a captured host function ran during the capture");
    state
}

// ---------------------------------------------------------------------------------------------
// Events recorded in captures
// ---------------------------------------------------------------------------------------------

/// What the program knows of an event, for the checks of the calls on it.
#[derive(Debug, Clone, Copy)]
struct Known {
    timing: bool,
    /// Recorded successfully at least once (the crate's own rule for `elapsed`).
    recorded: bool,
    /// Whether its last record went into a capture (`Some(false)` also when never recorded);
    /// `None` when unknown: another thread may record it meanwhile, or a record failed in a way
    /// that may have come after the record was made.
    captured: Option<bool>,
}

/// An event and what the program knows of it.
#[derive(Clone, Copy)]
struct Seen<'a> {
    event: &'a Arc<Event>,
    known: Known,
}

/// What is in progress while calls on events are made, and so what they may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum During {
    /// No capture at all: an event last recorded outside one works normally.
    Nothing,
    /// A capture this crate counts (or a Relaxed raw one), here or on another thread: the crate
    /// refuses what would break it, and queries that reach CUDA are harmless.
    Capture,
    /// A raw Global or ThreadLocal capture of this thread, which the crate does not count: a
    /// query that reached CUDA would invalidate it, so only calls on captured events (refused
    /// before CUDA sees them) are made.
    StrictRawCapture,
}

/// Whether a record on `stream` now goes into a capture, as the crate decides it: the stream
/// reports a capture (active or invalidated); never the legacy stream (whose status is not
/// read: during a Global capture the read itself would fail). `None` when unreadable.
fn records_into_capture(stream: &StreamRef) -> Option<bool> {
    if is_legacy(stream) {
        return Some(false);
    }
    let status = stream.capture_status();
    note("StreamRef::capture_status", &status);
    status.ok().map(|status| status != CaptureStatus::None)
}

/// Whether `stream` is still in the active capture `id` (not invalidated, not ended).
fn capture_intact(stream: &StreamRef, id: u64) -> bool {
    let info = stream.capture_info();
    note("StreamRef::capture_info", &info);
    matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == id)
}

/// Checks a query, synchronize or completion of an event whose last record the program knows as
/// `captured`: refused with `CaptureMisuse` while that record is a captured one; never
/// `CaptureMisuse` once recorded outside, while no capture is in progress (`during`); `Ok` or
/// `CaptureMisuse` when unknown (another thread may record it meanwhile).
fn expect_event_call<T: std::fmt::Debug>(what: &str, captured: Option<bool>, during: During, result: &Result<T>) {
    let refused = matches!(result, Err(Error::CaptureMisuse(_)));
    match captured {
        Some(true) => {
            assert!(
                refused,
                "{what}: an event last recorded in a capture must be refused with CaptureMisuse: {result:?}"
            )
        }
        Some(false) if during == During::Nothing => {
            assert!(!refused, "{what}: an event last recorded outside any capture works normally: {result:?}")
        }
        Some(false) => {}
        None => assert!(
            result.is_ok() || refused,
            "{what}: an event recorded in a capture, perhaps recorded again meanwhile, gives Ok or CaptureMisuse: \
             {result:?}"
        ),
    }
}

/// Checks `end.elapsed(start)` against what the program knows of the two events.
fn expect_elapsed(what: &str, end: Known, start: Known, during: During, result: &Result<Option<Duration>>) {
    if !end.timing || !start.timing {
        assert!(
            matches!(result, Err(Error::TimingDisabled | Error::EventNotRecorded)),
            "{what}: elapsed with an event made without timing must be refused: {result:?}"
        );
    } else if end.captured.is_none() || start.captured.is_none() {
        assert!(
            !matches!(result, Err(Error::Cuda { .. })),
            "{what}: elapsed with an event perhaps recorded again meanwhile gives a typed outcome: {result:?}"
        );
    } else if !end.recorded || !start.recorded {
        assert!(
            matches!(result, Err(Error::EventNotRecorded)),
            "{what}: elapsed with an event never recorded must be EventNotRecorded: {result:?}"
        );
    } else if end.captured == Some(true) || start.captured == Some(true) {
        assert!(
            matches!(result, Err(Error::CaptureMisuse(_))),
            "{what}: elapsed with an event last recorded in a capture (end {:?}, start {:?}) must be refused with \
             CaptureMisuse: {result:?}",
            end.captured,
            start.captured,
        );
    } else if during == During::Nothing {
        assert!(
            !matches!(result, Err(Error::CaptureMisuse(_))),
            "{what}: elapsed between events last recorded outside any capture works normally: {result:?}"
        );
    }
}

/// `count` calls picked by `rng` on `event`, with `other` as the other end of `elapsed`:
/// `query`, `synchronize`, `elapsed` both ways, `completion` blocked on or kept pending, each
/// checked against what the program knows. Every call is safe to block on: an event is either
/// captured (refused at once) or marks real work. Returns the completions kept pending.
fn event_calls(
    what: &str,
    rng: &mut Rng,
    count: usize,
    event: Seen<'_>,
    other: Seen<'_>,
    during: During,
) -> Vec<Completion> {
    // Inside a raw Global or ThreadLocal capture of this thread only a captured event is used,
    // and only as the end of `elapsed` (whose end is queried first: refused).
    let real_queries = during != During::StrictRawCapture;
    let captured = event.known.captured;
    let mut kept = Vec::new();
    for _ in 0..count {
        match rng.below(6) {
            0 => {
                let result = event.event.query();
                note(what, &result);
                expect_event_call(&format!("{what}: Event::query"), captured, during, &result);
            }
            1 => {
                let result = event.event.synchronize();
                note(what, &result);
                expect_event_call(&format!("{what}: Event::synchronize"), captured, during, &result);
            }
            2 => {
                let result = event.event.elapsed(other.event);
                note(what, &result);
                expect_elapsed(&format!("{what}: Event::elapsed"), event.known, other.known, during, &result);
            }
            3 if real_queries => {
                let result = other.event.elapsed(event.event);
                note(what, &result);
                expect_elapsed(
                    &format!("{what}: Event::elapsed (as start)"),
                    other.known,
                    event.known,
                    during,
                    &result,
                );
            }
            3 | 4 => {
                let result = block_on(event.event.completion());
                note(what, &result);
                expect_event_call(&format!("{what}: Event::completion"), captured, during, &result);
            }
            _ => {
                let completion = event.event.completion();
                note_infallible();
                if captured == Some(true) {
                    assert!(completion.is_complete(), "{what}: a captured event's completion resolves at once");
                }
                kept.push(completion);
            }
        }
    }
    kept
}

/// Runs `f` here, or on a spawned thread when `spawn` (a failed check there fails the program).
fn here_or_spawned<T: Send>(spawn: bool, f: impl FnOnce() -> T + Send) -> T {
    if !spawn {
        return f();
    }
    std::thread::scope(|scope| scope.spawn(f).join())
        .unwrap_or_else(|payload| panic!("a spawned thread failed: {}", panic_message(payload.as_ref())))
}

/// A thread that calls an event recorded in the capture while the capture ends.
struct Racer {
    event: Arc<Event>,
    /// The other end of its `elapsed` calls.
    other: Arc<Event>,
    /// Whether it records the event once, outside the capture, meanwhile.
    rerecord: bool,
    seed: u64,
}

/// A racer's thread: waits until the capture's end is about to be made, then makes 2 to 7
/// calls on its event, one of them perhaps a record outside the capture on `rerecord_on`.
/// Returns the completions it kept and the record's result.
fn race(
    racer: &Racer,
    mine: Known,
    other: Known,
    rerecord_on: Option<&StreamRef>,
    barrier: &Barrier,
) -> (Vec<Completion>, Option<Result<()>>) {
    barrier.wait();
    let mut rng = Rng::new(racer.seed);
    let steps = 2 + rng.below(6);
    let rerecord_at = rerecord_on.map(|_| rng.below(steps));
    let mut kept = Vec::new();
    let mut rerecorded = None;
    for step in 0..steps {
        match rerecord_on {
            Some(stream) if rerecord_at == Some(step) => {
                let result = stream.record(&racer.event);
                note("racer: StreamRef::record (outside the capture)", &result);
                rerecorded = Some(result);
            }
            _ => {
                let (event, other) =
                    (Seen { event: &racer.event, known: mine }, Seen { event: &racer.other, known: other });
                kept.extend(event_calls("racer", &mut rng, 1, event, other, During::Capture));
            }
        }
    }
    (kept, rerecorded)
}

/// Ends `capture`, or drops it when `discard`; the end's result.
fn finish_capture(capture: AnyCapture<'_>, discard: bool) -> Option<Result<Graph>> {
    if discard {
        drop(capture);
        note_infallible();
        None
    } else {
        let graph = capture.end();
        note("Capture::end", &graph);
        Some(graph)
    }
}

/// The raw FFI value of a capture mode picked by `mode`.
fn raw_mode(mode: u8) -> sys::cudaStreamCaptureMode {
    match mode % 3 {
        0 => sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal,
        1 => sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
        _ => sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed,
    }
}

/// A stream of a non-primary context must be refused with `ForeignContext`.
fn expect_foreign_context<T>(what: &str, device: Device, result: &Result<T>) {
    assert!(
        matches!(result, Err(Error::ForeignContext { device: found }) if *found == device.ordinal()),
        "{what} of a stream of a non-primary context must be ForeignContext: {:?}",
        result.as_ref().err()
    );
}

/// Anything, boxed only to be dropped in a random order among other things.
trait Held {}

impl<T> Held for T {}

/// What the non-primary context's actor made while that context was current.
#[derive(Default)]
struct Made<'p> {
    streams: Vec<Stream>,
    events: Vec<Arc<Event>>,
    leases: Vec<StreamLease<'p>>,
    graphs: Vec<Graph>,
    execs: Vec<GraphExec>,
    completions: Vec<Completion>,
}

impl Made<'_> {
    /// The streams and leases made, for operations on them.
    fn targets(&self) -> Vec<&StreamRef> {
        self.streams.iter().map(|stream| &**stream).chain(self.leases.iter().map(|lease| &**lease)).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Programs
// ---------------------------------------------------------------------------------------------

/// One operation; the `u32` picks choose operands modulo what exists when it runs. The actors the
/// crate does not control: [`World::captured_event`], [`World::raw_capture`] and
/// [`World::non_primary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    NewStream { kind: u8, priority: u32 },
    DropStream { s: u32 },
    DestroyStream { s: u32 },
    TakeBuiltin { which: u8 },
    Borrowed { s: u32, action: u8, e: u32 },
    StreamInfo { s: u32 },
    NewEvent { flags: u8 },
    DropEvent { e: u32 },
    Record { s: u32, e: u32 },
    RecordEvent { s: u32 },
    WaitEvent { s: u32, e: u32 },
    WaitStream { s: u32, other: u32 },
    Fork { s: u32 },
    Query { s: u32 },
    Synchronize { s: u32 },
    EventUse { e: u32, action: u8 },
    Elapsed { end: u32, start: u32 },
    HostFn { s: u32, probe: bool },
    HostCallback { s: u32, probe: bool },
    Completion { s: u32, block: bool },
    Kernel { s: u32, kind: u8, micros: u8 },
    BeginCapture { mode: u8, fresh: bool, s: u32 },
    CaptureHostFn { s: u32, on_origin: bool, probe: bool },
    EndCapture { discard: bool },
    Instantiate { g: u32 },
    Launch { x: u32, s: u32, times: u8, upload: bool },
    DropGraph { g: u32 },
    DropExec { x: u32 },
    Pool { s: u32, action: u8 },
    Current { picks: [u32; 3], depth: u8, action: u8 },
    Threads { count: u8, seed: u64 },
    CapturedEvent { e: u32, action: u8, seed: u64 },
    RawCapture { s: u32, mode: u8, fresh: bool, seed: u64 },
    NonPrimaryContext { seed: u64 },
    DeviceSync,
}

/// How many kinds of [`Op`] there are.
const OP_KINDS: usize = 35;

/// For each kind in the order of [`make_op`]: its weight outside a capture, and inside one.
const WEIGHTS: [(usize, usize); OP_KINDS] = [
    (6, 2), // NewStream
    (3, 1), // DropStream
    (2, 1), // DestroyStream
    (2, 1), // TakeBuiltin
    (3, 3), // Borrowed
    (2, 2), // StreamInfo
    (4, 2), // NewEvent
    (2, 1), // DropEvent
    (5, 5), // Record
    (2, 2), // RecordEvent
    (4, 4), // WaitEvent
    (5, 6), // WaitStream
    (2, 4), // Fork
    (3, 1), // Query
    (3, 1), // Synchronize
    (4, 2), // EventUse
    (2, 1), // Elapsed
    (6, 3), // HostFn
    (3, 2), // HostCallback
    (3, 2), // Completion
    (8, 8), // Kernel
    (5, 1), // BeginCapture (inside a capture: an attempt to nest one)
    (0, 6), // CaptureHostFn
    (1, 1), // EndCapture
    (4, 1), // Instantiate
    (5, 2), // Launch
    (2, 1), // DropGraph
    (2, 1), // DropExec
    (4, 2), // Pool
    (3, 2), // Current
    (2, 0), // Threads (never during a capture)
    (2, 5), // CapturedEvent (outside a capture: one recorded in a capture, recorded outside again)
    (2, 0), // RawCapture (never during a capture of the crate's)
    (1, 0), // NonPrimaryContext (never during a capture)
    (1, 0), // DeviceSync (never during a capture)
];

fn pick(rng: &mut Rng) -> u32 {
    rng.next_u64() as u32
}

fn byte(rng: &mut Rng) -> u8 {
    rng.next_u64() as u8
}

fn coin(rng: &mut Rng) -> bool {
    rng.below(2) == 0
}

fn make_op(kind: usize, rng: &mut Rng) -> Op {
    match kind {
        0 => Op::NewStream { kind: byte(rng), priority: pick(rng) },
        1 => Op::DropStream { s: pick(rng) },
        2 => Op::DestroyStream { s: pick(rng) },
        3 => Op::TakeBuiltin { which: byte(rng) },
        4 => Op::Borrowed { s: pick(rng), action: byte(rng), e: pick(rng) },
        5 => Op::StreamInfo { s: pick(rng) },
        6 => Op::NewEvent { flags: byte(rng) },
        7 => Op::DropEvent { e: pick(rng) },
        8 => Op::Record { s: pick(rng), e: pick(rng) },
        9 => Op::RecordEvent { s: pick(rng) },
        10 => Op::WaitEvent { s: pick(rng), e: pick(rng) },
        11 => Op::WaitStream { s: pick(rng), other: pick(rng) },
        12 => Op::Fork { s: pick(rng) },
        13 => Op::Query { s: pick(rng) },
        14 => Op::Synchronize { s: pick(rng) },
        15 => Op::EventUse { e: pick(rng), action: byte(rng) },
        16 => Op::Elapsed { end: pick(rng), start: pick(rng) },
        17 => Op::HostFn { s: pick(rng), probe: rng.below(4) == 0 },
        18 => Op::HostCallback { s: pick(rng), probe: rng.below(4) == 0 },
        19 => Op::Completion { s: pick(rng), block: coin(rng) },
        20 => Op::Kernel { s: pick(rng), kind: byte(rng), micros: byte(rng) },
        21 => Op::BeginCapture { mode: byte(rng), fresh: coin(rng), s: pick(rng) },
        22 => Op::CaptureHostFn { s: pick(rng), on_origin: coin(rng), probe: rng.below(4) == 0 },
        23 => Op::EndCapture { discard: rng.below(4) == 0 },
        24 => Op::Instantiate { g: pick(rng) },
        25 => Op::Launch { x: pick(rng), s: pick(rng), times: byte(rng), upload: rng.below(3) == 0 },
        26 => Op::DropGraph { g: pick(rng) },
        27 => Op::DropExec { x: pick(rng) },
        28 => Op::Pool { s: pick(rng), action: byte(rng) },
        29 => Op::Current { picks: [pick(rng), pick(rng), pick(rng)], depth: byte(rng), action: byte(rng) },
        30 => Op::Threads { count: byte(rng), seed: rng.next_u64() },
        31 => Op::CapturedEvent { e: pick(rng), action: byte(rng), seed: rng.next_u64() },
        32 => Op::RawCapture { s: pick(rng), mode: byte(rng), fresh: rng.below(4) == 0, seed: rng.next_u64() },
        33 => Op::NonPrimaryContext { seed: rng.next_u64() },
        _ => Op::DeviceSync,
    }
}

fn random_op(rng: &mut Rng, capturing: bool) -> Op {
    let weight = |(outside, inside): (usize, usize)| if capturing { inside } else { outside };
    let mut roll = rng.below(WEIGHTS.iter().copied().map(weight).sum());
    for (kind, weights) in WEIGHTS.iter().copied().enumerate() {
        if roll < weight(weights) {
            return make_op(kind, rng);
        }
        roll -= weight(weights);
    }
    unreachable!("the roll is below the total weight")
}

/// The program of `seed`: 40 to 80 operations; a capture begun at the top level is ended after
/// 1 to 15 operations (or by a random `EndCapture`, or by the end of the program).
fn generate(seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let len = 40 + rng.below(41);
    let mut ops = Vec::with_capacity(len);
    let mut capture_left: Option<usize> = None;
    while ops.len() < len {
        if capture_left == Some(0) {
            ops.push(Op::EndCapture { discard: rng.below(4) == 0 });
            capture_left = None;
            continue;
        }
        let op = random_op(&mut rng, capture_left.is_some());
        capture_left = match op {
            Op::BeginCapture { .. } if capture_left.is_none() => Some(1 + rng.below(15)),
            Op::EndCapture { .. } => None,
            _ => capture_left.map(|left| left - 1),
        };
        ops.push(op);
    }
    ops
}

/// A program being run: for the failure messages.
struct Run {
    seed: u64,
    ops: Vec<Op>,
}

/// Runs step `at` of `run`; a panic in it (the crate's, or a failed check) fails the test with
/// the seed, the step and the operation.
fn guarded(run: &Run, at: usize, f: impl FnOnce()) {
    progress(run.seed, at);
    if tracing() {
        let op = run.ops.get(at).map_or_else(|| "end".to_string(), |op| format!("{op:?}"));
        let _ = writeln!(std::io::stderr(), "seed {} op #{at} {op}", run.seed);
    }
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(f));
    if tracing() {
        let (closures, streams, events) = (live_host_fns(), live_streams(), live_events());
        let _ = writeln!(std::io::stderr(), "    live: {closures} host closures, {streams} streams, {events} events");
    }
    if let Err(payload) = outcome {
        let step = match run.ops.get(at) {
            Some(op) => format!("op #{at} of {} ({op:?})", run.ops.len()),
            None => "the end of the program (closing its capture, cleanup and leak checks)".to_string(),
        };
        panic!(
            "api fuzzer: seed {} failed at {step}: {}\n  run this program alone with {SEED_VAR}={}",
            run.seed,
            panic_message(payload.as_ref()),
            run.seed
        );
    }
}

struct Slot {
    stream: HeldStream,
    /// Created non-blocking (the only kind a capture begins on).
    non_blocking: bool,
}

struct Ev {
    /// Shared, as [`Event::completion`] needs: a pending completion keeps it alive.
    event: Arc<Event>,
    timing: bool,
    /// Recorded successfully at least once (the crate's own rule for `elapsed`).
    recorded: bool,
    /// The capture generation it was last recorded during. Such an event is waited on only
    /// inside that same capture, and never synchronized: it may stand for captured work.
    taint: Option<u64>,
    /// Whether its last record went into a capture, as [`Known::captured`].
    captured: Option<bool>,
}

impl Ev {
    /// What the program knows of it.
    fn known(&self) -> Known {
        Known { timing: self.timing, recorded: self.recorded, captured: self.captured }
    }

    /// The event with what the program knows of it.
    fn seen(&self) -> Seen<'_> {
        Seen { event: &self.event, known: self.known() }
    }
}

/// Whether waiting on an event tainted by `taint` is safe now, during capture `generation`.
fn waitable(taint: Option<u64>, generation: Option<u64>) -> bool {
    taint.is_none() || taint == generation
}

/// Where a picked stream lives.
enum Target {
    Slot(usize),
    Origin,
}

/// What the threads of a `Threads` operation share.
struct Shared<'a> {
    device: Device,
    pool: &'a StreamPool,
    log: &'a TagLog,
    streams: &'a [&'a StreamRef],
    events: &'a [&'a Event],
}

/// What a finished program leaves to be checked once its work is done.
struct Leftovers {
    tokens: Vec<Arc<AtomicU8>>,
    /// Those of graph host functions (freed by CUDA, on a thread of its own).
    graph_tokens: Vec<Arc<AtomicU8>>,
    completions: Vec<Completion>,
    /// Streams still reporting a capture after every capture ended (not expected).
    stranded: usize,
}

/// The state of one program.
struct World<'p> {
    device: Device,
    range: PriorityRange,
    pool: &'p StreamPool,
    log: &'p TagLog,
    slots: Vec<Slot>,
    events: Vec<Ev>,
    graphs: Vec<Graph>,
    execs: Vec<GraphExec>,
    tokens: Vec<Arc<AtomicU8>>,
    graph_tokens: Vec<Arc<AtomicU8>>,
    completions: Vec<Completion>,
    /// Captures of the program so far, this crate's and raw ones.
    generation: u64,
    /// No non-primary context could be made: that actor is skipped for the rest of the program.
    no_non_primary: bool,
}

impl<'p> World<'p> {
    fn new(device: Device, range: PriorityRange, pool: &'p StreamPool, log: &'p TagLog) -> World<'p> {
        let mut world = World {
            device,
            range,
            pool,
            log,
            slots: Vec::new(),
            events: Vec::new(),
            graphs: Vec::new(),
            execs: Vec::new(),
            tokens: Vec::new(),
            graph_tokens: Vec::new(),
            completions: Vec::new(),
            generation: 0,
            no_non_primary: false,
        };
        for non_blocking in [true, false] {
            let options = if non_blocking { StreamOptions::non_blocking() } else { StreamOptions::default() };
            let stream = Stream::new(device, options);
            note("Stream::new", &stream);
            if let Ok(stream) = stream {
                world.slots.push(Slot { stream: HeldStream::Owned(stream), non_blocking });
            }
        }
        world
    }

    /// A stream for an operation: a slot, or (a third of the time) the stream being captured.
    fn pick<'a>(&'a self, pick: u32, origin: Option<&'a Stream>) -> Option<(&'a StreamRef, Target)> {
        if let Some(origin) = origin {
            if pick % 3 == 0 || self.slots.is_empty() {
                return Some((origin, Target::Origin));
            }
        }
        if self.slots.is_empty() {
            return None;
        }
        let index = pick as usize % self.slots.len();
        Some((&self.slots[index].stream, Target::Slot(index)))
    }

    /// An owned stream: a slot, or the stream being captured.
    fn pick_owned<'a>(&'a self, pick: u32, origin: Option<&'a Stream>) -> Option<&'a Stream> {
        if let Some(origin) = origin {
            if pick % 3 == 0 {
                return Some(origin);
            }
        }
        let owned: Vec<&Stream> = self
            .slots
            .iter()
            .filter_map(|slot| match &slot.stream {
                HeldStream::Owned(stream) => Some(stream),
                HeldStream::Builtin(_) => None,
            })
            .collect();
        if owned.is_empty() { origin } else { Some(owned[pick as usize % owned.len()]) }
    }

    /// A slot that may be dropped now: during a capture, only one that is certainly not part
    /// of it (a stream is never destroyed mid-capture; forks that joined are joined back first).
    fn removable(&self, pick: u32, capturing: bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let index = pick as usize % self.slots.len();
        let stream = &self.slots[index].stream;
        // (A built-in stream is checked too: the per-thread stream can join a capture, and
        // must stay where the join before the capture's end finds it.)
        if capturing && !is_legacy(stream) {
            let status = stream.capture_status();
            note("StreamRef::capture_status", &status);
            if !matches!(status, Ok(CaptureStatus::None)) {
                return None;
            }
        }
        Some(index)
    }

    fn event_index(&self, pick: u32) -> Option<usize> {
        (!self.events.is_empty()).then(|| pick as usize % self.events.len())
    }

    /// Updates what is known of event `index` after a record with `result` during capture
    /// `generation`, on a stream that [`records_into_capture`] said `into_capture` of.
    fn recorded(&mut self, index: usize, result: &Result<()>, generation: Option<u64>, into_capture: Option<bool>) {
        let event = &mut self.events[index];
        match result {
            Ok(()) => {
                event.recorded = true;
                event.captured = into_capture;
            }
            // CUDA's error: a record made while captures may be in progress marked the event as
            // captured ahead and keeps that mark (another thread's record may have gone into a
            // capture meanwhile); otherwise the event is as it was.
            Err(Error::Cuda { .. }) => event.captured = None,
            Err(_) => {}
        }
        match generation {
            // During a capture the record may be a captured one, whatever the stream.
            Some(generation) => event.taint = Some(generation),
            None if result.is_ok() => event.taint = None,
            None => {}
        }
    }

    /// Whether every completion of the program has resolved: then the reactor queries none of
    /// their events (it releases an event before it resolves its future).
    fn quiet(&self) -> bool {
        self.completions.iter().all(Completion::is_complete)
    }

    /// A new event, kept; its index, or `None` when the program holds all it may or none was
    /// made.
    fn push_event(&mut self, timing: bool) -> Option<usize> {
        if self.events.len() >= MAX_EVENTS {
            return None;
        }
        let event = Event::new(self.device, EventFlags { timing, ..EventFlags::default() });
        note("Event::new", &event);
        let event = Arc::new(event.ok()?);
        self.events.push(Ev { event, timing, recorded: false, taint: None, captured: Some(false) });
        Some(self.events.len() - 1)
    }

    /// A slot other than the legacy stream (a raw capture must not meet it), by `pick`.
    fn slot_beside_raw_capture(&self, pick: u32) -> Option<usize> {
        let candidates: Vec<usize> =
            (0..self.slots.len()).filter(|&index| !is_legacy(&self.slots[index].stream)).collect();
        (!candidates.is_empty()).then(|| candidates[pick as usize % candidates.len()])
    }

    /// Runs one operation; `active` is the capture in progress, if any.
    fn exec(&mut self, op: Op, active: Option<&mut Active<'_>>) {
        let origin: Option<&Stream> = active.as_ref().map(|active| active.origin);
        let generation = active.as_ref().map(|active| active.generation);
        let capturing = active.is_some();
        let device = self.device;
        match op {
            Op::NewStream { kind, priority } => {
                if self.slots.len() >= MAX_STREAMS {
                    return skip();
                }
                let non_blocking = kind % 2 == 1;
                let options = if non_blocking { StreamOptions::non_blocking() } else { StreamOptions::default() };
                let range = self.range;
                let outside = kind % 8 >= 6;
                let options = match kind % 8 {
                    0 | 1 => options,
                    2..=5 => options
                        .with_priority(Priority(range.most_urgent().value() + (priority % range.levels()) as i32)),
                    _ if priority % 2 == 0 => {
                        options.with_priority(Priority(range.least_urgent().value() + 1 + (priority % 3) as i32))
                    }
                    _ => options.with_priority(Priority(range.most_urgent().value() - 1 - (priority % 3) as i32)),
                };
                let stream = Stream::new(device, options);
                note("Stream::new", &stream);
                if outside {
                    assert!(
                        matches!(stream, Err(Error::PriorityOutOfRange { .. })),
                        "a priority outside {range} must be refused: {options:?} gave {stream:?}"
                    );
                }
                if let Ok(stream) = stream {
                    self.slots.push(Slot { stream: HeldStream::Owned(stream), non_blocking });
                }
            }
            Op::DropStream { s } => match self.removable(s, capturing) {
                Some(index) => drop(self.slots.remove(index)),
                None => skip(),
            },
            Op::DestroyStream { s } => match self.removable(s, capturing) {
                Some(index) => match self.slots.remove(index).stream {
                    HeldStream::Owned(stream) => {
                        note("Stream::destroy", &stream.destroy());
                    }
                    // A built-in stream has nothing to destroy.
                    HeldStream::Builtin(_) => {}
                },
                None => skip(),
            },
            Op::TakeBuiltin { which } => {
                let (null, legacy, per_thread) =
                    (BuiltinStream::null(device), BuiltinStream::legacy(device), BuiltinStream::per_thread(device));
                note_infallible();
                assert_eq!(*null == *per_thread, NULL_STREAM_IS_PER_THREAD, "the null stream is the per-thread one");
                assert_eq!(*null == *legacy, !NULL_STREAM_IS_PER_THREAD, "the null stream is the legacy one");
                assert!(*legacy != *per_thread, "the legacy and per-thread streams differ");
                if self.slots.len() >= MAX_STREAMS {
                    return skip();
                }
                let stream = [null, legacy, per_thread].into_iter().nth(usize::from(which % 3));
                if let Some(stream) = stream {
                    self.slots.push(Slot { stream: HeldStream::Builtin(stream), non_blocking: false });
                }
            }
            Op::Borrowed { s, action, e } => self.borrowed(s, action, e, active),
            Op::StreamInfo { s } => {
                let Some((stream, target)) = self.pick(s, origin) else { return skip() };
                let priority = stream.priority();
                note("StreamRef::priority", &priority);
                if let Ok(priority) = priority {
                    assert!(self.range.contains(priority), "priority {priority:?} is outside {}", self.range);
                }
                let non_blocking = stream.is_non_blocking();
                note("StreamRef::is_non_blocking", &non_blocking);
                let expected = match target {
                    Target::Origin => Some(true),
                    Target::Slot(index) => {
                        let slot = &self.slots[index];
                        matches!(slot.stream, HeldStream::Owned(_)).then_some(slot.non_blocking)
                    }
                };
                if let (Ok(non_blocking), Some(expected)) = (non_blocking, expected) {
                    assert_eq!(non_blocking, expected, "an owned stream keeps the flags it was created with");
                }
                note("StreamRef::capture_status", &stream.capture_status());
                note("StreamRef::capture_info", &stream.capture_info());
                let id = stream.id();
                note("StreamRef::id", &id);
                if stream.ownership() == Ownership::Owned {
                    assert!(id.is_ok(), "a stream this crate created knows its id without asking CUDA: {id:?}");
                    assert_eq!(stream.id().ok(), id.ok(), "a stream's id never changes");
                }
            }
            Op::NewEvent { flags } => {
                if self.events.len() >= MAX_EVENTS {
                    return skip();
                }
                let timing = flags & 1 != 0;
                let flags = EventFlags { timing, blocking_sync: flags & 2 != 0, interprocess: false };
                let event = Event::new(device, flags);
                note("Event::new", &event);
                if let Ok(event) = event {
                    self.events.push(Ev {
                        event: Arc::new(event),
                        timing,
                        recorded: false,
                        taint: None,
                        captured: Some(false),
                    });
                }
            }
            Op::DropEvent { e } => match self.event_index(e) {
                Some(index) => drop(self.events.remove(index)),
                None => skip(),
            },
            Op::Record { s, e } => {
                let (Some((stream, _)), Some(index)) = (self.pick(s, origin), self.event_index(e)) else {
                    return skip();
                };
                let result = stream.record(&self.events[index].event);
                note("StreamRef::record", &result);
                let into = records_into_capture(stream);
                self.recorded(index, &result, generation, into);
            }
            Op::RecordEvent { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let event = stream.record_event();
                note("StreamRef::record_event", &event);
                if let Ok(event) = event {
                    let captured = records_into_capture(stream);
                    if self.events.len() < MAX_EVENTS {
                        self.events.push(Ev {
                            event: Arc::new(event),
                            timing: false,
                            recorded: true,
                            taint: generation,
                            captured,
                        });
                    }
                }
            }
            Op::WaitEvent { s, e } => {
                let (Some((stream, _)), Some(index)) = (self.pick(s, origin), self.event_index(e)) else {
                    return skip();
                };
                let event = &self.events[index];
                if !waitable(event.taint, generation) {
                    return skip();
                }
                note("StreamRef::wait_event", &stream.wait_event(&event.event));
            }
            Op::WaitStream { s, other } => {
                let (Some((stream, _)), Some((other, _))) = (self.pick(s, origin), self.pick(other, origin)) else {
                    return skip();
                };
                note("StreamRef::wait_stream", &stream.wait_stream(other));
            }
            Op::Fork { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let child = stream.fork();
                note("StreamRef::fork", &child);
                // Kept even beyond MAX_STREAMS: a fork of the captured stream is in the capture,
                // and is joined back before the capture ends.
                if let Ok(child) = child {
                    self.slots.push(Slot { stream: HeldStream::Owned(child), non_blocking: true });
                }
            }
            Op::Query { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                note("StreamRef::query", &stream.query());
            }
            Op::Synchronize { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                note("StreamRef::synchronize", &stream.synchronize());
            }
            Op::EventUse { e, action } => {
                let Some(index) = self.event_index(e) else { return skip() };
                let event = &self.events[index];
                let settled = event.taint.is_none();
                // A captured event is refused at once: safe to synchronize and await.
                let captured = event.captured;
                let during = if capturing { During::Capture } else { During::Nothing };
                match action % 4 {
                    1 if settled || captured == Some(true) => {
                        let result = event.event.synchronize();
                        note("Event::synchronize", &result);
                        expect_event_call("Event::synchronize", captured, during, &result);
                    }
                    2 => {
                        let handle = event.event.ipc_handle();
                        note("Event::ipc_handle", &handle);
                        assert!(
                            matches!(handle, Err(Error::NotInterprocess)),
                            "ipc_handle of an event made without the interprocess flag must be NotInterprocess"
                        );
                    }
                    3 if settled || captured == Some(true) => {
                        let completion = event.event.completion();
                        note_infallible();
                        if captured == Some(true) {
                            assert!(completion.is_complete(), "a captured event's completion resolves at once");
                            let result = block_on(completion);
                            note("Event::completion (block_on)", &result);
                            expect_event_call("Event::completion", captured, during, &result);
                        } else {
                            self.completions.push(completion);
                        }
                    }
                    _ => {
                        let result = event.event.query();
                        note("Event::query", &result);
                        expect_event_call("Event::query", captured, during, &result);
                    }
                }
            }
            Op::Elapsed { end, start } => {
                let (Some(end), Some(start)) = (self.event_index(end), self.event_index(start)) else {
                    return skip();
                };
                let (end, start) = (&self.events[end], &self.events[start]);
                let elapsed = end.event.elapsed(&start.event);
                note("Event::elapsed", &elapsed);
                let during = if capturing { During::Capture } else { During::Nothing };
                expect_elapsed("Event::elapsed", end.known(), start.known(), during, &elapsed);
            }
            Op::HostFn { s, probe } | Op::HostCallback { s, probe } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let (_, state) = once_host_fn(stream, probe, matches!(op, Op::HostCallback { .. }));
                self.tokens.push(state);
            }
            Op::Completion { s, block } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let completion = stream.completion();
                note_infallible();
                let _ = completion.is_complete();
                // Blocking is safe only when no capture is active: then every stream's work is
                // real work, none of it waiting on anything the host does later.
                if block && !capturing {
                    note("Completion (block_on)", &block_on(completion));
                } else {
                    self.completions.push(completion);
                }
            }
            Op::Kernel { s, kind, micros } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                note("kernel launch", &kernel(stream, self.log, kind, micros));
            }
            Op::BeginCapture { mode, .. } => match active {
                // One capture at a time: beginning another on the captured stream is refused by
                // CUDA. Should it ever succeed, dropping the guard ends it (and so the capture).
                Some(active) => {
                    let nested = AnyCapture::begin(active.origin, mode);
                    note("StreamRef::begin_capture (nested)", &nested);
                    drop(nested);
                }
                None => skip(),
            },
            Op::CaptureHostFn { s, on_origin, probe } => match active {
                Some(active) => {
                    let origin = active.origin;
                    let target = if on_origin { Some(&**origin) } else { self.pick(s, None).map(|(s, _)| s) };
                    match target {
                        Some(target) => {
                            let state = capture_host_fn(&mut active.capture, target, probe);
                            self.graph_tokens.push(state);
                        }
                        None => skip(),
                    }
                }
                None => skip(),
            },
            Op::EndCapture { .. } => skip(),
            Op::Instantiate { g } => {
                if self.graphs.is_empty() || self.execs.len() >= MAX_EXECS {
                    return skip();
                }
                let exec = self.graphs[g as usize % self.graphs.len()].instantiate();
                note("Graph::instantiate", &exec);
                if let Ok(exec) = exec {
                    self.execs.push(exec);
                }
            }
            Op::Launch { x, s, times, upload } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                if self.execs.is_empty() {
                    return skip();
                }
                let exec = &self.execs[x as usize % self.execs.len()];
                if upload {
                    note("GraphExec::upload", &exec.upload(stream));
                }
                for _ in 0..1 + times % 3 {
                    note("GraphExec::launch", &exec.launch(stream));
                }
            }
            Op::DropGraph { g } => {
                if self.graphs.is_empty() {
                    return skip();
                }
                let index = g as usize % self.graphs.len();
                drop(self.graphs.remove(index));
            }
            Op::DropExec { x } => {
                if self.execs.is_empty() {
                    return skip();
                }
                let index = x as usize % self.execs.len();
                drop(self.execs.remove(index));
            }
            Op::Pool { s, action } => self.pool_op(s, action, origin),
            Op::Current { picks, depth, action } => {
                let depth = 1 + usize::from(depth % 3);
                let streams: Vec<&StreamRef> =
                    picks[..depth].iter().filter_map(|pick| self.pick(*pick, origin).map(|(s, _)| s)).collect();
                let Some(&innermost) = streams.last() else { return skip() };
                let log = self.log;
                nest(device, &streams, &mut || {
                    StreamRef::with_current(device, |current| {
                        assert!(current == innermost, "with_current sees the innermost as_current");
                        let result = match action % 3 {
                            0 => current.query().map(drop),
                            1 => kernel(current, log, action / 3, action),
                            _ => cuda_stream_tests::empty(&CurrentStream),
                        };
                        note("an operation on the current stream", &result);
                    });
                });
                expect_nothing_current(device);
            }
            Op::Threads { count, seed } => {
                if capturing {
                    return skip();
                }
                self.threads(2 + usize::from(count % 3), seed);
            }
            Op::CapturedEvent { e, action, seed } => self.captured_event(e, action, seed, active),
            Op::RawCapture { s, mode, fresh, seed } => {
                if capturing {
                    return skip();
                }
                self.raw_capture(s, mode, fresh, seed);
            }
            Op::NonPrimaryContext { seed } => {
                if capturing || self.no_non_primary {
                    return skip();
                }
                self.non_primary(seed);
            }
            Op::DeviceSync => {
                if capturing {
                    return skip();
                }
                note("Device::synchronize", &device.synchronize());
            }
        }
    }

    /// Operations through a `BorrowedStream` wrapping the handle of a stream the program owns.
    fn borrowed(&mut self, s: u32, action: u8, e: u32, active: Option<&mut Active<'_>>) {
        let origin: Option<&Stream> = active.as_ref().map(|active| active.origin);
        let generation = active.as_ref().map(|active| active.generation);
        let Some(owner) = self.pick_owned(s, origin) else { return skip() };
        let mut tokens = Vec::new();
        let mut graph_tokens = Vec::new();
        let mut record = None;
        {
            // SAFETY: `owner` is a `Stream` this program owns (a slot, or the stream being
            // captured), borrowed here for the whole block: nothing drops, moves or destroys it
            // before `view`, which does not leave the block, is gone.
            let view = unsafe { BorrowedStream::borrow_raw_on(owner.as_raw(), self.device) }.unwrap();
            note_infallible();
            assert_eq!(view.ownership(), Ownership::Borrowed, "a borrowed ordinary handle is Borrowed");
            assert!(*view == **owner, "a borrowed view compares equal to the stream it borrows");
            match action % 7 {
                0 => {
                    note("BorrowedStream query", &view.query());
                }
                1 => {
                    note("kernel on a BorrowedStream", &cuda_stream_tests::empty(&view));
                }
                2 => tokens.push(once_host_fn(&view, action % 2 == 0, false).1),
                3 => {
                    if let Some(index) = self.event_index(e) {
                        let result = view.record(&self.events[index].event);
                        note("BorrowedStream record", &result);
                        record = Some((index, result, records_into_capture(&view)));
                    }
                }
                4 => view.as_current(|| {
                    let (is_view, is_owner) =
                        StreamRef::with_current(self.device, |current| (current == &*view, current == &**owner));
                    assert!(is_view && is_owner, "as_current of a borrowed view makes it (and so its owner) current");
                }),
                5 => {
                    note("StreamRef::wait_stream (owner on its view)", &owner.wait_stream(&view));
                    note("StreamRef::wait_stream (view on its owner)", &view.wait_stream(owner));
                }
                _ => match active {
                    Some(active) => graph_tokens.push(capture_host_fn(&mut active.capture, &view, action % 2 == 0)),
                    None => {
                        note("BorrowedStream capture_status", &view.capture_status());
                    }
                },
            }
        }
        self.tokens.extend(tokens);
        self.graph_tokens.extend(graph_tokens);
        if let Some((index, result, into)) = record {
            self.recorded(index, &result, generation, into);
        }
    }

    /// Pool leases: used and released, exhausted, joined with a slot.
    fn pool_op(&mut self, s: u32, action: u8, origin: Option<&Stream>) {
        let pool = self.pool;
        let mut tokens = Vec::new();
        match action % 4 {
            0 | 1 => {
                let lease = pool.acquire();
                note("StreamPool::acquire", &lease);
                if let Ok(lease) = lease {
                    note("kernel on a lease", &kernel(&lease, self.log, action / 4, action));
                    if action % 4 == 1 {
                        tokens.push(once_host_fn(&lease, false, action % 8 == 5).1);
                    }
                }
            }
            2 => {
                let mut leases = Vec::new();
                for _ in 0..pool.capacity() {
                    let lease = pool.acquire();
                    note("StreamPool::acquire", &lease);
                    leases.extend(lease.ok());
                }
                for (index, lease) in leases.iter().enumerate() {
                    for other in &leases[index + 1..] {
                        assert!(**lease != **other, "a pool never leases one stream to two holders");
                    }
                }
                if leases.len() == pool.capacity() {
                    let extra = pool.acquire();
                    note("StreamPool::acquire (exhausted)", &extra);
                    assert!(
                        matches!(extra, Err(Error::PoolExhausted { capacity }) if capacity == pool.capacity()),
                        "a pool with every stream leased must be PoolExhausted: {extra:?}"
                    );
                }
                for lease in &leases {
                    note("kernel on a lease", &cuda_stream_tests::empty(lease));
                }
            }
            _ => {
                let lease = pool.acquire();
                note("StreamPool::acquire", &lease);
                if let (Ok(lease), Some((stream, _))) = (lease, self.pick(s, origin)) {
                    note("StreamRef::wait_stream (on a lease)", &stream.wait_stream(&lease));
                    // A lease never joins a capture: it is not joined back before the capture ends.
                    if origin.is_none() {
                        note("StreamRef::wait_stream (a lease on a stream)", &lease.wait_stream(stream));
                    }
                }
            }
        }
        self.tokens.extend(tokens);
    }

    /// 2 to 4 scoped threads doing random operations on the program's streams, at once.
    fn threads(&mut self, count: usize, seed: u64) {
        let streams: Vec<&StreamRef> = self.slots.iter().map(|slot| &*slot.stream).collect();
        let events: Vec<&Event> =
            self.events.iter().filter(|event| event.taint.is_none()).map(|event| &*event.event).collect();
        let shared = Shared { device: self.device, pool: self.pool, log: self.log, streams: &streams, events: &events };
        let tokens = std::thread::scope(|scope| {
            let shared = &shared;
            let handles: Vec<_> = (0..count)
                .map(|thread| {
                    let seed = seed ^ (thread as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    scope.spawn(move || thread_ops(thread, seed, shared))
                })
                .collect();
            let mut tokens = Vec::new();
            let mut failure = None;
            for handle in handles {
                match handle.join() {
                    Ok(mine) => tokens.extend(mine),
                    Err(payload) => {
                        failure.get_or_insert_with(|| panic_message(payload.as_ref()));
                    }
                }
            }
            if let Some(failure) = failure {
                panic!("a fuzzer thread failed: {failure}");
            }
            tokens
        });
        self.tokens.extend(tokens);
    }

    /// Begins a capture (`run.ops[start]` is a `BeginCapture`), runs the operations after it
    /// with the capture active until an `EndCapture` or the end of the program, and ends it.
    /// Returns the index of the next operation.
    fn capture_block(&mut self, run: &Run, start: usize) -> usize {
        let Op::BeginCapture { mode, fresh, s } = run.ops[start] else {
            unreachable!("capture_block starts at a BeginCapture")
        };
        // The stream to capture: an owned non-blocking slot, moved out for the capture, or a
        // new one. It goes back to the slots afterwards.
        let mut origin: Option<Stream> = None;
        guarded(run, start, || {
            let candidates: Vec<usize> = (0..self.slots.len())
                .filter(|&index| {
                    let slot = &self.slots[index];
                    slot.non_blocking && matches!(slot.stream, HeldStream::Owned(_))
                })
                .collect();
            if !fresh && !candidates.is_empty() {
                let index = candidates[s as usize % candidates.len()];
                if let HeldStream::Owned(stream) = self.slots.remove(index).stream {
                    origin = Some(stream);
                }
            } else {
                let stream = Stream::new(self.device, StreamOptions::non_blocking());
                note("Stream::new", &stream);
                origin = stream.ok();
            }
        });
        let Some(origin) = origin else { return start + 1 };
        self.generation += 1;
        let generation = self.generation;
        // A block, so that `active` (which borrows `origin`) is gone before `origin` moves.
        let next = {
            let mut active = None;
            guarded(run, start, || {
                let begun = AnyCapture::begin(&origin, mode);
                note("StreamRef::begin_capture", &begun);
                if let Ok(capture) = begun {
                    let info = origin.capture_info();
                    note("StreamRef::capture_info", &info);
                    assert!(
                        matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == capture.id()),
                        "a capture just begun is active, with its id: {info:?}"
                    );
                    active = Some(Active { capture, origin: &origin, generation, checked: false, racers: Vec::new() });
                }
            });
            let mut next = start + 1;
            if let Some(mut active) = active {
                let mut discard = false;
                let mut end_at = run.ops.len();
                while next < run.ops.len() {
                    let op = run.ops[next];
                    next += 1;
                    if let Op::EndCapture { discard: how } = op {
                        (discard, end_at) = (how, next - 1);
                        break;
                    }
                    guarded(run, next - 1, || self.exec(op, Some(&mut active)));
                }
                guarded(run, end_at, || self.end_capture(active, discard));
            }
            next
        };
        self.slots.push(Slot { stream: HeldStream::Owned(origin), non_blocking: true });
        next
    }

    /// Joins back every stream that joined the capture, then ends it (or drops the guard),
    /// while its racers (if any) call the events recorded in it.
    fn end_capture(&mut self, active: Active<'_>, discard: bool) {
        let Active { capture, origin, generation, checked, racers } = active;
        let id = capture.id();
        for slot in &self.slots {
            if is_legacy(&slot.stream) {
                continue;
            }
            let info = slot.stream.capture_info();
            note("StreamRef::capture_info", &info);
            if matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == id) {
                note("StreamRef::wait_stream (join)", &origin.wait_stream(&slot.stream));
            }
        }
        // Refused calls on its events were made: still active now, it must end Ok. (Checked only
        // while no completion is pending: see `record_in_capture`. None is made before the end
        // but the racers', on events no longer recorded into it.)
        let intact = checked && self.quiet() && capture_intact(origin, id);
        let (ended, rerecorded) = if racers.is_empty() {
            (finish_capture(capture, discard), false)
        } else {
            self.race_capture_end(capture, discard, &racers, generation)
        };
        if intact && !rerecorded {
            if let Some(graph) = &ended {
                assert!(
                    graph.is_ok(),
                    "a capture still active after only refused calls on its captured events (racing its end or \
                     not) must end Ok: {graph:?}"
                );
            }
        }
        if let Some(Ok(graph)) = ended {
            if self.graphs.len() < MAX_GRAPHS {
                self.graphs.push(graph);
            }
        }
        let status = origin.capture_status();
        note("StreamRef::capture_status", &status);
        assert!(
            matches!(status, Ok(CaptureStatus::None)),
            "the captured stream is out of capture once the capture ended: {status:?}"
        );
    }

    /// Ends `capture` (or drops it) while `racers` call events recorded in it, on threads of
    /// their own; some of them record their event again, outside the capture, on a slot that is
    /// certainly outside it. Returns the end's result, and whether an event was recorded again
    /// (then the calls on it are only known to give `Ok` or `CaptureMisuse`, and the end `Ok`
    /// or a typed error).
    fn race_capture_end(
        &mut self,
        capture: AnyCapture<'_>,
        discard: bool,
        racers: &[Racer],
        generation: u64,
    ) -> (Option<Result<Graph>>, bool) {
        let outside = (0..self.slots.len()).find(|&index| {
            let stream = &self.slots[index].stream;
            !is_legacy(stream) && !is_thread_bound(stream) && records_into_capture(stream) == Some(false)
        });
        let rerecorded: Vec<&Arc<Event>> =
            racers.iter().filter(|racer| racer.rerecord && outside.is_some()).map(|racer| &racer.event).collect();
        // What is known of an event now: a racer's record makes it unknown; one the program
        // dropped meanwhile may have been recorded since the racer was made.
        let known = |event: &Arc<Event>| -> Known {
            let timing = event.flags().timing == Some(true);
            let found = self.events.iter().find(|ev| Arc::ptr_eq(&ev.event, event)).map(Ev::known);
            let known = found.unwrap_or(Known { timing, recorded: false, captured: None });
            if rerecorded.iter().any(|racing| Arc::ptr_eq(racing, event)) {
                Known { captured: None, ..known }
            } else {
                known
            }
        };
        let plans: Vec<(Known, Known)> =
            racers.iter().map(|racer| (known(&racer.event), known(&racer.other))).collect();
        let outside = outside.map(|index| &*self.slots[index].stream);
        trace(format_args!("{} racers, {} recording outside, on {outside:?}", racers.len(), rerecorded.len()));
        let barrier = Barrier::new(racers.len() + 1);
        let (ended, outcomes) = std::thread::scope(|scope| {
            let barrier = &barrier;
            let handles: Vec<_> = racers
                .iter()
                .zip(&plans)
                .map(|(racer, &(mine, other))| {
                    let rerecord_on = outside.filter(|_| racer.rerecord);
                    scope.spawn(move || race(racer, mine, other, rerecord_on, barrier))
                })
                .collect();
            barrier.wait();
            let ended = finish_capture(capture, discard);
            (ended, handles.into_iter().map(|handle| handle.join()).collect::<Vec<_>>())
        });
        let rerecorded = !rerecorded.is_empty();
        let mut failed = Vec::new();
        for (racer, outcome) in racers.iter().zip(outcomes) {
            let (kept, record) = outcome.unwrap_or_else(|payload| {
                panic!("a thread racing a capture's end failed: {}", panic_message(payload.as_ref()))
            });
            self.completions.extend(kept);
            let index = self.events.iter().position(|ev| Arc::ptr_eq(&ev.event, &racer.event));
            if let (Some(result), Some(index)) = (record, index) {
                // Recorded outside the capture, on a stream outside it.
                self.recorded(index, &result, Some(generation), Some(false));
                if result.is_err() {
                    failed.push(index);
                }
            }
        }
        // A failed record restores the event's earlier state, perhaps over another's record.
        for index in failed {
            self.events[index].captured = None;
        }
        (ended, rerecorded)
    }

    /// An event recorded in a capture: inside one, recorded on the capturing stream, then
    /// queried, synchronized, timed and awaited, here or on a spawned thread, perhaps again by
    /// a thread racing the capture's end; outside one, an event last recorded in a capture
    /// checked, recorded outside again, and used normally.
    fn captured_event(&mut self, e: u32, action: u8, seed: u64, active: Option<&mut Active<'_>>) {
        let mut rng = Rng::new(seed);
        match active {
            Some(active) => self.record_in_capture(e, action, &mut rng, active),
            None => self.record_outside_again(e, action, &mut rng),
        }
    }

    /// [`World::captured_event`] inside a capture: an event of the program (or a new one)
    /// recorded on the capturing stream, its refused calls here or on a spawned thread, perhaps a
    /// completion of its last real record pending across that record, perhaps a racer for the
    /// capture's end.
    fn record_in_capture(&mut self, e: u32, action: u8, rng: &mut Rng, active: &mut Active<'_>) {
        let origin = active.origin;
        let index = match self.event_index(e) {
            Some(index) if action & 0x80 == 0 || self.events.len() >= MAX_EVENTS => Some(index),
            _ => self.push_event(action & 1 != 0),
        };
        let Some(index) = index else { return skip() };
        // Awaiting its last real record while it is recorded into the capture: the future
        // resolves, Ok or (seen captured at the reactor's next pass) CaptureMisuse.
        let before = (action & 2 != 0 && self.events[index].captured == Some(false)).then(|| {
            note_infallible();
            self.events[index].event.completion()
        });
        let id = active.capture.id();
        // A pending completion may have the reactor query its event as the record goes into the
        // capture, which CUDA answers by invalidating the capture (a limit the crate documents):
        // the capture is checked only while no completion of the program is pending.
        let intact = before.is_none() && self.quiet() && capture_intact(origin, id);
        let event = Arc::clone(&self.events[index].event);
        let result = origin.record(&event);
        note("StreamRef::record (in the capture)", &result);
        let into = records_into_capture(origin);
        self.recorded(index, &result, Some(active.generation), into);
        let known = self.events[index].known();
        let other = self.event_index(pick(rng)).unwrap_or(index);
        let other_known = self.events[other].known();
        let other = Arc::clone(&self.events[other].event);
        let count = 1 + rng.below(4);
        let mut thread_rng = Rng::new(rng.next_u64());
        let kept = here_or_spawned(action & 4 != 0, || {
            let (mine, other) = (Seen { event: &event, known }, Seen { event: &other, known: other_known });
            event_calls("event recorded in the capture", &mut thread_rng, count, mine, other, During::Capture)
        });
        self.completions.extend(kept);
        if let Some(before) = before {
            if action & 8 != 0 {
                let result = block_on(before);
                note("Event::completion (pending across a record into a capture)", &result);
                // Or CUDA's capture error, when the reactor's query met the record (see above).
                assert!(
                    matches!(&result, Ok(()) | Err(Error::CaptureMisuse(_)))
                        || result
                            .as_ref()
                            .is_err_and(|error| error.cuda_code().is_some_and(CudaCode::is_capture_error)),
                    "a completion pending while its event is recorded into a capture gives Ok or CaptureMisuse: \
                     {result:?}"
                );
            } else {
                self.completions.push(before);
            }
        }
        if intact {
            assert!(capture_intact(origin, id), "refused calls on an event recorded in a capture leave it active");
            active.checked = true;
        }
        if action & 16 != 0 {
            active.racers.push(Racer { event, other, rerecord: action & 32 != 0, seed: rng.next_u64() });
        }
    }

    /// [`World::captured_event`] outside a capture: an event last recorded in one (if any)
    /// refused, recorded outside on a slot, then working normally, here or on spawned threads.
    fn record_outside_again(&mut self, e: u32, action: u8, rng: &mut Rng) {
        let Some(first) = self.event_index(e) else { return skip() };
        // An event last recorded in a capture, if there is one.
        let count = self.events.len();
        let index = (0..count)
            .map(|offset| (first + offset) % count)
            .find(|&index| self.events[index].captured == Some(true))
            .unwrap_or(first);
        let other = self.event_index(pick(rng)).unwrap_or(index);
        let calls = 1 + rng.below(3);
        let mut thread_rng = Rng::new(rng.next_u64());
        let (mine, theirs) = (self.events[index].seen(), self.events[other].seen());
        let kept = here_or_spawned(action & 4 != 0, || {
            event_calls("event before its record outside", &mut thread_rng, calls, mine, theirs, During::Nothing)
        });
        self.completions.extend(kept);
        let Some((stream, _)) = self.pick(pick(rng), None) else { return };
        let event = Arc::clone(&self.events[index].event);
        let result = stream.record(&event);
        note("StreamRef::record (outside any capture)", &result);
        let into = records_into_capture(stream);
        self.recorded(index, &result, None, into);
        let (mine, theirs) = (self.events[index].seen(), self.events[other].seen());
        let kept = here_or_spawned(action & 8 != 0, || {
            event_calls("event recorded outside again", &mut thread_rng, calls, mine, theirs, During::Nothing)
        });
        self.completions.extend(kept);
    }

    /// A raw capture, as foreign code (`torch.cuda.graph`) makes one: an owned slot (moved out
    /// for it) or a new stream, wrapped with `BorrowedStream::borrow_raw`, captured through raw
    /// FFI, used through the crate from this thread only, and ended through raw FFI. A spawned
    /// thread that checks the events recorded in it while it ends makes it Relaxed: a Global
    /// capture would forbid that thread's queries.
    fn raw_capture(&mut self, s: u32, mode: u8, fresh: bool, seed: u64) {
        let mut rng = Rng::new(seed);
        let owned: Vec<usize> =
            (0..self.slots.len()).filter(|&index| matches!(self.slots[index].stream, HeldStream::Owned(_))).collect();
        let (origin, non_blocking) = if !fresh && !owned.is_empty() {
            let slot = self.slots.remove(owned[s as usize % owned.len()]);
            let HeldStream::Owned(stream) = slot.stream else { unreachable!("the slot holds an owned stream") };
            (stream, slot.non_blocking)
        } else {
            let non_blocking = coin(&mut rng);
            let options = if non_blocking { StreamOptions::non_blocking() } else { StreamOptions::default() };
            let stream = Stream::new(self.device, options);
            note("Stream::new", &stream);
            let Ok(stream) = stream else { return };
            (stream, non_blocking)
        };
        let spawn = rng.below(3) == 0;
        let mode = raw_mode(if spawn { 2 } else { mode });
        trace(format_args!("raw capture: mode {mode:?}, a thread beside its end: {spawn}"));
        let forks = self.raw_capture_on(&origin, non_blocking, mode, spawn, &mut rng);
        self.slots.push(Slot { stream: HeldStream::Owned(origin), non_blocking });
        self.slots.extend(forks.into_iter().map(|fork| Slot { stream: HeldStream::Owned(fork), non_blocking: true }));
    }

    /// The raw capture of `origin` (see [`World::raw_capture`]); returns the streams forked
    /// from it, joined back and out of the capture.
    fn raw_capture_on(
        &mut self,
        origin: &Stream,
        non_blocking: bool,
        mode: sys::cudaStreamCaptureMode,
        spawn: bool,
        rng: &mut Rng,
    ) -> Vec<Stream> {
        self.generation += 1;
        let generation = self.generation;
        let device = self.device;
        let during = if mode == sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed {
            During::Capture
        } else {
            During::StrictRawCapture
        };
        let handle = origin.as_raw();
        // SAFETY: `origin` is a live stream this program owns; it outlives `borrowed` (the caller
        // keeps it until this returns). Its raw capture begins and ends on this thread, and no
        // other thread makes a call of this crate on it meanwhile.
        let borrowed = unsafe { BorrowedStream::borrow_raw(handle) };
        note("BorrowedStream::borrow_raw", &borrowed);
        let borrowed = borrowed.unwrap_or_else(|error| panic!("a stream of the primary context is borrowed: {error}"));
        assert_eq!(borrowed.ownership(), Ownership::Borrowed, "a borrowed ordinary handle is Borrowed");
        assert!(*borrowed == **origin, "a borrowed view compares equal to the stream it borrows");
        // SAFETY: a live stream that is not capturing; a valid mode.
        let begun = check(unsafe { sys::cudaStreamBeginCapture(handle, mode) }, "cudaStreamBeginCapture");
        note("cudaStreamBeginCapture (raw)", &begun);
        if begun.is_err() {
            return Vec::new();
        }
        let info = borrowed.capture_info();
        note("BorrowedStream capture_info", &info);
        let id = match info {
            Ok(info) if info.status == CaptureStatus::Active => info.id,
            other => panic!("a raw capture just begun is active, seen through the borrowed view: {other:?}"),
        };
        let mut forks: Vec<Stream> = Vec::new();
        // Slots that joined the capture, joined back before it ends.
        let mut joined: Vec<usize> = Vec::new();
        // The events recorded in it, for the thread beside its end.
        let mut captured: Vec<Arc<Event>> = Vec::new();
        for step in 0..2 + rng.below(9) {
            let what = format!("raw capture step {step}");
            'step: {
                match rng.below(11) {
                    0 => {
                        let result = borrowed.is_non_blocking();
                        note(&what, &result);
                        assert!(
                            matches!(result, Err(Error::CaptureMisuse(_))),
                            "{what}: is_non_blocking of a foreign stream in a raw capture must be refused: {result:?}"
                        );
                    }
                    1 => {
                        let priority = borrowed.priority();
                        note(&what, &priority);
                        assert!(priority.is_ok(), "{what}: priority is read during a raw capture: {priority:?}");
                        assert_eq!(priority, origin.priority(), "{what}: the borrowed view reads its owner's priority");
                        assert_eq!(borrowed.device(), device, "{what}: a borrowed stream knows its device");
                        let status = borrowed.capture_status();
                        note(&what, &status);
                        assert_eq!(status, Ok(CaptureStatus::Active), "{what}: capture_status during a raw capture");
                        let info = borrowed.capture_info();
                        note(&what, &info);
                        assert!(
                            matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == id),
                            "{what}: capture_info during a raw capture: {info:?}"
                        );
                        let read = borrowed.id();
                        note(&what, &read);
                        assert!(
                            matches!(read, Err(Error::CaptureMisuse(_))),
                            "{what}: the id of a foreign stream in a raw capture must be refused: {read:?}"
                        );
                    }
                    2 => {
                        // Refused on the capture's streams (`once_host_fn` checks it), run elsewhere.
                        let slot = self.slot_beside_raw_capture(pick(rng));
                        let target: &StreamRef = match (rng.below(3), slot) {
                            (0, _) => &borrowed,
                            (1, _) | (_, None) => origin,
                            (_, Some(index)) => &self.slots[index].stream,
                        };
                        let (result, state) = once_host_fn(target, rng.below(4) == 0, coin(rng));
                        if *target == **origin {
                            assert!(
                                matches!(result, Err(Error::CaptureMisuse(_))),
                                "{what}: a FnOnce host function on a stream in a raw capture must be refused: {result:?}"
                            );
                        }
                        self.tokens.push(state);
                    }
                    3 => {
                        let slot = self.slot_beside_raw_capture(pick(rng));
                        let target: &StreamRef = match (rng.below(4), slot, forks.first()) {
                            (0, _, _) => &borrowed,
                            (1, _, Some(fork)) => fork,
                            (2, Some(index), _) => &self.slots[index].stream,
                            _ => origin,
                        };
                        note(&what, &kernel(target, self.log, byte(rng), byte(rng)));
                    }
                    action @ (4 | 5) => {
                        // A record on the capturing stream, through the view or its owner, of an
                        // event of the program or (5) of a new one.
                        let target: &StreamRef = if coin(rng) { &borrowed } else { origin };
                        let (index, result) = if action == 4 {
                            // An event of the program only while none of its completions is
                            // pending: the reactor's query of one meeting the record would
                            // invalidate the capture (see `record_in_capture`).
                            let index = match self.event_index(pick(rng)).filter(|_| self.quiet()) {
                                Some(index) => Some(index),
                                None => self.push_event(coin(rng)),
                            };
                            let Some(index) = index else { break 'step };
                            let result = target.record(&self.events[index].event);
                            note(&what, &result);
                            (index, result)
                        } else {
                            let made = target.record_event();
                            note(&what, &made);
                            let Ok(made) = made else { break 'step };
                            if self.events.len() >= MAX_EVENTS {
                                break 'step;
                            }
                            let event = Arc::new(made);
                            self.events.push(Ev {
                                event,
                                timing: false,
                                recorded: false,
                                taint: None,
                                captured: Some(false),
                            });
                            (self.events.len() - 1, Ok(()))
                        };
                        let into = records_into_capture(target);
                        self.recorded(index, &result, Some(generation), into);
                        let mine = self.events[index].seen();
                        // Only a captured event's calls are refused before CUDA sees them.
                        if mine.known.captured == Some(true) {
                            let other = self.event_index(pick(rng)).map_or(mine, |other| self.events[other].seen());
                            let count = 1 + rng.below(3);
                            let kept = event_calls(&what, rng, count, mine, other, during);
                            self.completions.extend(kept);
                            captured.push(Arc::clone(mine.event));
                        }
                    }
                    6 => {
                        let Some(index) = self.slot_beside_raw_capture(pick(rng)) else { break 'step };
                        let slot = &self.slots[index].stream;
                        if coin(rng) {
                            // An external wait (or an ordinary one on a slot that joined).
                            note(&what, &borrowed.wait_stream(slot));
                        } else {
                            // The slot joins the capture.
                            note(&what, &slot.wait_stream(&borrowed));
                            if !joined.contains(&index) && records_into_capture(slot) == Some(true) {
                                joined.push(index);
                            }
                        }
                    }
                    7 => {
                        let fork = borrowed.fork();
                        note(&what, &fork);
                        forks.extend(fork.ok());
                    }
                    8 => {
                        let slot = self.slot_beside_raw_capture(pick(rng));
                        match slot.filter(|_| coin(rng)) {
                            Some(index) => {
                                let completion = self.slots[index].stream.completion();
                                note_infallible();
                                if joined.contains(&index) {
                                    let result = block_on(completion);
                                    note(&what, &result);
                                    assert!(
                                        matches!(result, Err(Error::CaptureMisuse(_))),
                                        "{what}: a completion of a stream that joined a raw capture must be refused: \
                                     {result:?}"
                                    );
                                } else {
                                    self.completions.push(completion);
                                }
                            }
                            None => {
                                let completion = borrowed.completion();
                                note_infallible();
                                assert!(
                                    completion.is_complete(),
                                    "{what}: a capturing stream's completion resolves at once"
                                );
                                let result = block_on(completion);
                                note(&what, &result);
                                assert!(
                                    matches!(result, Err(Error::CaptureMisuse(_))),
                                    "{what}: a completion of a stream in a raw capture must be refused: {result:?}"
                                );
                            }
                        }
                    }
                    9 => {
                        let lease = self.pool.acquire();
                        note(&what, &lease);
                        if let Ok(lease) = lease {
                            note(&what, &kernel(&lease, self.log, byte(rng), byte(rng)));
                            // An external wait: the lease stays out of the capture.
                            note(&what, &borrowed.wait_stream(&lease));
                        }
                    }
                    _ => {
                        // The owner knows its flags, priority and id without asking CUDA.
                        let flags = origin.is_non_blocking();
                        note(&what, &flags);
                        assert_eq!(
                            flags,
                            Ok(non_blocking),
                            "{what}: an owned stream knows its flags during a raw capture"
                        );
                        let priority = origin.priority();
                        note(&what, &priority);
                        assert!(priority.is_ok(), "{what}: an owned stream knows its priority: {priority:?}");
                        let read = origin.id();
                        note(&what, &read);
                        assert!(read.is_ok(), "{what}: an owned stream knows its id: {read:?}");
                    }
                }
            }
            assert!(capture_intact(&borrowed, id), "{what}: the raw capture is still active");
        }
        for &index in &joined {
            note("BorrowedStream wait_stream (join)", &borrowed.wait_stream(&self.slots[index].stream));
        }
        for fork in &forks {
            note("BorrowedStream wait_stream (join a fork)", &borrowed.wait_stream(fork));
        }
        let end = || {
            let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
            // SAFETY: the raw capture begun above on this thread; a valid out-pointer.
            let code = unsafe { sys::cudaStreamEndCapture(handle, &mut graph) };
            (code, graph)
        };
        let ((code, graph), kept) = if spawn && !captured.is_empty() {
            // Captured events, checked by another thread while the capture ends.
            let (barrier, mut thread_rng) = (Barrier::new(2), Rng::new(rng.next_u64()));
            let seen: Vec<Seen<'_>> = captured
                .iter()
                .map(|event| Seen {
                    event,
                    known: Known { timing: event.flags().timing == Some(true), recorded: true, captured: Some(true) },
                })
                .collect();
            std::thread::scope(|scope| {
                let checker = scope.spawn(|| {
                    barrier.wait();
                    let mut kept = Vec::new();
                    for (index, &mine) in seen.iter().enumerate() {
                        let other = seen[(index + 1) % seen.len()];
                        let count = 1 + thread_rng.below(3);
                        kept.extend(event_calls(
                            "beside a raw end",
                            &mut thread_rng,
                            count,
                            mine,
                            other,
                            During::Capture,
                        ));
                    }
                    kept
                });
                barrier.wait();
                let ended = end();
                let kept = checker.join().unwrap_or_else(|payload| {
                    panic!("a thread beside a raw capture's end failed: {}", panic_message(payload.as_ref()))
                });
                (ended, kept)
            })
        } else {
            (end(), Vec::new())
        };
        self.completions.extend(kept);
        note("cudaStreamEndCapture (raw)", &check(code, "cudaStreamEndCapture"));
        assert_eq!(
            code,
            sys::cudaError::cudaSuccess,
            "a raw capture that saw only operations that keep a capture valid ends with cudaSuccess"
        );
        if !graph.is_null() {
            // SAFETY: the graph the raw end returned, ours, destroyed once.
            let destroyed = check(unsafe { sys::cudaGraphDestroy(graph) }, "cudaGraphDestroy");
            note("cudaGraphDestroy (raw)", &destroyed);
            assert!(destroyed.is_ok(), "the graph of a raw capture is destroyed: {destroyed:?}");
        }
        let status = borrowed.capture_status();
        note("BorrowedStream capture_status", &status);
        assert_eq!(status, Ok(CaptureStatus::None), "the stream is out of capture once the raw end returned");
        forks
    }

    /// A non-primary context of cudarc's made current on this thread, crate operations while it
    /// is, the context destroyed, then everything made meanwhile used (it must all work: what
    /// the crate makes is in the primary context) and dropped in a random order.
    fn non_primary(&mut self, seed: u64) {
        let mut rng = Rng::new(seed);
        let ordinal = usize::try_from(self.device.ordinal()).unwrap_or_default();
        let context = match CudaContext::new_non_primary(ordinal, 0) {
            Ok(context) => context,
            Err(error) => {
                trace(format_args!("CudaContext::new_non_primary: {error:?}: skipped for the rest of the program"));
                self.no_non_primary = true;
                return skip();
            }
        };
        self.foreign_context_refused(&context, &mut rng);
        let mut made = Made::default();
        for step in 0..3 + rng.below(8) {
            self.while_non_primary(&format!("non-primary context current, step {step}"), &mut rng, &mut made);
        }
        // Destroyed here: cudarc streams of the context (which hold it) are gone already.
        drop(context);
        note_infallible();
        self.after_non_primary(&mut rng, made);
    }

    /// Streams of a non-primary context are refused (`borrow_raw`, `borrow_raw_on`,
    /// `from_cudarc`, its default stream too), and no stream is lent to it (`to_cudarc`).
    fn foreign_context_refused(&self, context: &Arc<CudaContext>, rng: &mut Rng) {
        let device = self.device;
        match context.new_stream() {
            Ok(foreign) => {
                let handle: sys::cudaStream_t = foreign.cu_stream().cast();
                // SAFETY: cudarc keeps the stream alive while `foreign` lives, past this call;
                // nobody captures it.
                let borrowed = unsafe { BorrowedStream::borrow_raw(handle) };
                note("BorrowedStream::borrow_raw (non-primary)", &borrowed);
                expect_foreign_context("borrow_raw", device, &borrowed);
                // SAFETY: as above.
                let borrowed = unsafe { BorrowedStream::borrow_raw_on(handle, device) };
                note("BorrowedStream::borrow_raw_on (non-primary)", &borrowed);
                expect_foreign_context("borrow_raw_on", device, &borrowed);
                // SAFETY: as above.
                let lent = unsafe { BorrowedStream::from_cudarc(&foreign) };
                note("BorrowedStream::from_cudarc (non-primary)", &lent);
                expect_foreign_context("from_cudarc", device, &lent);
            }
            Err(error) => trace(format_args!("CudaContext::new_stream: {error:?}")),
        }
        if coin(rng) {
            let default = context.default_stream();
            // SAFETY: the context's default stream, which cudarc keeps; nobody captures it.
            let lent = unsafe { BorrowedStream::from_cudarc(&default) };
            note("BorrowedStream::from_cudarc (non-primary default stream)", &lent);
            expect_foreign_context("from_cudarc of the default stream", device, &lent);
        }
        if let Some((stream, _)) = self.pick(pick(rng), None).filter(|_| coin(rng)) {
            // SAFETY: refused before anything is lent; were it lent, the `CudaStream` would drop
            // at once, before the program's stream, and carry no work.
            let lent = unsafe { stream.to_cudarc(context) };
            note("StreamRef::to_cudarc (non-primary)", &lent);
            expect_foreign_context("to_cudarc", device, &lent);
        }
    }

    /// One random operation while the non-primary context is current. What is made is kept in
    /// `made`, and must be made: an error here is a failure (nothing else uses it).
    fn while_non_primary(&mut self, what: &str, rng: &mut Rng, made: &mut Made<'p>) {
        let device = self.device;
        let must = |result: Result<()>| {
            note(what, &result);
            assert!(result.is_ok(), "{what}: while a non-primary context is current: {result:?}");
        };
        match rng.below(9) {
            0 => {
                let options = if coin(rng) { StreamOptions::non_blocking() } else { StreamOptions::default() };
                let range = self.range;
                let options = if coin(rng) {
                    options.with_priority(Priority(range.most_urgent().value() + (pick(rng) % range.levels()) as i32))
                } else {
                    options
                };
                let stream = Stream::new(device, options);
                note(what, &stream);
                made.streams.push(stream.unwrap_or_else(|error| panic!("{what}: Stream::new: {error}")));
            }
            1 => {
                let event = Event::new(device, EventFlags { timing: coin(rng), ..EventFlags::default() });
                note(what, &event);
                made.events.push(Arc::new(event.unwrap_or_else(|error| panic!("{what}: Event::new: {error}"))));
            }
            2 => {
                let targets = made.targets();
                if let (Some(event), false) = (made.events.get(rng.below(made.events.len().max(1))), targets.is_empty())
                {
                    must(targets[rng.below(targets.len())].record(event));
                }
            }
            3 => {
                let lease = self.pool.acquire();
                note(what, &lease);
                if let Ok(lease) = lease {
                    must(kernel(&lease, self.log, byte(rng), byte(rng)));
                    if coin(rng) {
                        made.leases.push(lease);
                    }
                }
            }
            4 => {
                let Some(stream) = made.streams.get(rng.below(made.streams.len().max(1))) else { return };
                let completion = stream.completion();
                note_infallible();
                if coin(rng) {
                    must(block_on(completion));
                } else {
                    made.completions.push(completion);
                }
            }
            5 => {
                let targets = made.targets();
                let slot = self.pick(pick(rng), None).map(|(slot, _)| slot);
                if targets.is_empty() {
                    return;
                }
                let waiter = targets[rng.below(targets.len())];
                match slot.filter(|_| coin(rng)) {
                    // A slot may be any stream, of any state: only noted.
                    Some(slot) => {
                        note(what, &waiter.wait_stream(slot));
                    }
                    None => must(waiter.wait_stream(targets[rng.below(targets.len())])),
                }
            }
            6 => self.capture_while_non_primary(what, rng, made),
            7 => {
                let targets = made.targets();
                match targets.get(rng.below(targets.len().max(1))) {
                    Some(target) => must(kernel(target, self.log, byte(rng), byte(rng))),
                    None => must(kernel(&BuiltinStream::per_thread(device), self.log, byte(rng), byte(rng))),
                }
            }
            _ => {
                let Some(stream) = made.streams.get(rng.below(made.streams.len().max(1))) else { return };
                let (result, state) = once_host_fn(stream, rng.below(4) == 0, coin(rng));
                must(result);
                self.tokens.push(state);
            }
        }
    }

    /// A capture while the non-primary context is current: a new stream captured in any mode,
    /// with kernels, a fork joined back, an event recorded in it (then refused), and ended; the
    /// graph (perhaps instantiated) kept.
    fn capture_while_non_primary(&mut self, what: &str, rng: &mut Rng, made: &mut Made<'p>) {
        let device = self.device;
        let origin = Stream::new(device, StreamOptions::non_blocking());
        note(what, &origin);
        let origin = origin.unwrap_or_else(|error| panic!("{what}: Stream::new: {error}"));
        let must = |result: Result<()>| {
            note(what, &result);
            assert!(result.is_ok(), "{what}: in a capture while a non-primary context is current: {result:?}");
        };
        let capture = AnyCapture::begin(&origin, byte(rng));
        note(what, &capture);
        let capture = capture.unwrap_or_else(|error| panic!("{what}: begin_capture: {error}"));
        let mut forks = Vec::new();
        for _ in 0..1 + rng.below(4) {
            match rng.below(3) {
                0 => must(kernel(&origin, self.log, byte(rng), byte(rng))),
                1 => {
                    let fork = origin.fork();
                    note(what, &fork);
                    let fork = fork.unwrap_or_else(|error| panic!("{what}: fork in a capture: {error}"));
                    must(kernel(&fork, self.log, byte(rng), byte(rng)));
                    forks.push(fork);
                }
                _ => {
                    let Some(event) = made.events.get(rng.below(made.events.len().max(1))) else { continue };
                    must(origin.record(event));
                    let known =
                        Known { timing: event.flags().timing == Some(true), recorded: true, captured: Some(true) };
                    let mine = Seen { event, known };
                    let count = 1 + rng.below(2);
                    // Resolved already (CaptureMisuse): not among those that must resolve Ok.
                    self.completions.extend(event_calls(what, rng, count, mine, mine, During::Capture));
                }
            }
        }
        for fork in &forks {
            must(origin.wait_stream(fork));
        }
        let graph = capture.end();
        note(what, &graph);
        let graph = graph.unwrap_or_else(|error| panic!("{what}: Capture::end: {error}"));
        if coin(rng) {
            let exec = graph.instantiate();
            note(what, &exec);
            made.execs.push(exec.unwrap_or_else(|error| panic!("{what}: Graph::instantiate: {error}")));
        }
        made.graphs.push(graph);
        made.streams.push(origin);
        made.streams.extend(forks);
    }

    /// After the non-primary context was destroyed: everything made while it was current works,
    /// without an error, then drops in a random order (launches perhaps pending).
    fn after_non_primary(&mut self, rng: &mut Rng, made: Made<'p>) {
        let what = "after the non-primary context was destroyed";
        let must = |result: Result<()>| {
            note(what, &result);
            assert!(result.is_ok(), "{what}: {result:?}");
        };
        let mut new_execs = Vec::new();
        must(kernel(&BuiltinStream::per_thread(self.device), self.log, byte(rng), byte(rng)));
        let targets = made.targets();
        for target in &targets {
            must(kernel(target, self.log, byte(rng), byte(rng)));
            let queried = target.query();
            note(what, &queried);
            assert!(queried.is_ok(), "{what}: StreamRef::query: {queried:?}");
        }
        if !targets.is_empty() {
            for (index, event) in made.events.iter().enumerate() {
                // Recorded outside any capture (again, for one recorded in a capture): usable.
                let target = targets[index % targets.len()];
                must(target.record(event));
                must(event.synchronize());
                let queried = event.query();
                note(what, &queried);
                assert_eq!(queried, Ok(true), "{what}: an event synchronized has completed");
                if coin(rng) {
                    must(block_on(event.completion()));
                }
            }
            let timed: Vec<&Arc<Event>> =
                made.events.iter().filter(|event| event.flags().timing == Some(true)).collect();
            if let [start, end, ..] = timed[..] {
                let target = targets[rng.below(targets.len())];
                must(target.record(start));
                must(kernel(target, self.log, byte(rng), byte(rng)));
                must(target.record(end));
                must(end.synchronize());
                let elapsed = end.elapsed(start);
                note(what, &elapsed);
                assert!(matches!(elapsed, Ok(Some(_))), "{what}: elapsed between completed events: {elapsed:?}");
            }
            for graph in &made.graphs {
                if coin(rng) {
                    let exec = graph.instantiate();
                    note(what, &exec);
                    new_execs.push(exec.unwrap_or_else(|error| panic!("{what}: Graph::instantiate: {error}")));
                }
            }
            for exec in made.execs.iter().chain(&new_execs) {
                must(exec.launch(targets[rng.below(targets.len())]));
            }
            if targets.len() > 1 {
                must(targets[0].wait_stream(targets[targets.len() - 1]));
            }
        }
        if coin(rng) {
            for target in &targets {
                must(target.synchronize());
            }
        }
        drop(targets);
        let Made { streams, events, leases, graphs, execs, completions } = made;
        for completion in completions {
            if coin(rng) {
                must(block_on(completion));
            } else {
                self.completions.push(completion);
            }
        }
        let mut held: Vec<Box<dyn Held + 'p>> = Vec::new();
        held.extend(streams.into_iter().map(|stream| Box::new(stream) as Box<dyn Held>));
        held.extend(events.into_iter().map(|event| Box::new(event) as Box<dyn Held>));
        held.extend(leases.into_iter().map(|lease| Box::new(lease) as Box<dyn Held + 'p>));
        held.extend(graphs.into_iter().map(|graph| Box::new(graph) as Box<dyn Held>));
        held.extend(execs.into_iter().chain(new_execs).map(|exec| Box::new(exec) as Box<dyn Held>));
        while !held.is_empty() {
            drop(held.swap_remove(rng.below(held.len())));
        }
    }

    /// Synchronizes what can be, then drops everything: graphs and executables in a random
    /// order, launches perhaps still pending.
    fn finish(mut self, rng: &mut Rng) -> Leftovers {
        let mut stranded = 0;
        for slot in &self.slots {
            let status = slot.stream.capture_status();
            note("StreamRef::capture_status", &status);
            match status {
                Ok(CaptureStatus::None) => {
                    note("StreamRef::synchronize", &slot.stream.synchronize());
                }
                Ok(_) => stranded += 1,
                Err(_) => {}
            }
        }
        while !self.graphs.is_empty() || !self.execs.is_empty() {
            if self.execs.is_empty() || (!self.graphs.is_empty() && coin(rng)) {
                let index = rng.below(self.graphs.len());
                drop(self.graphs.swap_remove(index));
            } else {
                let index = rng.below(self.execs.len());
                drop(self.execs.swap_remove(index));
            }
        }
        while !self.events.is_empty() {
            let index = rng.below(self.events.len());
            drop(self.events.swap_remove(index));
        }
        while !self.slots.is_empty() {
            let index = rng.below(self.slots.len());
            drop(self.slots.swap_remove(index));
        }
        Leftovers { tokens: self.tokens, graph_tokens: self.graph_tokens, completions: self.completions, stranded }
    }
}

/// A few random operations on the shared streams, on a thread of a `Threads` operation. No
/// capture is active meanwhile. The main thread's per-thread stream is refused here.
fn thread_ops(thread: usize, seed: u64, shared: &Shared<'_>) -> Vec<Arc<AtomicU8>> {
    let mut rng = Rng::new(seed);
    let mut tokens = Vec::new();
    let mut own_default_used = false;
    let device = shared.device;
    let streams = shared.streams;
    for step in 0..3 + rng.below(6) {
        let what = format!("thread {thread} step {step}");
        let action = rng.below(12);
        let s = streams.get(rng.below(streams.len().max(1))).copied();
        let other = streams.get(rng.below(streams.len().max(1))).copied();
        let (Some(s), Some(other)) = (s, other) else {
            // No shared stream: only this thread's own.
            let mine = BuiltinStream::per_thread(device);
            note(&what, &cuda_stream_tests::empty(&mine));
            own_default_used = true;
            continue;
        };
        let bound = is_thread_bound(s);
        match action {
            0 => {
                // The launch helper makes no thread check: the main thread's per-thread handle
                // means this thread's own per-thread stream here.
                own_default_used |= bound;
                note(&what, &kernel(s, shared.log, byte(&mut rng), byte(&mut rng)));
            }
            1 => {
                let result = s.query();
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
            2 => {
                let result = s.synchronize();
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
            3 => {
                let result = s.record_event().and_then(|event| other.wait_event(&event));
                note(&what, &result);
                expect_wrong_thread(bound || is_thread_bound(other), &what, &result);
            }
            4 => {
                let result = other.wait_stream(s);
                note(&what, &result);
                expect_wrong_thread(bound || is_thread_bound(other), &what, &result);
            }
            5 => {
                if shared.events.is_empty() {
                    skip();
                    continue;
                }
                let result = s.wait_event(shared.events[rng.below(shared.events.len())]);
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
            6 => {
                let (result, state) = once_host_fn(s, rng.below(4) == 0, coin(&mut rng));
                expect_wrong_thread(bound, &what, &result);
                tokens.push(state);
            }
            7 => {
                let lease = shared.pool.acquire();
                note(&what, &lease);
                if let Ok(lease) = lease {
                    note(&what, &cuda_stream_tests::empty(&lease));
                    if coin(&mut rng) {
                        tokens.push(once_host_fn(&lease, false, false).1);
                    }
                    let result = s.wait_stream(&lease);
                    note(&what, &result);
                    expect_wrong_thread(bound, &what, &result);
                }
            }
            8 => {
                let inner = [s, other];
                let innermost = inner[1];
                nest(device, &inner, &mut || {
                    let result = StreamRef::with_current(device, |current| {
                        assert!(current == innermost, "{what}: with_current sees the innermost as_current");
                        current.query()
                    });
                    note(&what, &result);
                    expect_wrong_thread(is_thread_bound(innermost), &what, &result);
                });
                expect_nothing_current(device);
            }
            9 => {
                let options = if coin(&mut rng) { StreamOptions::non_blocking() } else { StreamOptions::default() };
                let mine = Stream::new(device, options);
                note(&what, &mine);
                if let Ok(mine) = mine {
                    note(&what, &kernel(&mine, shared.log, byte(&mut rng), byte(&mut rng)));
                    tokens.push(once_host_fn(&mine, rng.below(4) == 0, coin(&mut rng)).1);
                    let result = mine.wait_stream(s);
                    note(&what, &result);
                    expect_wrong_thread(bound, &what, &result);
                    if coin(&mut rng) {
                        note(&what, &mine.destroy());
                    }
                }
            }
            10 => {
                let mine = BuiltinStream::per_thread(device);
                note(&what, &cuda_stream_tests::empty(&mine));
                note(&what, &mine.query());
                own_default_used = true;
            }
            _ => {
                let result = block_on(s.completion());
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
        }
    }
    if own_default_used {
        // Nothing of this thread's own default stream is left pending when the thread exits.
        note("per-thread stream synchronize", &BuiltinStream::per_thread(device).synchronize());
    }
    tokens
}

/// Runs the program of `seed` and checks that it left nothing behind.
fn run_program(device: Device, range: PriorityRange, log: &TagLog, seed: u64, baseline: (isize, isize, isize)) {
    let run = Run { seed, ops: generate(seed) };
    let mut rng = Rng::new(seed ^ 0x00ff_5eed_00ff_5eed);
    let options = if coin(&mut rng) { StreamOptions::non_blocking() } else { StreamOptions::default() };
    let pool = StreamPool::new(device, options, 1 + rng.below(3));
    note("StreamPool::new", &pool);
    let pool = match pool {
        Ok(pool) => pool,
        Err(error) => panic!("api fuzzer: seed {seed}: a pool without a priority is always made: {error}"),
    };
    let mut world = World::new(device, range, &pool, log);
    let mut next = 0;
    while next < run.ops.len() {
        let op = run.ops[next];
        if let Op::BeginCapture { .. } = op {
            next = world.capture_block(&run, next);
        } else {
            guarded(&run, next, || world.exec(op, None));
            next += 1;
        }
    }
    let end = run.ops.len();
    let mut leftovers = None;
    guarded(&run, end, || leftovers = Some(world.finish(&mut rng)));
    drop(pool);
    let Some(leftovers) = leftovers else { unreachable!("finish either returns or panics") };
    guarded(&run, end, || check_leftovers(device, &leftovers, baseline));
}

/// After a program: its work is done, every closure freed, every completion resolved, and the
/// live counts back at the baseline.
fn check_leftovers(device: Device, leftovers: &Leftovers, baseline: (isize, isize, isize)) {
    let synced = device.synchronize();
    note("Device::synchronize", &synced);
    if leftovers.stranded == 0 {
        assert!(synced.is_ok(), "the device synchronizes once no capture is left: {synced:?}");
    } else {
        let _ =
            writeln!(std::io::stderr(), "api fuzzer: {} streams still capturing after the program", leftovers.stranded);
    }
    let freed = |state: &Arc<AtomicU8>| state.load(Ordering::SeqCst) & DROPPED != 0;
    let settled = || {
        live_host_fns() == baseline.2
            && leftovers.tokens.iter().all(freed)
            && leftovers.graph_tokens.iter().all(freed)
            && leftovers.completions.iter().all(Completion::is_complete)
    };
    let describe = || {
        format!(
            "{} live host closures (baseline {}), {} of {} once-closures and {} of {} graph closures (of which {} ran) \
             not freed, {} of {} completions unresolved",
            live_host_fns(),
            baseline.2,
            leftovers.tokens.iter().filter(|state| !freed(state)).count(),
            leftovers.tokens.len(),
            leftovers.graph_tokens.iter().filter(|state| !freed(state)).count(),
            leftovers.graph_tokens.len(),
            leftovers
                .graph_tokens
                .iter()
                .filter(|state| !freed(state) && state.load(Ordering::SeqCst) & RAN != 0)
                .count(),
            leftovers.completions.iter().filter(|completion| !completion.is_complete()).count(),
            leftovers.completions.len(),
        )
    };
    if poll_until(SETTLE, settled).is_none() {
        let passive = describe();
        // Diagnosis: does more CUDA activity make CUDA release them?
        let mut nudges = 0;
        let nudged = poll_until(SETTLE, || {
            nudges += 1;
            let _ = device.synchronize();
            if let Ok(stream) = Stream::new(device, StreamOptions::non_blocking()) {
                let _ = cuda_stream_tests::empty(&stream);
                let _ = stream.synchronize();
            }
            settled()
        });
        panic!(
            "{SETTLE:?} after the program: {passive}; then after {nudges} rounds of further CUDA calls: {} ({})",
            describe(),
            if nudged.is_some() { "released" } else { "still not released" }
        );
    }
    assert_eq!(live_streams(), baseline.0, "live streams are back at the baseline");
    assert_eq!(live_events(), baseline.1, "live events are back at the baseline");
    assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0, "a host closure ran after it was dropped");
    assert_eq!(
        REFUSALS_MISSED.load(Ordering::SeqCst),
        0,
        "a crate call inside a host function was not refused with InsideHostFn"
    );
}

// ---------------------------------------------------------------------------------------------
// Watchdog
// ---------------------------------------------------------------------------------------------

static PROGRESS_SEED: AtomicU64 = AtomicU64::new(0);
static PROGRESS_STEP: AtomicUsize = AtomicUsize::new(0);
static PROGRESS_SINCE_MS: AtomicU64 = AtomicU64::new(0);
static WATCHING: AtomicBool = AtomicBool::new(false);

fn clock_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Records that step `step` of the program of `seed` starts now.
fn progress(seed: u64, step: usize) {
    PROGRESS_SEED.store(seed, Ordering::SeqCst);
    PROGRESS_STEP.store(step, Ordering::SeqCst);
    PROGRESS_SINCE_MS.store(clock_ms(), Ordering::SeqCst);
}

/// Watches the steps while alive: aborts the process, saying where, when one takes longer than
/// `limit` (a hang would otherwise only end at the runner's timeout, with no seed). It makes no
/// CUDA call, so it never disturbs a Global capture.
struct Watchdog;

impl Watchdog {
    fn start(limit: Duration) -> Watchdog {
        WATCHING.store(true, Ordering::SeqCst);
        progress(0, 0);
        let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        let spawned = std::thread::Builder::new().name("api-fuzzer-watchdog".into()).spawn(move || {
            while WATCHING.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(250));
                let stuck = clock_ms().saturating_sub(PROGRESS_SINCE_MS.load(Ordering::SeqCst));
                if WATCHING.load(Ordering::SeqCst) && stuck > limit_ms {
                    let seed = PROGRESS_SEED.load(Ordering::SeqCst);
                    let _ = writeln!(
                        std::io::stderr(),
                        "api fuzzer: HANG: seed {seed}, step #{} has not returned for {limit:?} (step = the op index; \
                         the program's length means its end and cleanup); run it alone with {SEED_VAR}={seed}. \
                         Aborting.",
                        PROGRESS_STEP.load(Ordering::SeqCst),
                    );
                    std::process::abort();
                }
            }
        });
        spawned.expect("the watchdog thread starts");
        Watchdog
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        WATCHING.store(false, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

fn seeds() -> std::ops::Range<u64> {
    if let Ok(seed) = std::env::var(SEED_VAR) {
        let seed: u64 = seed.trim().parse().unwrap_or_else(|_| panic!("{SEED_VAR} must be an integer, got {seed:?}"));
        return seed..seed + 1;
    }
    let number = |name: &str| std::env::var(name).ok().and_then(|value| value.trim().parse::<u64>().ok());
    let first = number(FIRST_VAR).unwrap_or(0);
    let programs = number(PROGRAMS_VAR).unwrap_or_else(|| scaled(1_000, 50) as u64);
    first..first + programs
}

#[test]
fn random_api_programs_return_typed_results_and_leave_nothing_behind() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let range = device.priority_range().expect("the device's priority range");
    let log = TagLog::new(1024).expect("a tag log");
    // Warm up what the crate creates once (per-thread marker events, the device's priority
    // range), so that the baseline is steady.
    {
        let warm = Stream::new(device, StreamOptions::non_blocking()).expect("a stream");
        warm.wait_stream(BuiltinStream::legacy(device)).expect("wait_stream");
        warm.synchronize().expect("synchronize");
    }
    let baseline = (live_streams(), live_events(), live_host_fns());
    let seeds = seeds();
    let started = Instant::now();
    {
        let _watchdog = Watchdog::start(Duration::from_secs(scaled(60, 600) as u64));
        for seed in seeds.clone() {
            run_program(device, range, &log, seed, baseline);
        }
    }
    let kinds = ERROR_KINDS.lock().unwrap_or_else(PoisonError::into_inner);
    let kinds: Vec<String> = kinds.iter().map(|(kind, count)| format!("{kind} x{count}")).collect();
    eprintln!(
        "api fuzzer: {} programs (seeds {}..{}), {} calls, {} Ok, {} typed errors, {} host closures run, {} violations",
        seeds.end - seeds.start,
        seeds.start,
        seeds.end,
        CALLS.load(Ordering::SeqCst),
        OKS.load(Ordering::SeqCst),
        ERRORS.load(Ordering::SeqCst),
        HOST_RUNS.load(Ordering::SeqCst),
        VIOLATIONS.load(Ordering::SeqCst),
    );
    eprintln!(
        "api fuzzer: {:.1?}; {} ops skipped as unsafe to run then; {} host callbacks saw an error status; errors: {}",
        started.elapsed(),
        SKIPPED.load(Ordering::SeqCst),
        CALLBACK_ERRORS.load(Ordering::SeqCst),
        if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") },
    );
    assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0, "no host closure may run after it was dropped");
    assert_eq!(CALLS.load(Ordering::SeqCst), OKS.load(Ordering::SeqCst) + ERRORS.load(Ordering::SeqCst));
}

#[test]
fn programs_are_reproducible_and_use_every_operation() {
    let mut kinds = std::collections::HashSet::new();
    for seed in 0..500 {
        let ops = generate(seed);
        assert_eq!(ops, generate(seed), "seed {seed} always gives the same program");
        assert!((40..=80).contains(&ops.len()), "seed {seed}: {} operations", ops.len());
        kinds.extend(ops.iter().map(std::mem::discriminant));
    }
    assert_eq!(kinds.len(), OP_KINDS, "the generator uses every kind of operation");
}
