//! Calls that would invalidate a capture begun through the crate are refused with
//! `Error::CaptureMisuse` before CUDA sees them, and the capture survives: each scenario below
//! captures a tag kernel before and after the refused calls, ends the capture and replays the
//! graph, whose two tags in the mapped-memory log prove the capture was never broken. The calls
//! are made from the capturing thread and from another thread; neither leaves a runtime last
//! error behind. Controls make the same kind of call through raw `cuda_stream::sys` during a
//! capture of the crate and observe CUDA invalidate it (where NVIDIA's programming guide or the
//! probes of design.md say it does), and that the failed end still uncounts the capture.
//!
//! The rules are in `cuda_stream::capture`'s docs ("Calls refused during a capture").

use cuda_stream::{
    BuiltinStream, CaptureMode, CaptureStatus, Device, Error, Event, NULL_STREAM_IS_PER_THREAD, Result, Stream,
    StreamOptions, StreamRef, capture, sys,
};
use cuda_stream_tests::non_blocking_stream;
use cuda_stream_tests::{TagLog, block_on, ffi, gpu_or_skip, take_last_error};
use std::sync::{Mutex, MutexGuard};
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
/// and an event recorded (and completed) before the capture began.
struct Scene<'a> {
    device: Device,
    captured: &'a StreamRef,
    idle: &'a StreamRef,
    event: &'a Event,
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
    match mode {
        Mode::Global => capture_around_in(device, capture::Global, blocking, caller, calls),
        Mode::ThreadLocal => capture_around_in(device, capture::ThreadLocal, blocking, caller, calls),
        Mode::Relaxed => capture_around_in(device, capture::Relaxed, blocking, caller, calls),
    }
}

fn capture_around_in<M: CaptureMode>(
    device: Device,
    mode: M,
    blocking: bool,
    caller: Caller,
    calls: &Calls,
) -> Outcomes {
    let context = format!("{mode:?} capture of a {} stream, calls from {caller:?}", kind(blocking));
    let log = TagLog::new(4).unwrap();
    let options = if blocking { StreamOptions::default() } else { StreamOptions::non_blocking() };
    let captured = Stream::new(device, options).unwrap();
    let idle = non_blocking_stream(device);
    let event = idle.record_event().unwrap();
    idle.synchronize().unwrap();

    let capture = captured.begin_capture(mode).unwrap();
    cuda_stream_tests::tag(&captured, &log, 1, Duration::ZERO).unwrap();
    let scene = Scene { device, captured: &captured, idle: &idle, event: &event };
    let (outcomes, last_error) = call_from(caller, &scene, calls);
    assert_eq!(last_error, sys::cudaError::cudaSuccess, "{context}: the calls left a stale last error");
    cuda_stream_tests::tag(&captured, &log, 2, Duration::ZERO).unwrap();
    assert_eq!(captured.capture_status(), Ok(CaptureStatus::Active), "{context}");
    let graph = capture.end().unwrap_or_else(|error| panic!("{context}: the capture did not survive: {error}"));

    assert_eq!(log.count(), 0, "{context}: captured work does not run");
    let exec = graph.instantiate().unwrap();
    let replay = non_blocking_stream(device);
    exec.launch(&replay).unwrap();
    replay.synchronize().unwrap();
    assert_eq!(log.tags(), [1, 2], "{context}: the graph replays both tags");
    outcomes
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
