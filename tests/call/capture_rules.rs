//! Calls that would invalidate a capture begun through the crate are refused with
//! `Error::CaptureMisuse` before CUDA sees them, and the capture survives: each scenario below
//! captures a tag kernel before and after the refused calls, ends the capture and replays the
//! graph, whose two tags in the mapped-memory log prove the capture was never broken. The calls
//! are made from the capturing thread and from another thread; neither leaves a runtime last
//! error behind. Controls make the same kind of call through raw `cuda_stream::sys` during a
//! capture of the crate and observe CUDA invalidate it (where NVIDIA's programming guide or the
//! probes of design.md say it does), and that the failed end still uncounts the capture.
//!
//! The rules are in `cuda_stream::capture`'s docs ("Calls refused during a capture"), and call by
//! call in their table ("Every call's rule"): `every_call_follows_its_rule_in_the_capture_docs`
//! makes each call of that table during a capture and checks its rule, and
//! `the_capture_docs_table_and_this_files_table_name_the_same_calls_and_rules` (no GPU needed)
//! keeps the two tables equal.

use cuda_stream::{
    AccessPolicyWindow, AccessProperty, BorrowedStream, BuiltinStream, Capture, CaptureMode, CaptureStatus, Device,
    DeviceBuffer, DeviceWords, Error, Event, EventFlags, Graph, GraphExec, GraphOutput, InstantiateOptions,
    LaunchConfig, MappedWords, MemOp, MemOpSupport, MemPool, NULL_STREAM_IS_PER_THREAD, PinnedBuffer, RecordFlags,
    Result, SmPartition, Stream, StreamOptions, StreamPool, StreamRef, SyncPolicy, WaitValue, capture, sys,
};
use cuda_stream_tests::non_blocking_stream;
use cuda_stream_tests::{TagLog, block_on, ffi, gpu_or_skip, take_last_error};
use cudarc::driver::CudaContext;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// One test at a time: a capture in progress is process-wide state that the rules read (a Global
/// capture refuses every thread's synchronizes; any capture refuses its device's legacy stream).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The capture modes, as values (the crate's modes are types).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Mode {
    Global,
    ThreadLocal,
    Relaxed,
}

const MODES: [Mode; 3] = [Mode::Global, Mode::ThreadLocal, Mode::Relaxed];

/// Which thread makes the calls under test.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Caller {
    /// The thread that began (and will end) the capture.
    CapturingThread,
    /// A thread of its own, while the capture is in progress on the capturing thread.
    OtherThread,
}

const CALLERS: [Caller; 2] = [Caller::CapturingThread, Caller::OtherThread];

/// What the calls under test may use: the captured stream, an idle stream outside the capture,
/// an event recorded (and completed) before the capture began, memory made before it, and a
/// place for what must outlive the capture's end and its replay (events recorded into the
/// capture, streams that joined it).
struct Scene<'a> {
    device: Device,
    captured: &'a StreamRef,
    idle: &'a StreamRef,
    event: &'a Event,
    keep: &'a Mutex<Vec<Box<dyn Any + Send>>>,
    /// A buffer whose home is a stream of its own, outside the capture.
    buffer: &'a Mutex<DeviceBuffer<u32, Stream>>,
    /// Two buffers whose home is the captured stream.
    captured_home: &'a (dyn CapturedHome + Sync + 'a),
    pinned: &'a Mutex<PinnedBuffer<u32>>,
    pool: &'a MemPool,
    words: &'a MappedWords<u32>,
    device_words: &'a DeviceWords<u32>,
    /// A graph's output that its executable's launch left (made before the capture).
    output: &'a Mutex<(GraphOutput<u32>, GraphExec)>,
}

/// Buffers whose home is the captured stream.
trait CapturedHome {
    /// The first one's `to_vec`.
    fn to_vec(&self) -> Result<()>;
    /// Drops the last one.
    fn drop_one(&self);
}

impl CapturedHome for Mutex<Vec<DeviceBuffer<u32, &StreamRef>>> {
    fn to_vec(&self) -> Result<()> {
        lock(self)[0].to_vec().map(drop)
    }

    fn drop_one(&self) {
        drop(lock(self).pop().expect("two buffers"));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Each call's name and result.
type Outcomes = Vec<(&'static str, Result<()>)>;

type Calls = dyn Fn(&Scene<'_>) -> Outcomes + Sync;

/// Makes `calls` on `caller`'s thread; returns their outcomes and, read on that same thread
/// right after them, the runtime's last error.
fn call_from(caller: Caller, scene: &Scene<'_>, calls: &Calls) -> (Outcomes, sys::cudaError_t) {
    let run = || {
        let outcomes = calls(scene);
        (outcomes, take_last_error())
    };
    match caller {
        Caller::CapturingThread => run(),
        Caller::OtherThread => std::thread::scope(|scope| scope.spawn(run).join().unwrap()),
    }
}

/// Captures a new stream (blocking or not) in `mode`: tag 1, `calls` made by `caller`, tag 2.
/// Checks that the calls left no last error, that the capture is still active, that it ends,
/// and that its graph, launched, writes 1 then 2. Returns the calls' outcomes.
fn capture_around(device: Device, mode: Mode, blocking: bool, caller: Caller, calls: &Calls) -> Outcomes {
    capture_around_with(device, mode, blocking, caller, calls, None)
}

/// Calls that need the capture's guard, made on the capturing thread (a Global or ThreadLocal
/// guard is `!Send`).
type GuardCalls = dyn Fn(&mut dyn Guard, &Scene<'_>) -> Outcomes;

/// [`capture_around`], and after `calls`, on the capturing thread, `guard_calls`.
fn capture_around_with(
    device: Device,
    mode: Mode,
    blocking: bool,
    caller: Caller,
    calls: &Calls,
    guard_calls: Option<&GuardCalls>,
) -> Outcomes {
    match mode {
        Mode::Global => capture_around_in(device, capture::Global, blocking, caller, calls, guard_calls),
        Mode::ThreadLocal => capture_around_in(device, capture::ThreadLocal, blocking, caller, calls, guard_calls),
        Mode::Relaxed => capture_around_in(device, capture::Relaxed, blocking, caller, calls, guard_calls),
    }
}

fn capture_around_in<M: CaptureMode>(
    device: Device,
    mode: M,
    blocking: bool,
    caller: Caller,
    calls: &Calls,
    guard_calls: Option<&GuardCalls>,
) -> Outcomes {
    let context = format!("{mode:?} capture of a {} stream, calls from {caller:?}", kind(blocking));
    // Dropped last: after the graph, its executable and the replay.
    let keep = Mutex::new(Vec::new());
    let log = TagLog::new(4).unwrap();
    let options = if blocking { StreamOptions::default() } else { StreamOptions::non_blocking() };
    let captured = Stream::new(device, options).unwrap();
    let idle = non_blocking_stream(device);
    let event = idle.record_event().unwrap();
    let buffer = Mutex::new(DeviceBuffer::<u32, _>::zeroed(non_blocking_stream(device), 4).unwrap());
    let captured_home =
        Mutex::new((0..2).map(|_| DeviceBuffer::<u32, _>::zeroed(&*captured, 4).unwrap()).collect::<Vec<_>>());
    let pinned = Mutex::new(PinnedBuffer::<u32>::zeroed(4).unwrap());
    let pool = MemPool::new(device).unwrap();
    let words = MappedWords::<u32>::new(4).unwrap();
    let device_words = DeviceWords::<u32>::zeroed(&idle, 4).unwrap();
    let output = Mutex::new(launched_output(&idle));
    captured.synchronize().unwrap();
    idle.synchronize().unwrap();

    let mut capture = captured.begin_capture(mode).unwrap();
    cuda_stream_tests::tag(&captured, &log, 1, Duration::ZERO).unwrap();
    let scene = Scene {
        device,
        captured: &captured,
        idle: &idle,
        event: &event,
        keep: &keep,
        buffer: &buffer,
        captured_home: &captured_home,
        pinned: &pinned,
        pool: &pool,
        words: &words,
        device_words: &device_words,
        output: &output,
    };
    let (mut outcomes, last_error) = call_from(caller, &scene, calls);
    assert_eq!(last_error, sys::cudaError::cudaSuccess, "{context}: the calls left a stale last error");
    if let (Some(guard_calls), Caller::CapturingThread) = (guard_calls, caller) {
        outcomes.extend(guard_calls(&mut capture, &scene));
        assert_eq!(take_last_error(), sys::cudaError::cudaSuccess, "{context}: the guard's calls left a last error");
    }
    cuda_stream_tests::tag(&captured, &log, 2, Duration::ZERO).unwrap();
    assert_eq!(captured.capture_status(), Ok(CaptureStatus::Active), "{context}");
    let graph = capture.end().unwrap_or_else(|error| panic!("{context}: the capture did not survive: {error}"));

    assert_eq!(log.count(), 0, "{context}: captured work does not run");
    let exec = graph.instantiate().unwrap();
    let replay = non_blocking_stream(device);
    exec.launch(&replay).unwrap();
    replay.synchronize().unwrap();
    assert_eq!(log.tags(), [1, 2], "{context}: the graph replays both tags");
    // The output's memory freed (an untaken output stays allocated for good), unless a call
    // that disagreed with its rule left it taken.
    drop(lock(&output).0.take(&idle));
    idle.synchronize().unwrap();
    outcomes
}

/// A graph's output (a capture buffer kept), and the executable whose launch on `stream` left
/// it, once that launch has completed.
fn launched_output(stream: &StreamRef) -> (GraphOutput<u32>, GraphExec) {
    let mut capture = stream.begin_capture(capture::ThreadLocal).unwrap();
    let block = capture.alloc::<u32>(stream, 4).unwrap();
    capture.fill_bytes(stream, &block, .., 0).unwrap();
    let output = capture.keep(block).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(stream).unwrap();
    stream.synchronize().unwrap();
    (output, exec)
}

fn kind(blocking: bool) -> &'static str {
    if blocking { "blocking" } else { "non-blocking" }
}

fn assert_refused(outcomes: &Outcomes, context: &str) {
    for (call, outcome) in outcomes {
        assert!(matches!(outcome, Err(Error::CaptureMisuse(_))), "{context}: {call} must be refused: {outcome:?}");
    }
}

fn assert_allowed(outcomes: &Outcomes, context: &str) {
    for (call, outcome) in outcomes {
        assert!(outcome.is_ok(), "{context}: {call} must be allowed: {outcome:?}");
    }
}

/// Every operation of the crate on `stream` (the legacy stream, under test).
fn every_operation_on(scene: &Scene<'_>, stream: &StreamRef) -> Outcomes {
    vec![
        ("query", stream.query().map(drop)),
        ("synchronize", stream.synchronize()),
        ("record", stream.record(scene.event)),
        ("wait_event", stream.wait_event(scene.event)),
        ("wait_stream on an idle stream", stream.wait_stream(scene.idle)),
        ("an idle stream's wait_stream on it", scene.idle.wait_stream(stream)),
        ("fork", stream.fork().map(drop)),
        ("priority", stream.priority().map(drop)),
        ("is_non_blocking", stream.is_non_blocking().map(drop)),
        ("capture_status", stream.capture_status().map(drop)),
        ("id", stream.id().map(drop)),
        ("launch_host_fn", stream.launch_host_fn(|| ())),
        ("completion", block_on(stream.completion())),
        // SAFETY: the launcher takes a live stream of the current device.
        ("launch", stream.launch("cs_launch_empty", |raw| unsafe { ffi::cs_launch_empty(raw) })),
    ]
}

/// Every operation on the legacy stream, and on handle 0 where it is the legacy stream.
fn legacy_stream_calls(scene: &Scene<'_>) -> Outcomes {
    let mut outcomes = every_operation_on(scene, &BuiltinStream::legacy(scene.device));
    if !NULL_STREAM_IS_PER_THREAD {
        outcomes.extend(every_operation_on(scene, &BuiltinStream::null(scene.device)));
    }
    outcomes
}

#[test]
fn the_legacy_stream_is_refused_while_its_device_captures_and_the_capture_survives() {
    let device = gpu_or_skip!();
    let _serial = serial();
    for mode in MODES {
        for blocking in [true, false] {
            for caller in CALLERS {
                let outcomes = capture_around(device, mode, blocking, caller, &legacy_stream_calls);
                assert_refused(&outcomes, &format!("{mode:?}, {}, {caller:?}", kind(blocking)));
            }
        }
    }
    // A graph launch on the legacy stream is refused too (on the capturing thread: an executable
    // is not Sync).
    let exec = {
        let origin = non_blocking_stream(device);
        let capture = origin.begin_capture(capture::ThreadLocal).unwrap();
        cuda_stream_tests::empty(&origin).unwrap();
        capture.end().unwrap().instantiate().unwrap()
    };
    let captured = Stream::new(device, StreamOptions::default()).unwrap();
    let capture = captured.begin_capture(capture::Global).unwrap();
    let legacy = BuiltinStream::legacy(device);
    assert!(matches!(exec.launch(&legacy), Err(Error::CaptureMisuse(_))));
    assert!(matches!(exec.upload(&legacy), Err(Error::CaptureMisuse(_))));
    // A capture dropped without `end` is uncounted: the legacy stream works again.
    drop(capture);
    exec.launch(&legacy).unwrap();
    legacy.synchronize().unwrap();
    if NULL_STREAM_IS_PER_THREAD {
        // Handle 0 is this thread's per-thread stream: an ordinary stream, not refused.
        let captured = non_blocking_stream(device);
        let capture = captured.begin_capture(capture::Relaxed).unwrap();
        assert_eq!(BuiltinStream::null(device).query(), Ok(true));
        assert!(capture.end().is_ok());
    }
}

#[test]
fn device_synchronize_is_refused_while_its_device_captures_and_the_capture_survives() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let calls = |scene: &Scene<'_>| vec![("Device::synchronize", scene.device.synchronize())];
    for mode in MODES {
        for caller in CALLERS {
            let outcomes = capture_around(device, mode, false, caller, &calls);
            assert_refused(&outcomes, &format!("{mode:?}, {caller:?}"));
        }
    }
    device.synchronize().unwrap();
}

/// Queries and synchronizes of an idle stream and of an event, neither part of the capture.
fn unrelated_queries(scene: &Scene<'_>) -> Outcomes {
    vec![
        ("StreamRef::query", scene.idle.query().map(drop)),
        ("StreamRef::synchronize", scene.idle.synchronize()),
        ("Event::query", scene.event.query().map(drop)),
        ("Event::synchronize", scene.event.synchronize()),
    ]
}

#[test]
fn queries_and_synchronizes_are_refused_where_the_capture_mode_forbids_them() {
    let device = gpu_or_skip!();
    let _serial = serial();
    for mode in MODES {
        for caller in CALLERS {
            let context = format!("{mode:?}, {caller:?}");
            let outcomes = capture_around(device, mode, false, caller, &unrelated_queries);
            // CUDA forbids these "potentially unsafe" calls on the capturing thread of a Global
            // or ThreadLocal capture, and on every thread (in the default Global interaction
            // mode) while a Global capture is in progress; elsewhere they are allowed.
            let forbidden = mode == Mode::Global || (mode == Mode::ThreadLocal && caller == Caller::CapturingThread);
            if forbidden {
                assert_refused(&outcomes, &context);
            } else {
                assert_allowed(&outcomes, &context);
            }
        }
    }
}

#[test]
fn the_capturing_streams_own_query_and_synchronize_are_refused_from_every_thread() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let calls = |scene: &Scene<'_>| {
        vec![("query", scene.captured.query().map(drop)), ("synchronize", scene.captured.synchronize())]
    };
    for mode in MODES {
        for caller in CALLERS {
            let outcomes = capture_around(device, mode, false, caller, &calls);
            assert_refused(&outcomes, &format!("{mode:?}, {caller:?}"));
        }
    }
}

fn code_name(code: sys::cudaError_t) -> &'static str {
    cuda_stream::CudaCode(code.0 as i32).name()
}

/// The name of an error's CUDA code, or its variant.
fn error_name(error: &Error) -> String {
    error.cuda_code().map_or_else(|| format!("{error:?}"), |code| code.name().to_string())
}

/// Control: the raw call the crate refuses. NVIDIA's programming guide: while a stream that is
/// not non-blocking is being captured, "any attempted use of the legacy stream is invalid", and
/// an invalid operation during capture invalidates the capture.
#[test]
fn control_a_raw_legacy_stream_query_invalidates_a_blocking_streams_capture() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let captured = Stream::new(device, StreamOptions::default()).unwrap();
    let capture = captured.begin_capture(capture::Global).unwrap();
    cuda_stream_tests::empty(&captured).unwrap();
    // SAFETY: the legacy stream of the current device (made current by the GPU gate).
    let queried = unsafe { sys::cudaStreamQuery(sys::cudaStreamLegacy) };
    let status = captured.capture_status();
    let ended = capture.end();
    let _ = take_last_error();
    println!(
        "raw cudaStreamQuery(cudaStreamLegacy) during a Global capture of a blocking stream: {}; \
         capture status then: {status:?}; end: {}",
        code_name(queried),
        ended.as_ref().map_or_else(error_name, |_| "Ok".to_string()),
    );
    assert_ne!(queried, sys::cudaError::cudaSuccess, "CUDA refuses the legacy stream");
    let ended = ended.map(drop).unwrap_err();
    assert_eq!(error_name(&ended), "cudaErrorStreamCaptureInvalidated", "CUDA invalidated the capture");
    // The failed end uncounted the capture: the crate uses the legacy stream again.
    BuiltinStream::legacy(device).synchronize().unwrap();
}

/// Control: design.md's probe (CUDA 13.0, driver 580): `cudaDeviceSynchronize` while this thread
/// captures, or while another thread holds a Global capture, fails with
/// `cudaErrorStreamCaptureUnsupported` and invalidates the capture.
#[test]
fn control_a_raw_device_synchronize_invalidates_a_capture_from_either_thread() {
    let device = gpu_or_skip!();
    let _serial = serial();
    for caller in CALLERS {
        let captured = non_blocking_stream(device);
        let capture = captured.begin_capture(capture::Global).unwrap();
        cuda_stream_tests::empty(&captured).unwrap();
        let synchronize = || {
            let _current = device.make_current().unwrap();
            // SAFETY: no arguments.
            let code = unsafe { sys::cudaDeviceSynchronize() };
            let _ = take_last_error();
            code
        };
        let synced = match caller {
            Caller::CapturingThread => synchronize(),
            Caller::OtherThread => std::thread::scope(|scope| scope.spawn(synchronize).join().unwrap()),
        };
        let ended = capture.end();
        let _ = take_last_error();
        println!(
            "raw cudaDeviceSynchronize from the {caller:?} during a Global capture: {}; end: {}",
            code_name(synced),
            ended.as_ref().map_or_else(error_name, |_| "Ok".to_string()),
        );
        assert_eq!(code_name(synced), "cudaErrorStreamCaptureUnsupported", "{caller:?}");
        let ended = ended.map(drop).unwrap_err();
        assert_eq!(error_name(&ended), "cudaErrorStreamCaptureInvalidated", "{caller:?}");
        // The failed end uncounted the capture: the crate synchronizes the device again.
        device.synchronize().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Every call of the capture docs' table ("Every call's rule"), with its rule.

cuda_stream::kernel! {
    static SAXPY = fn cs_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
}

/// The arguments of a SAXPY over no elements: the kernel touches no memory.
fn no_saxpy() -> (f32, *const f32, *mut f32, u32) {
    (0.0, std::ptr::null(), std::ptr::null_mut(), 0)
}

/// A rule of the docs' table (its legend says what each means).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    Captured,
    Allowed,
    Relaxed,
    Refused,
    RefusedByMode,
    AllowedOrRefusedByMode,
    NotRefused,
    NotApplicable,
}

const RULES: [Rule; 8] = [
    Rule::Captured,
    Rule::Allowed,
    Rule::Relaxed,
    Rule::Refused,
    Rule::RefusedByMode,
    Rule::AllowedOrRefusedByMode,
    Rule::NotRefused,
    Rule::NotApplicable,
];

impl Rule {
    /// Its words in the docs' table (in bold, first in a cell).
    fn token(self) -> &'static str {
        match self {
            Rule::Captured => "captured",
            Rule::Allowed => "allowed",
            Rule::Relaxed => "Relaxed",
            Rule::Refused => "refused",
            Rule::RefusedByMode => "refused by mode",
            Rule::AllowedOrRefusedByMode => "allowed or refused by mode",
            Rule::NotRefused => "not refused",
            Rule::NotApplicable => "—",
        }
    }

    fn of_token(token: &str) -> Option<Rule> {
        RULES.into_iter().find(|rule| rule.token() == token)
    }
}

/// What a call must return, in a capture of `mode` with the calls made by `caller`; `None`
/// where the call is not made (CUDA refuses it, or the case does not exist).
fn expected(rule: Rule, mode: Mode, caller: Caller) -> Option<Expect> {
    // CUDA's "potentially unsafe" calls are forbidden on the thread of a Global or ThreadLocal
    // capture, and on every thread (in the default Global interaction mode) during a Global one.
    let forbidden = mode == Mode::Global || (mode == Mode::ThreadLocal && caller == Caller::CapturingThread);
    match rule {
        Rule::Captured | Rule::Allowed | Rule::Relaxed => Some(Expect::Ok),
        Rule::Refused => Some(Expect::Refused),
        Rule::RefusedByMode if forbidden => Some(Expect::Refused),
        Rule::RefusedByMode => Some(Expect::Ok),
        Rule::AllowedOrRefusedByMode if forbidden => Some(Expect::OkOrRefused),
        Rule::AllowedOrRefusedByMode => Some(Expect::Ok),
        Rule::NotRefused | Rule::NotApplicable => None,
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Expect {
    Ok,
    Refused,
    /// Either: which one depends on the crate's free list of words.
    OkOrRefused,
}

/// Which column of the table a call is made for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Side {
    /// On the capturing stream (or an event recorded into the capture).
    OnTheCapture,
    /// On the idle stream, events outside the capture, or nothing of a stream.
    Elsewhere,
}

/// The calls of a capture's guard, whatever its mode.
trait Guard {
    fn launch_host_fn(&mut self, stream: &StreamRef) -> Result<()>;
    fn scratch(&mut self, stream: &StreamRef) -> Result<()>;
    fn alloc(&mut self, stream: &StreamRef) -> Result<()>;
    fn free(&mut self, stream: &StreamRef) -> Result<()>;
    fn memory(&mut self, stream: &StreamRef, which: MemoryCall) -> Result<()>;
}

/// A capture's memory work, on buffers the graph holds.
#[derive(Copy, Clone)]
enum MemoryCall {
    Copy,
    Fill,
    FromPinned,
    ToPinned,
    UseOn,
}

impl<M: CaptureMode> Guard for Capture<'_, M> {
    fn launch_host_fn(&mut self, stream: &StreamRef) -> Result<()> {
        Capture::launch_host_fn(self, stream, || ())
    }

    fn scratch(&mut self, stream: &StreamRef) -> Result<()> {
        Capture::scratch::<u32, _>(self, stream, 4, |_, _| ())
    }

    fn alloc(&mut self, stream: &StreamRef) -> Result<()> {
        let mut block = Capture::alloc::<u32>(self, stream, 4)?;
        Capture::free(self, stream, &mut block)
    }

    /// A block of the captured stream, freed on `stream` (or, refused there, on the captured
    /// stream: the graph is launched more than once).
    fn free(&mut self, stream: &StreamRef) -> Result<()> {
        let own = self.stream();
        let mut block = Capture::alloc::<u32>(self, own, 4)?;
        let freed = Capture::free(self, stream, &mut block);
        if freed.is_err() {
            Capture::free(self, own, &mut block)?;
        }
        freed
    }

    fn memory(&mut self, stream: &StreamRef, which: MemoryCall) -> Result<()> {
        let (buffer, pinned) = shared_memory(stream.device());
        match which {
            MemoryCall::Copy => self.copy(stream, (buffer, ..32), (buffer, 32..)),
            MemoryCall::Fill => self.fill_bytes(stream, buffer, .., 0),
            MemoryCall::FromPinned => self.copy_from_pinned(stream, (buffer, ..), (pinned, ..)),
            MemoryCall::ToPinned => self.copy_to_pinned(stream, (pinned, ..), (buffer, ..)),
            MemoryCall::UseOn => self.use_on(stream, buffer, |_, _| ()),
        }
    }
}

type SharedBuffer = Arc<DeviceBuffer<u8, Arc<Stream>>>;
type SharedPage = Arc<cuda_stream::SharedPinned<u8>>;

/// A buffer of 64 bytes on a stream of its own and page-locked memory of 64, made once, at the
/// first capture's memory call (a new stream, an allocation on a stream outside the capture and
/// page-locked memory are allowed there), that captures' memory work may use: their graphs hold
/// them.
fn shared_memory(device: Device) -> (&'static SharedBuffer, &'static SharedPage) {
    static MEMORY: OnceLock<(SharedBuffer, SharedPage)> = OnceLock::new();
    let (buffer, pinned) = MEMORY.get_or_init(|| {
        let home = Arc::new(non_blocking_stream(device));
        let buffer = Arc::new(DeviceBuffer::new(home, 64).expect("a shared buffer"));
        let pinned =
            Arc::new(cuda_stream::SharedPinned::new(PinnedBuffer::zeroed(64).expect("shared page-locked memory")));
        (buffer, pinned)
    });
    (buffer, pinned)
}

type SceneCall = fn(&Scene<'_>, Side) -> Result<()>;
type GuardCall = fn(&mut dyn Guard, &Scene<'_>, Side) -> Result<()>;

#[derive(Copy, Clone)]
enum Call {
    Scene(SceneCall),
    Guard(GuardCall),
}

/// A row of the docs' table: the call's name as the table writes it (without backticks), its
/// two rules, and the call.
struct Row {
    name: &'static str,
    on_the_capture: Rule,
    elsewhere: Rule,
    call: Call,
}

fn row(name: &'static str, on_the_capture: Rule, elsewhere: Rule, call: SceneCall) -> Row {
    Row { name, on_the_capture, elsewhere, call: Call::Scene(call) }
}

/// The stream a call of `side` uses.
fn on<'a>(scene: &Scene<'a>, side: Side) -> &'a StreamRef {
    match side {
        Side::OnTheCapture => scene.captured,
        Side::Elsewhere => scene.idle,
    }
}

/// Kept until the capture has ended and its graph replayed.
fn keep(scene: &Scene<'_>, item: impl Any + Send) {
    lock(scene.keep).push(Box::new(item));
}

/// A new event with the default flags.
fn new_event(scene: &Scene<'_>) -> Result<Event> {
    Event::new(scene.device, EventFlags::default())
}

/// An event whose last record went into the capture (`OnTheCapture`) or is the scene's event,
/// recorded before it: kept as long as the graph.
fn event_of<'a>(scene: &Scene<'a>, side: Side) -> Result<Arc<Event>> {
    let event = Arc::new(new_event(scene)?);
    on(scene, side).record(&event)?;
    keep(scene, Arc::clone(&event));
    Ok(event)
}

/// A new stream that waits for `scene.captured` (joining the capture) and that the captured
/// stream then waits for: joined back before the end, kept until after it.
fn join_and_rejoin(scene: &Scene<'_>, join: impl FnOnce(&StreamRef) -> Result<()>) -> Result<()> {
    let side = non_blocking_stream(scene.device);
    let joined = join(&side).and_then(|()| scene.captured.wait_stream(&side));
    keep(scene, side);
    joined
}

/// A graph of one empty node.
fn small_graph(device: Device) -> Result<Graph> {
    let mut graph = Graph::new(device)?;
    graph.builder().add_empty_node(&[])?;
    Ok(graph)
}

/// A new stream of its own, outside the capture.
fn other_stream(scene: &Scene<'_>) -> Stream {
    non_blocking_stream(scene.device)
}

/// `result`, with a CUDA error that is not a capture error taken as done (a call CUDA may refuse
/// for its own reasons in a single process, with the runtime's last error cleared).
fn cuda_errors_aside(result: Result<()>) -> Result<()> {
    match result {
        Err(Error::Cuda { code, .. }) if !code.is_capture_error() => {
            let _ = take_last_error();
            Ok(())
        }
        other => other,
    }
}

static CUDARC: OnceLock<Arc<CudaContext>> = OnceLock::new();

fn cudarc_context() -> &'static Arc<CudaContext> {
    CUDARC.get().expect("made before the captures")
}

/// The calls that wrap a handle made elsewhere: from the first on, the process counts with
/// captures this crate cannot see (no call is a fast call any more, for good). The test makes
/// them last, after every other call had its turn in every mode.
const FOREIGN_HANDLE_ROWS: [&str; 7] = [
    "Stream::from_raw_owned",
    "BorrowedStream::borrow_raw",
    "BorrowedStream::borrow_raw_on",
    "BorrowedStream::from_cudarc",
    "StreamRef::to_cudarc",
    "StreamRef::id, of a borrowed stream",
    "StreamRef::is_non_blocking, of a borrowed stream",
];

/// Every call of the docs' table, by the names the table gives them.
#[allow(clippy::too_many_lines)]
fn rows() -> Vec<Row> {
    use Rule::{
        Allowed, AllowedOrRefusedByMode, Captured, NotApplicable, NotRefused, Refused, RefusedByMode,
        Relaxed as RelaxedMode,
    };
    vec![
        row("BuiltinStream::legacy, every call", NotApplicable, Refused, |s, _| {
            for (call, outcome) in legacy_stream_calls(s) {
                assert!(matches!(outcome, Err(Error::CaptureMisuse(_))), "the legacy stream's {call}: {outcome:?}");
            }
            Err(Error::CaptureMisuse("every call on the legacy stream"))
        }),
        row("Stream::new", NotApplicable, Allowed, |s, _| {
            Stream::new(s.device, StreamOptions::non_blocking()).map(drop)
        }),
        row("Stream::destroy", NotApplicable, Allowed, |s, _| other_stream(s).destroy()),
        row("drop(Stream)", NotApplicable, Allowed, |s, _| {
            drop(other_stream(s));
            Ok(())
        }),
        row("Stream::from_raw_owned", NotApplicable, Allowed, |s, _| {
            let raw = other_stream(s).into_raw();
            // SAFETY: a live stream of the device, whose ownership is handed over.
            unsafe { Stream::from_raw_owned(raw, s.device) }.map(drop)
        }),
        row("BorrowedStream::borrow_raw", Allowed, Allowed, |s, side| {
            // SAFETY: a live stream, borrowed while it lives; no capture transition of it
            // overlaps the borrow's calls.
            unsafe { BorrowedStream::borrow_raw(on(s, side).as_raw()) }.map(drop)
        }),
        row("BorrowedStream::borrow_raw_on", Allowed, Allowed, |s, side| {
            // SAFETY: as above, on its device.
            unsafe { BorrowedStream::borrow_raw_on(on(s, side).as_raw(), s.device) }.map(drop)
        }),
        row("BorrowedStream::from_cudarc", Allowed, Allowed, |s, side| {
            // SAFETY: the handle outlives cudarc's wrapper, which borrows it.
            let theirs = unsafe { on(s, side).to_cudarc(cudarc_context()) }?;
            // SAFETY: cudarc's stream lives while it is borrowed.
            unsafe { BorrowedStream::from_cudarc(&theirs) }.map(drop)
        }),
        row("StreamRef::to_cudarc", Allowed, Allowed, |s, side| {
            // SAFETY: the handle outlives cudarc's wrapper, dropped here.
            unsafe { on(s, side).to_cudarc(cudarc_context()) }.map(drop)
        }),
        row("StreamRef::id", Allowed, Allowed, |s, side| on(s, side).id().map(drop)),
        row("StreamRef::id, of a borrowed stream", Refused, Allowed, |s, side| {
            // SAFETY: as in `borrow_raw`'s row.
            unsafe { BorrowedStream::borrow_raw(on(s, side).as_raw()) }?.id().map(drop)
        }),
        row("StreamRef::is_non_blocking", Allowed, Allowed, |s, side| on(s, side).is_non_blocking().map(drop)),
        row("StreamRef::is_non_blocking, of a borrowed stream", Refused, Allowed, |s, side| {
            // SAFETY: as in `borrow_raw`'s row.
            unsafe { BorrowedStream::borrow_raw(on(s, side).as_raw()) }?.is_non_blocking().map(drop)
        }),
        row("StreamRef::priority", Allowed, Allowed, |s, side| on(s, side).priority().map(drop)),
        row("StreamRef::capture_status", Allowed, Allowed, |s, side| on(s, side).capture_status().map(drop)),
        row("StreamRef::capture_info", Allowed, Allowed, |s, side| on(s, side).capture_info().map(drop)),
        row("StreamRef::query", Refused, RefusedByMode, |s, side| on(s, side).query().map(drop)),
        row("StreamRef::synchronize", Refused, RefusedByMode, |s, side| on(s, side).synchronize()),
        row("StreamRef::fork", Captured, Allowed, |s, side| match side {
            Side::OnTheCapture => {
                // The child joins the capture; the captured stream joins it back.
                let child = s.captured.fork()?;
                let joined = s.captured.wait_stream(&child);
                keep(s, child);
                joined
            }
            Side::Elsewhere => s.idle.fork().map(drop),
        }),
        row("StreamRef::record", Captured, Allowed, |s, side| event_of(s, side).map(drop)),
        row("Event::record", Captured, Allowed, |s, side| {
            let event = Arc::new(new_event(s)?);
            let recorded = event.record(on(s, side));
            keep(s, event);
            recorded
        }),
        row("StreamRef::record_event", Captured, Allowed, |s, side| {
            on(s, side).record_event().map(|event| keep(s, event))
        }),
        row("StreamRef::record_with", Captured, Allowed, |s, side| {
            let event = Arc::new(new_event(s)?);
            let recorded = on(s, side).record_with(&event, RecordFlags::external());
            keep(s, event);
            recorded
        }),
        row("StreamRef::record_event_with", Captured, Allowed, |s, side| {
            on(s, side).record_event_with(EventFlags::default(), RecordFlags::external()).map(|event| keep(s, event))
        }),
        row("StreamRef::wait_event", Captured, Allowed, |s, side| match side {
            Side::OnTheCapture => {
                let event = event_of(s, side)?;
                s.captured.wait_event(&event)?;
                join_and_rejoin(s, |side| side.wait_event(&event))
            }
            Side::Elsewhere => s.idle.wait_event(s.event),
        }),
        row(
            "StreamRef::wait_event, on a capturing stream, of an event recorded outside",
            NotRefused,
            NotApplicable,
            |s, _| s.captured.wait_event(s.event),
        ),
        row("StreamRef::wait_stream", Captured, Allowed, |s, side| match side {
            Side::OnTheCapture => {
                s.captured.wait_stream(s.idle)?;
                join_and_rejoin(s, |side| side.wait_stream(s.captured))
            }
            Side::Elsewhere => s.idle.wait_stream(other_stream(s)),
        }),
        row("StreamRef::wait_stream, between streams of two captures", Refused, NotApplicable, |s, _| {
            let other = other_stream(s);
            let capture = other.begin_capture(capture::ThreadLocal)?;
            let waited = s.captured.wait_stream(&other);
            drop(capture);
            waited
        }),
        row("StreamRef::launch", Captured, Allowed, |s, side| {
            // SAFETY: the launcher takes a live stream of the current device.
            on(s, side).launch("cs_launch_empty", |raw| unsafe { ffi::cs_launch_empty(raw) })
        }),
        row("StreamRef::launch_host_fn", Refused, Allowed, |s, side| on(s, side).launch_host_fn(|| ())),
        row("StreamRef::launch_host_callback", Refused, Allowed, |s, side| on(s, side).launch_host_callback(|_| ())),
        row("StreamRef::completion", Refused, Allowed, |s, side| block_on(on(s, side).completion())),
        row("StreamRef::set_sync_policy", Refused, Allowed, |s, side| match side {
            Side::OnTheCapture => s.captured.set_sync_policy(SyncPolicy::Auto),
            Side::Elsewhere => s.idle.set_sync_policy(SyncPolicy::Auto),
        }),
        row("StreamRef::sync_policy", Refused, Allowed, |s, side| on(s, side).sync_policy().map(drop)),
        row("StreamRef::set_access_policy_window", Refused, Allowed, |s, side| {
            // A window over memory of its own (16 bytes), with properties every window may use.
            // Not the scene's buffer: a buffer whose address was handed out is one no graph can
            // hold, and the scene's buffer goes into the capture by later calls.
            let memory = DeviceBuffer::<u32, _>::zeroed(non_blocking_stream(s.device), 4)?;
            let window = AccessPolicyWindow {
                base_ptr: memory.as_ptr().cast_mut().cast(),
                num_bytes: 16,
                hit_ratio: 0.5,
                hit_prop: AccessProperty::Streaming,
                miss_prop: AccessProperty::Normal,
            };
            let set = on(s, side).set_access_policy_window(window);
            // Kept to the scene's end: the window never names freed memory meanwhile.
            lock(s.keep).push(Box::new(memory));
            set
        }),
        row("StreamRef::access_policy_window", Refused, Allowed, |s, side| {
            on(s, side).access_policy_window().map(drop)
        }),
        row("StreamRef::declare_accesses", Allowed, Allowed, |s, side| {
            on(s, side).declare_accesses("capture rules", &[])
        }),
        row("StreamRef::as_current_with_device", Allowed, Allowed, |s, side| on(s, side).as_current_with_device(|| ())),
        row("StreamRef::wait_value_raw", Captured, Allowed, |s, side| {
            // SAFETY: a mapped word that lives as long as the scene, which outlives the graph's
            // replay; every value meets the wait.
            unsafe { on(s, side).wait_value_raw(s.words.as_ptr(), WaitValue::greater_or_equal(0)) }
        }),
        row("StreamRef::write_value_raw", Captured, Allowed, |s, side| {
            // SAFETY: as above; word 3 of 4, which nothing reads.
            unsafe { on(s, side).write_value_raw(s.words.as_ptr().wrapping_add(3), 1) }
        }),
        row("StreamPool::acquire", NotApplicable, Allowed, |s, _| {
            let pool = StreamPool::new(s.device, StreamOptions::non_blocking(), 1)?;
            pool.acquire().map(drop)
        }),
        row("drop(StreamLease)", NotApplicable, Allowed, |s, _| {
            let pool = StreamPool::new(s.device, StreamOptions::non_blocking(), 1)?;
            drop(pool.acquire()?);
            Ok(())
        }),
        row("Device::split_sms", NotApplicable, Allowed, |s, _| match s.device.split_sms(8, 1) {
            Ok(partitions) => {
                keep(s, partitions);
                Ok(())
            }
            // Too few SMs for a partition here: nothing to check.
            Err(Error::SmSplit { .. }) => Ok(()),
            Err(error) => Err(error),
        }),
        row("SmPartition::stream", NotApplicable, Allowed, |s, _| {
            let partition: SmPartition = match s.device.split_sms(8, 1) {
                Ok(mut partitions) => partitions.remove(0),
                Err(Error::SmSplit { .. }) => return Ok(()),
                Err(error) => return Err(error),
            };
            let stream = partition.stream(None);
            keep(s, partition);
            stream.map(|stream| keep(s, stream))
        }),
        row("StreamRef::begin_capture", Refused, Allowed, |s, side| match side {
            Side::OnTheCapture => s.captured.begin_capture(capture::ThreadLocal).map(drop),
            Side::Elsewhere => other_stream(s).begin_capture(capture::ThreadLocal)?.end().map(drop),
        }),
        row("StreamRef::begin_capture_into", Refused, Allowed, |s, side| {
            let graph = Graph::new(s.device)?;
            match side {
                Side::OnTheCapture => s.captured.begin_capture_into(graph, capture::ThreadLocal).map(drop),
                Side::Elsewhere => other_stream(s).begin_capture_into(graph, capture::ThreadLocal)?.end().map(drop),
            }
        }),
        row("GraphBuilder::capture", Refused, Allowed, |s, side| {
            let mut graph = Graph::new(s.device)?;
            let mut builder = graph.builder();
            match side {
                Side::OnTheCapture => builder.capture(s.captured, capture::ThreadLocal).map(drop),
                Side::Elsewhere => builder.capture(&other_stream(s), capture::ThreadLocal)?.end(),
            }
        }),
        Row {
            name: "Capture::launch_host_fn",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.launch_host_fn(on(s, side))),
        },
        Row {
            name: "Capture::scratch",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.scratch(on(s, side))),
        },
        Row {
            name: "Capture::alloc",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.alloc(on(s, side))),
        },
        Row {
            name: "Capture::free",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.free(on(s, side))),
        },
        Row {
            name: "Capture::copy",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.memory(on(s, side), MemoryCall::Copy)),
        },
        Row {
            name: "Capture::fill_bytes",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.memory(on(s, side), MemoryCall::Fill)),
        },
        Row {
            name: "Capture::copy_from_pinned",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.memory(on(s, side), MemoryCall::FromPinned)),
        },
        Row {
            name: "Capture::copy_to_pinned",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.memory(on(s, side), MemoryCall::ToPinned)),
        },
        Row {
            name: "Capture::use_on",
            on_the_capture: Captured,
            elsewhere: Refused,
            call: Call::Guard(|guard, s, side| guard.memory(on(s, side), MemoryCall::UseOn)),
        },
        row("Event::new", NotApplicable, Allowed, |s, _| new_event(s).map(drop)),
        row("drop(Event)", NotApplicable, Allowed, |s, _| {
            drop(new_event(s)?);
            Ok(())
        }),
        row("Event::ipc_handle", NotApplicable, Allowed, |s, _| {
            let flags = EventFlags { interprocess: true, ..EventFlags::default() };
            Event::new(s.device, flags)?.ipc_handle().map(drop)
        }),
        row("Event::from_ipc_handle", NotApplicable, Allowed, |s, _| {
            let flags = EventFlags { interprocess: true, ..EventFlags::default() };
            let handle = Event::new(s.device, flags)?.ipc_handle()?;
            // SAFETY: a handle of a live interprocess event. CUDA may refuse to open it in the
            // process that exported it: an error of its own, not a capture's.
            cuda_errors_aside(unsafe { Event::from_ipc_handle(s.device, handle) }.map(drop))
        }),
        row("Event::query", Refused, RefusedByMode, |s, side| event_of(s, side)?.query().map(drop)),
        row("Event::synchronize", Refused, RefusedByMode, |s, side| event_of(s, side)?.synchronize()),
        row("Event::elapsed", Refused, RefusedByMode, |s, side| {
            let (start, end) =
                (Event::new(s.device, EventFlags::timing())?, Event::new(s.device, EventFlags::timing())?);
            s.idle.record(&start)?;
            s.idle.record(&end)?;
            on(s, side).record(&end)?;
            let elapsed = end.elapsed(&start).map(drop);
            keep(s, (start, end));
            elapsed
        }),
        row("Event::completion", Refused, Allowed, |s, side| block_on(event_of(s, side)?.completion())),
        row("Device::synchronize", NotApplicable, Refused, |s, _| s.device.synchronize()),
        row("Device::count", NotApplicable, Allowed, |_, _| Device::count().map(drop)),
        row("Device::new", NotApplicable, Allowed, |s, _| Device::new(s.device.ordinal()).map(drop)),
        row("Device::current", NotApplicable, Allowed, |_, _| Device::current().map(drop)),
        row("Device::name", NotApplicable, Allowed, |s, _| s.device.name().map(drop)),
        row("Device::attribute", NotApplicable, Allowed, |s, _| {
            s.device.attribute(sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount).map(drop)
        }),
        row("Device::priority_range", NotApplicable, Allowed, |s, _| s.device.priority_range().map(drop)),
        row("Device::check_priority", NotApplicable, Allowed, |s, _| {
            s.device.check_priority(s.device.priority_range()?.default_priority()).map(drop)
        }),
        row("Device::has_primary_context", NotApplicable, Allowed, |s, _| s.device.has_primary_context().map(drop)),
        row("Device::make_current", NotApplicable, Allowed, |s, _| s.device.make_current().map(drop)),
        row("driver_version", NotApplicable, Allowed, |_, _| cuda_stream::driver_version().map(drop)),
        row("runtime_version", NotApplicable, Allowed, |_, _| cuda_stream::runtime_version().map(drop)),
        row("with_thread_mode", NotApplicable, Allowed, |_, _| capture::with_thread_mode(capture::Relaxed, || ())),
        row("Graph::new", NotApplicable, RelaxedMode, |s, _| Graph::new(s.device).map(drop)),
        row("Graph::instantiate", NotApplicable, RelaxedMode, |s, _| small_graph(s.device)?.instantiate().map(drop)),
        row("Graph::instantiate_with", Refused, RelaxedMode, |s, side| {
            small_graph(s.device)?.instantiate_with(InstantiateOptions::new().upload_to(on(s, side))).map(drop)
        }),
        row("drop(Graph)", NotApplicable, RelaxedMode, |s, _| {
            drop(small_graph(s.device)?);
            Ok(())
        }),
        row("GraphExec::launch", Refused, Allowed, |s, side| small_graph(s.device)?.instantiate()?.launch(on(s, side))),
        row("GraphExec::upload", Refused, Allowed, |s, side| small_graph(s.device)?.instantiate()?.upload(on(s, side))),
        row("GraphExec::update", NotApplicable, Allowed, |s, _| {
            small_graph(s.device)?.instantiate()?.update(&small_graph(s.device)?)
        }),
        row("GraphExec::flags", NotApplicable, Allowed, |s, _| small_graph(s.device)?.instantiate()?.flags().map(drop)),
        row("drop(GraphExec)", NotApplicable, RelaxedMode, |s, _| {
            drop(small_graph(s.device)?.instantiate()?);
            Ok(())
        }),
        row("GraphBuilder::leaves", NotApplicable, Allowed, |s, _| small_graph(s.device)?.builder().leaves().map(drop)),
        row("GraphBuilder::add_empty_node", NotApplicable, RelaxedMode, |s, _| {
            Graph::new(s.device)?.builder().add_empty_node(&[]).map(drop)
        }),
        row("GraphBuilder::add_dependency", NotApplicable, RelaxedMode, |s, _| {
            let mut graph = Graph::new(s.device)?;
            let mut builder = graph.builder();
            let (first, second) = (builder.add_empty_node(&[])?, builder.add_empty_node(&[])?);
            builder.add_dependency(first, second)
        }),
        row("GraphBuilder::condition", NotApplicable, RelaxedMode, |s, _| {
            Graph::new(s.device)?.builder().condition(Some(0)).map(drop)
        }),
        row("GraphBuilder::add_if", NotApplicable, RelaxedMode, |s, _| {
            let mut graph = Graph::new(s.device)?;
            let mut builder = graph.builder();
            let condition = builder.condition(Some(0))?;
            builder.add_if(&condition, &[]).map(drop)
        }),
        row("GraphBuilder::add_if_else", NotApplicable, RelaxedMode, |s, _| {
            let mut graph = Graph::new(s.device)?;
            let mut builder = graph.builder();
            let condition = builder.condition(Some(0))?;
            builder.add_if_else(&condition, &[]).map(drop)
        }),
        row("GraphBuilder::add_while", NotApplicable, RelaxedMode, |s, _| {
            let mut graph = Graph::new(s.device)?;
            let mut builder = graph.builder();
            let condition = builder.condition(Some(0))?;
            builder.add_while(&condition, &[]).map(drop)
        }),
        row("GraphBuilder::add_switch", NotApplicable, RelaxedMode, |s, _| {
            let mut graph = Graph::new(s.device)?;
            let mut builder = graph.builder();
            let condition = builder.condition(Some(0))?;
            builder.add_switch(&condition, 2, &[]).map(drop)
        }),
        row("GraphBuilder::add_kernel", NotApplicable, RelaxedMode, |s, _| {
            let mut graph = Graph::new(s.device)?;
            // SAFETY: a SAXPY over no elements touches no memory.
            unsafe { graph.builder().add_kernel(&SAXPY, &LaunchConfig::new(1, 32), no_saxpy(), &[]) }.map(drop)
        }),
        row("GraphBuilder::add_fill_bytes", NotApplicable, RelaxedMode, |s, _| {
            let buffer = Arc::new(DeviceBuffer::<u8, _>::new(Arc::new(other_stream(s)), 64)?);
            Graph::new(s.device)?.builder().add_fill_bytes(&buffer, .., 0, &[]).map(drop)
        }),
        row("GraphBuilder::add_copy", NotApplicable, RelaxedMode, |s, _| {
            let buffer = Arc::new(DeviceBuffer::<u8, _>::new(Arc::new(other_stream(s)), 64)?);
            Graph::new(s.device)?.builder().add_copy(&buffer, ..32, &buffer, 32.., &[]).map(drop)
        }),
        row("GraphBuilder::add_copy_from_pinned", NotApplicable, RelaxedMode, |s, _| {
            let buffer = Arc::new(DeviceBuffer::<u8, _>::new(Arc::new(other_stream(s)), 64)?);
            let pinned = Arc::new(cuda_stream::SharedPinned::new(PinnedBuffer::<u8>::zeroed(64)?));
            Graph::new(s.device)?.builder().add_copy_from_pinned(&buffer, .., &pinned, .., &[]).map(drop)
        }),
        row("GraphBuilder::add_copy_to_pinned", NotApplicable, RelaxedMode, |s, _| {
            let buffer = Arc::new(DeviceBuffer::<u8, _>::new(Arc::new(other_stream(s)), 64)?);
            let pinned = Arc::new(cuda_stream::SharedPinned::new(PinnedBuffer::<u8>::zeroed(64)?));
            Graph::new(s.device)?.builder().add_copy_to_pinned(&pinned, .., &buffer, .., &[]).map(drop)
        }),
        row("GraphBuilder::add_host_fn", NotApplicable, RelaxedMode, |s, _| {
            Graph::new(s.device)?.builder().add_host_fn(|| {}, &[]).map(drop)
        }),
        row("GraphBuilder::adopt_node", NotApplicable, RelaxedMode, |s, _| {
            let mut graph = Graph::new(s.device)?;
            let mut builder = graph.builder();
            let node = builder.add_empty_node(&[])?.as_raw();
            // SAFETY: an empty node uses nothing.
            unsafe { builder.adopt_node(node) }.map(drop)
        }),
        row("GraphBuilder::node_count", NotApplicable, Allowed, |s, _| {
            Graph::new(s.device)?.builder().node_count().map(drop)
        }),
        row("GraphExec::set_copy", NotApplicable, RelaxedMode, |s, _| {
            let (buffer, _) = shared_memory(s.device);
            let mut graph = Graph::new(s.device)?;
            let node = graph.builder().add_copy(buffer, ..32, buffer, 32.., &[])?;
            graph.instantiate()?.set_copy(&graph, node, (buffer, 32..), (buffer, ..32))
        }),
        row("GraphExec::set_fill_bytes", NotApplicable, RelaxedMode, |s, _| {
            let (buffer, _) = shared_memory(s.device);
            let mut graph = Graph::new(s.device)?;
            let node = graph.builder().add_fill_bytes(buffer, .., 0, &[])?;
            graph.instantiate()?.set_fill_bytes(&graph, node, buffer, ..32, 1)
        }),
        row("GraphExec::set_copy_from_pinned", NotApplicable, RelaxedMode, |s, _| {
            let (buffer, pinned) = shared_memory(s.device);
            let mut graph = Graph::new(s.device)?;
            let node = graph.builder().add_copy_from_pinned(buffer, .., pinned, .., &[])?;
            graph.instantiate()?.set_copy_from_pinned(&graph, node, (buffer, ..), (pinned, ..))
        }),
        row("GraphExec::set_copy_to_pinned", NotApplicable, RelaxedMode, |s, _| {
            let (buffer, pinned) = shared_memory(s.device);
            let mut graph = Graph::new(s.device)?;
            let node = graph.builder().add_copy_to_pinned(pinned, .., buffer, .., &[])?;
            graph.instantiate()?.set_copy_to_pinned(&graph, node, (pinned, ..), (buffer, ..))
        }),
        row("Device::graph_memory", NotApplicable, RelaxedMode, |s, _| s.device.graph_memory().map(drop)),
        row("Device::reset_graph_memory_peaks", NotApplicable, RelaxedMode, |s, _| s.device.reset_graph_memory_peaks()),
        row("Device::trim_graph_memory", NotApplicable, RelaxedMode, |s, _| s.device.trim_graph_memory()),
        row("Graph::node_count", NotApplicable, Allowed, |s, _| Graph::new(s.device)?.node_count().map(drop)),
        row("Graph::try_clone", NotApplicable, RelaxedMode, |s, _| Graph::new(s.device)?.try_clone().map(drop)),
        row("Kernel::launch", Captured, Allowed, |s, side| {
            // SAFETY: a SAXPY over no elements touches no memory.
            unsafe { SAXPY.launch(on(s, side), &LaunchConfig::new(1, 32), no_saxpy()) }
        }),
        row("Kernel::launch, with a completion event", Refused, Allowed, |s, side| {
            let event = new_event(s)?;
            let config = LaunchConfig::new(1, 32).completion_event(&event);
            // SAFETY: as above.
            let launched = unsafe { SAXPY.launch(on(s, side), &config, no_saxpy()) };
            keep(s, event);
            launched
        }),
        row("Kernel::attributes", NotApplicable, Allowed, |s, _| SAXPY.attributes(s.device).map(drop)),
        row("Kernel::max_cooperative_blocks", NotApplicable, Allowed, |s, _| {
            SAXPY.max_cooperative_blocks(s.device, 32, 0).map(drop)
        }),
        row("DeviceBuffer::new", Refused, Allowed, |s, side| DeviceBuffer::<u32, _>::new(on(s, side), 4).map(drop)),
        row("DeviceBuffer::new_in", Refused, Allowed, |s, side| {
            DeviceBuffer::<u32, _>::new_in(s.pool, on(s, side), 4).map(drop)
        }),
        row("DeviceBuffer::zeroed", Refused, Allowed, |s, side| {
            DeviceBuffer::<u32, _>::zeroed(on(s, side), 4).map(drop)
        }),
        row("DeviceBuffer::from_slice", Refused, RefusedByMode, |s, side| {
            DeviceBuffer::from_slice(on(s, side), &[1u32, 2, 3, 4]).map(drop)
        }),
        row("DeviceBuffer::copy_from_slice", Refused, RefusedByMode, |s, side| {
            lock(s.buffer).copy_from_slice(on(s, side), &[1, 2, 3, 4])
        }),
        row("DeviceBuffer::copy_to_slice", Refused, RefusedByMode, |s, side| {
            lock(s.buffer).copy_to_slice(on(s, side), &mut [0; 4])
        }),
        row("DeviceBuffer::to_vec", Refused, RefusedByMode, |s, side| match side {
            // A buffer whose home stream is the captured one.
            Side::OnTheCapture => s.captured_home.to_vec(),
            Side::Elsewhere => lock(s.buffer).to_vec().map(drop),
        }),
        row("GraphOutput::take", Refused, Allowed, |s, side| {
            let mut output = lock(s.output);
            let (output, exec) = &mut *output;
            drop(output.take(on(s, side))?);
            // Launched again, outside the capture, for the calls after.
            exec.launch(s.idle)
        }),
        row("GraphOutput::to_vec", Refused, RefusedByMode, |s, side| {
            let mut output = lock(s.output);
            let (output, exec) = &mut *output;
            output.to_vec(exec, on(s, side)).map(drop)
        }),
        row("GraphOutput::copy_to_slice", Refused, RefusedByMode, |s, side| {
            let mut output = lock(s.output);
            let (output, exec) = &mut *output;
            output.copy_to_slice(exec, on(s, side), &mut [0; 4])
        }),
        row("DeviceBuffer::copy_from_pinned", Refused, Allowed, |s, side| {
            lock(s.buffer).copy_from_pinned(on(s, side), &mut *lock(s.pinned))
        }),
        row("DeviceBuffer::copy_to_pinned", Refused, Allowed, |s, side| {
            lock(s.buffer).copy_to_pinned(on(s, side), &mut *lock(s.pinned))
        }),
        row("DeviceBuffer::copy_from", Captured, Allowed, |s, side| {
            let source = DeviceBuffer::<u32, _>::zeroed(s.idle, 4)?;
            lock(s.buffer).copy_from(on(s, side), &source)
        }),
        row("DeviceBuffer::fill_bytes", Captured, Allowed, |s, side| lock(s.buffer).fill_bytes(on(s, side), 0)),
        row("DeviceBuffer::use_on", Refused, Allowed, |s, side| lock(s.buffer).use_on(on(s, side), |_, _| ())),
        row("drop(DeviceBuffer)", Allowed, Allowed, |s, side| {
            match side {
                // Its home stream is capturing: nothing is freed (the memory leaks).
                Side::OnTheCapture => s.captured_home.drop_one(),
                Side::Elsewhere => drop(DeviceBuffer::<u32, _>::zeroed(s.idle, 4)?),
            }
            Ok(())
        }),
        row("PinnedBuffer::zeroed", NotApplicable, RelaxedMode, |_, _| PinnedBuffer::<u32>::zeroed(4).map(drop)),
        row("PinnedBuffer::from_slice", NotApplicable, RelaxedMode, |_, _| {
            PinnedBuffer::from_slice(&[1u32, 2]).map(drop)
        }),
        row("PinnedBuffer::as_slice", NotApplicable, Allowed, |_, _| {
            PinnedBuffer::<u32>::zeroed(4)?.as_slice().map(drop)
        }),
        row("PinnedBuffer::as_mut_slice", NotApplicable, Allowed, |_, _| {
            PinnedBuffer::<u32>::zeroed(4)?.as_mut_slice().map(drop)
        }),
        row("drop(PinnedBuffer)", NotApplicable, RelaxedMode, |_, _| {
            drop(PinnedBuffer::<u32>::zeroed(4)?);
            Ok(())
        }),
        row("MemPool::new", NotApplicable, RelaxedMode, |s, _| MemPool::new(s.device).map(drop)),
        row("MemPool::device_default", NotApplicable, Allowed, |s, _| MemPool::device_default(s.device).map(drop)),
        row("MemPool::set_release_threshold", NotApplicable, Allowed, |s, _| s.pool.set_release_threshold(0)),
        row("MemPool::release_threshold", NotApplicable, Allowed, |s, _| s.pool.release_threshold().map(drop)),
        row("MemPool::set_reuse", NotApplicable, Allowed, |s, _| s.pool.set_reuse(s.pool.reuse()?)),
        row("MemPool::reuse", NotApplicable, Allowed, |s, _| s.pool.reuse().map(drop)),
        row("MemPool::stats", NotApplicable, Allowed, |s, _| s.pool.stats().map(drop)),
        row("MemPool::reset_peaks", NotApplicable, Allowed, |s, _| s.pool.reset_peaks()),
        row("MemPool::trim_to", NotApplicable, RelaxedMode, |s, _| s.pool.trim_to(0)),
        row("drop(MemPool)", NotApplicable, RelaxedMode, |s, _| {
            drop(MemPool::new(s.device)?);
            Ok(())
        }),
        row("MemOpSupport::of", NotApplicable, Allowed, |s, _| MemOpSupport::of(s.device).map(drop)),
        row("MappedWords::new", NotApplicable, AllowedOrRefusedByMode, |_, _| MappedWords::<u32>::new(4).map(drop)),
        row("MappedWords::wait_value", Captured, Allowed, |s, side| {
            s.words.wait_value(on(s, side), 0, WaitValue::greater_or_equal(0))
        }),
        row("MappedWords::write_value", Captured, Allowed, |s, side| s.words.write_value(on(s, side), 1, 1)),
        row("MappedWords::mem_ops", Captured, Allowed, |s, side| {
            s.words.mem_ops(on(s, side), &[MemOp::Write { index: 2, value: 1 }])
        }),
        row("MappedWords::use_on", Captured, Allowed, |s, side| s.words.use_on(on(s, side), |_, _| ())),
        row("DeviceWords::zeroed", Refused, AllowedOrRefusedByMode, |s, side| {
            DeviceWords::<u32>::zeroed(on(s, side), 4).map(drop)
        }),
        row("DeviceWords::wait_value", Captured, Allowed, |s, side| {
            s.device_words.wait_value(on(s, side), 0, WaitValue::greater_or_equal(0))
        }),
        row("DeviceWords::write_value", Captured, Allowed, |s, side| s.device_words.write_value(on(s, side), 1, 1)),
        row("DeviceWords::mem_ops", Captured, Allowed, |s, side| {
            s.device_words.mem_ops(on(s, side), &[MemOp::Write { index: 2, value: 1 }])
        }),
        row("DeviceWords::use_on", Captured, Allowed, |s, side| s.device_words.use_on(on(s, side), |_, _| ())),
        row("DeviceWords::to_vec", Refused, RefusedByMode, |s, side| s.device_words.to_vec(on(s, side)).map(drop)),
    ]
}

/// Checks a call's outcome against its rule, and that the capture is still intact (active, no
/// last error left behind).
/// Whether `outcome` follows `expect`, and the capture survived it; the disagreement if not.
fn check(scene: &Scene<'_>, context: &str, expect: Expect, outcome: &Result<()>) -> std::result::Result<(), String> {
    let refused = matches!(outcome, Err(Error::CaptureMisuse(_)));
    let followed = match expect {
        Expect::Ok => outcome.is_ok(),
        Expect::Refused => refused,
        Expect::OkOrRefused => outcome.is_ok() || refused,
    };
    if !followed {
        return Err(format!("{context}: must be {expect:?}: {outcome:?}"));
    }
    let last_error = take_last_error();
    if last_error != sys::cudaError::cudaSuccess {
        return Err(format!("{context}: left a runtime last error {last_error:?}"));
    }
    let status = scene.captured.capture_status();
    if status != Ok(CaptureStatus::Active) {
        return Err(format!("{context}: the capture was broken: {status:?}"));
    }
    Ok(())
}

fn sides(row: &Row) -> [(Side, Rule); 2] {
    [(Side::OnTheCapture, row.on_the_capture), (Side::Elsewhere, row.elsewhere)]
}

/// Where a scene's calls stop and the next scene's resume: each disagreement found so far (a
/// call may break the capture, so the scene ends there, and the next one, a fresh capture,
/// resumes after that call), and per pass (the scene's calls, the guard's) the first
/// row and side to make.
#[derive(Default)]
struct Progress {
    disagreements: Vec<String>,
    resume: [usize; 2],
    stopped: bool,
}

static PROGRESS: Mutex<Progress> = Mutex::new(Progress { disagreements: Vec::new(), resume: [0; 2], stopped: false });

fn progress() -> MutexGuard<'static, Progress> {
    PROGRESS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes the calls of the table that `call` makes (those of `FOREIGN_HANDLE_ROWS`, or the
/// others) in pass `pass`, checking each; stops at the first disagreement (noted in
/// [`PROGRESS`], with where the next scene resumes).
fn run_rows(
    scene: &Scene<'_>,
    (mode, caller, foreign): (Mode, Caller, bool),
    pass: usize,
    mut call: impl FnMut(&Row, Side) -> Option<Result<()>>,
) {
    let rows: Vec<Row> = rows().into_iter().filter(|row| FOREIGN_HANDLE_ROWS.contains(&row.name) == foreign).collect();
    let calls = rows.iter().flat_map(|row| sides(row).map(|(side, rule)| (row, side, rule)));
    for (index, (row, side, rule)) in calls.enumerate() {
        if progress().stopped || index < progress().resume[pass] {
            continue;
        }
        let Some(expect) = expected(rule, mode, caller) else { continue };
        let Some(outcome) = call(row, side) else { continue };
        let context = format!("{} [{side:?}, {}] in a {mode:?} capture, from the {caller:?}", row.name, rule.token());
        if let Err(disagreement) = check(scene, &context, expect, &outcome) {
            let mut progress = progress();
            progress.disagreements.push(disagreement);
            progress.resume[pass] = index + 1;
            progress.stopped = true;
            return;
        }
    }
}

/// Every call of the table, in every mode, from both threads, once with no foreign handle
/// wrapped and once after: every disagreement with the docs is collected (a call that breaks
/// the capture ends its scene, and a fresh capture resumes after it), then reported together.
#[test]
fn every_call_follows_its_rule_in_the_capture_docs() {
    let device = gpu_or_skip!();
    let _serial = serial();
    // Loaded before any capture (a first use loads the kernel's module).
    SAXPY.attributes(device).unwrap();
    CUDARC.get_or_init(|| CudaContext::new(device.ordinal() as usize).unwrap());
    // The calls that wrap a foreign handle last: they change the process for good.
    for foreign in [false, true] {
        for mode in MODES {
            for caller in CALLERS {
                progress().resume = [0; 2];
                loop {
                    progress().stopped = false;
                    let calls = move |scene: &Scene<'_>| {
                        run_rows(scene, (mode, caller, foreign), 0, |row, side| match row.call {
                            Call::Scene(call) => Some(call(scene, side)),
                            Call::Guard(_) => None,
                        });
                        Outcomes::new()
                    };
                    let guard_calls = move |guard: &mut dyn Guard, scene: &Scene<'_>| {
                        run_rows(scene, (mode, caller, foreign), 1, |row, side| match row.call {
                            Call::Guard(call) => Some(call(&mut *guard, scene, side)),
                            Call::Scene(_) => None,
                        });
                        Outcomes::new()
                    };
                    let scene = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        capture_around_with(device, mode, false, caller, &calls, Some(&guard_calls))
                    }));
                    // A scene that stopped at a disagreement may fail its own checks after
                    // (the capture broken): the next scene resumes after that call.
                    match scene {
                        _ if progress().stopped => continue,
                        Ok(_) => break,
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                }
            }
        }
    }
    device.synchronize().unwrap();
    let disagreements = std::mem::take(&mut progress().disagreements);
    assert!(
        disagreements.is_empty(),
        "{} calls disagree with the capture docs:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}

/// The source of the capture docs, whose table lists every call.
const CAPTURE_DOCS: &str = include_str!("../../cuda-stream/src/graph/capture.rs");

/// The rows of the capture docs' table ("Every call's rule"): each call's name (the first cell,
/// without backticks) and its two rules (the bold words first in the other cells).
fn docs_table() -> Vec<(String, Rule, Rule)> {
    let header = "//! | call | on the capture | elsewhere |";
    let mut lines = CAPTURE_DOCS.lines().skip_while(|line| line.trim() != header);
    assert!(lines.next().is_some(), "the capture docs have no table headed {header:?}");
    assert_eq!(lines.next().map(str::trim), Some("//! |---|---|---|"), "the table's separator row");
    let rule_of = |cell: &str, line: &str| {
        let bold = cell.trim().strip_prefix("**").and_then(|rest| rest.split_once("**")).map(|(bold, _)| bold);
        let bold = bold.unwrap_or_else(|| panic!("a cell without its rule first in bold: {line}"));
        Rule::of_token(bold).unwrap_or_else(|| panic!("an unknown rule {bold:?}: {line}"))
    };
    lines
        .map(str::trim)
        .take_while(|line| line.starts_with("//! |"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_start_matches("//!").trim().split('|').collect();
            assert_eq!(cells.len(), 5, "a row of three cells: {line}");
            let name = cells[1].replace('`', "").trim().to_string();
            (name, rule_of(cells[2], line), rule_of(cells[3], line))
        })
        .collect()
}

#[test]
fn the_capture_docs_table_and_this_files_table_name_the_same_calls_and_rules() {
    let docs = docs_table();
    let ours: Vec<(String, Rule, Rule)> =
        rows().iter().map(|row| (row.name.to_string(), row.on_the_capture, row.elsewhere)).collect();
    for (table, entries) in [("the docs' table", &docs), ("this file's table", &ours)] {
        let mut seen = BTreeMap::new();
        for (name, _, _) in entries.iter() {
            assert!(seen.insert(name.as_str(), ()).is_none(), "{table} lists {name:?} twice");
        }
    }
    let docs_by_name: BTreeMap<&str, (Rule, Rule)> = docs.iter().map(|(n, a, b)| (n.as_str(), (*a, *b))).collect();
    let ours_by_name: BTreeMap<&str, (Rule, Rule)> = ours.iter().map(|(n, a, b)| (n.as_str(), (*a, *b))).collect();
    let only_docs: Vec<&&str> = docs_by_name.keys().filter(|name| !ours_by_name.contains_key(*name)).collect();
    let only_ours: Vec<&&str> = ours_by_name.keys().filter(|name| !docs_by_name.contains_key(*name)).collect();
    assert!(only_docs.is_empty() && only_ours.is_empty(), "only in the docs: {only_docs:?}; only here: {only_ours:?}");
    for (name, rules) in &docs_by_name {
        assert_eq!(
            Some(rules),
            ours_by_name.get(name),
            "{name}: the docs' rules (on the capture, elsewhere), then ours"
        );
    }
    assert!(docs.len() >= 100, "the table lists every call: {} rows", docs.len());
    println!("{} calls, each with its rule on the capture and elsewhere", docs.len());
}
