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
//! threads doing random operations on the program's shared streams.
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
    BorrowedStream, Builtin, BuiltinStream, Capture, CaptureStatus, Completion, Device, Error, Event, EventFlags,
    Graph, GraphExec, NULL_STREAM_IS_PER_THREAD, Ownership, Priority, PriorityRange, Result, Stream, StreamOptions,
    StreamPool, StreamRef, capture, live_events, live_host_fns, live_streams,
};
use cuda_stream_tests::{Current as CurrentStream, HeldStream, Rng, TagLog, block_on, gpu_or_skip, poll_until, scaled};
use std::any::Any;
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
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
// Programs
// ---------------------------------------------------------------------------------------------

/// One operation; the `u32` picks choose operands modulo what exists when it runs.
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
    DeviceSync,
}

/// How many kinds of [`Op`] there are.
const OP_KINDS: usize = 32;

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
    generation: u64,
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

    /// Updates what is known of event `index` after a record (`ok`: it succeeded).
    fn recorded(&mut self, index: usize, ok: bool, generation: Option<u64>) {
        let event = &mut self.events[index];
        if ok {
            event.recorded = true;
        }
        match generation {
            // During a capture the record may be a captured one, whatever the stream.
            Some(generation) => event.taint = Some(generation),
            None if ok => event.taint = None,
            None => {}
        }
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
                    self.events.push(Ev { event: Arc::new(event), timing, recorded: false, taint: None });
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
                let ok = note("StreamRef::record", &stream.record(&self.events[index].event));
                self.recorded(index, ok, generation);
            }
            Op::RecordEvent { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let event = stream.record_event();
                note("StreamRef::record_event", &event);
                if let Ok(event) = event {
                    if self.events.len() < MAX_EVENTS {
                        self.events.push(Ev {
                            event: Arc::new(event),
                            timing: false,
                            recorded: true,
                            taint: generation,
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
                match action % 4 {
                    1 if settled => {
                        note("Event::synchronize", &event.event.synchronize());
                    }
                    2 => {
                        let handle = event.event.ipc_handle();
                        note("Event::ipc_handle", &handle);
                        assert!(
                            matches!(handle, Err(Error::NotInterprocess)),
                            "ipc_handle of an event made without the interprocess flag must be NotInterprocess"
                        );
                    }
                    3 if settled => {
                        let completion = event.event.completion();
                        note_infallible();
                        self.completions.push(completion);
                    }
                    _ => {
                        note("Event::query", &event.event.query());
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
                if !end.timing || !start.timing {
                    assert!(
                        matches!(elapsed, Err(Error::TimingDisabled | Error::EventNotRecorded)),
                        "elapsed with an event made without timing must be refused: {elapsed:?}"
                    );
                } else if !end.recorded || !start.recorded {
                    assert!(
                        matches!(elapsed, Err(Error::EventNotRecorded)),
                        "elapsed with an event never recorded must be EventNotRecorded: {elapsed:?}"
                    );
                }
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
                        let ok = note("BorrowedStream record", &view.record(&self.events[index].event));
                        record = Some((index, ok));
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
        if let Some((index, ok)) = record {
            self.recorded(index, ok, generation);
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
                    active = Some(Active { capture, origin: &origin, generation });
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

    /// Joins back every stream that joined the capture, then ends it (or drops the guard).
    fn end_capture(&mut self, active: Active<'_>, discard: bool) {
        let Active { capture, origin, .. } = active;
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
        if discard {
            drop(capture);
            note_infallible();
        } else {
            let graph = capture.end();
            note("Capture::end", &graph);
            if let Ok(graph) = graph {
                if self.graphs.len() < MAX_GRAPHS {
                    self.graphs.push(graph);
                }
            }
        }
        let status = origin.capture_status();
        note("StreamRef::capture_status", &status);
        assert!(
            matches!(status, Ok(CaptureStatus::None)),
            "the captured stream is out of capture once the capture ended: {status:?}"
        );
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
