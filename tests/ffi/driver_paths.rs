//! The hot operations take the driver's entry points for real stream handles and the runtime
//! for the built-in ones (`cuda-stream/src/ffi/driver.rs`). These tests prove that nothing
//! observable differs: each operation as the very first CUDA call of a fresh thread, on both
//! paths; the error codes and names of both paths side by side with raw runtime calls; and no
//! stale runtime last error after a refused call, on either path.

use cuda_stream::{BuiltinStream, CaptureStatus, Device, Error, Event, EventFlags, StreamRef, capture, sys};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{MappedFlag, gpu_or_skip, take_last_error};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The tests that capture or use the legacy stream, one at a time: while a capture of the
/// device is in progress the crate refuses every use of its legacy stream.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn cuda_name(error: &Error) -> Option<&'static str> {
    error.cuda_code().map(|code| code.name())
}

/// Runs `f` as the first CUDA call of a new thread.
fn in_fresh_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| scope.spawn(f).join().unwrap())
}

/// Every hot operation as the first call of a fresh thread, on `parked` (held by a kernel
/// waiting on a flag): each must succeed and have its effect in order behind the parked work.
fn first_calls_on(device: Device, parked: &StreamRef, flag: &MappedFlag) {
    let kind = format!("{:?}", parked.ownership());
    let event = Event::new(device, EventFlags::default()).unwrap();
    let follower = stream(device);
    let after_wait = Event::new(device, EventFlags::default()).unwrap();
    let after_join = Event::new(device, EventFlags::default()).unwrap();
    let follower_of_join = stream(device);
    let host_fn_runs = Arc::new(AtomicU32::new(0));
    let graph_runs = Arc::new(AtomicU32::new(0));
    let exec = {
        let recorder = stream(device);
        let mut capture = recorder.begin_capture(capture::ThreadLocal).unwrap();
        let runs = Arc::clone(&graph_runs);
        capture
            .launch_host_fn(&recorder, move || {
                runs.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        capture.end().unwrap().instantiate().unwrap()
    };

    assert!(!in_fresh_thread(|| parked.query()).unwrap(), "{kind}: query of a parked stream");
    assert_eq!(in_fresh_thread(|| parked.capture_status()).unwrap(), CaptureStatus::None, "{kind}");
    in_fresh_thread(|| parked.record(&event)).unwrap();
    assert!(!in_fresh_thread(|| event.query()).unwrap(), "{kind}: an event behind parked work");
    in_fresh_thread(|| follower.wait_event(&event)).unwrap();
    follower.record(&after_wait).unwrap();
    in_fresh_thread(|| follower_of_join.wait_stream(parked)).unwrap();
    follower_of_join.record(&after_join).unwrap();
    let runs = Arc::clone(&host_fn_runs);
    in_fresh_thread(|| {
        parked.launch_host_fn(move || {
            runs.fetch_add(1, Ordering::SeqCst);
        })
    })
    .unwrap();
    // The executable is dropped on that thread with its launch pending: the graph's closure
    // stays alive until the launch completes.
    in_fresh_thread(move || exec.launch(parked)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!after_wait.query().unwrap(), "{kind}: wait_event ordered nothing");
    assert!(!after_join.query().unwrap(), "{kind}: wait_stream ordered nothing");
    assert_eq!(host_fn_runs.load(Ordering::SeqCst), 0, "{kind}: a host fn ran before the parked work");
    assert_eq!(graph_runs.load(Ordering::SeqCst), 0, "{kind}: a graph ran before the parked work");

    flag.set();
    in_fresh_thread(|| event.synchronize()).unwrap();
    in_fresh_thread(|| parked.synchronize()).unwrap();
    assert_eq!(host_fn_runs.load(Ordering::SeqCst), 1, "{kind}: the host fn");
    assert_eq!(graph_runs.load(Ordering::SeqCst), 1, "{kind}: the graph");
    follower.synchronize().unwrap();
    follower_of_join.synchronize().unwrap();
    assert!(after_wait.query().unwrap() && after_join.query().unwrap(), "{kind}");
}

#[test]
fn every_hot_operation_works_as_the_first_call_of_a_fresh_thread_on_an_owned_stream() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let owned = stream(device);
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&owned, &flag, Duration::from_secs(20)).unwrap();
    first_calls_on(device, &owned, &flag);
}

#[test]
fn every_hot_operation_works_as_the_first_call_of_a_fresh_thread_on_the_legacy_stream() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let legacy = BuiltinStream::legacy(device);
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&legacy, &flag, Duration::from_secs(20)).unwrap();
    first_calls_on(device, &legacy, &flag);
}

#[test]
fn a_fresh_threads_per_thread_stream_works_from_its_first_call() {
    let device = gpu_or_skip!();
    let event = Event::new(device, EventFlags::default()).unwrap();
    let outside = stream(device);
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&outside, &flag, Duration::from_secs(20)).unwrap();
    outside.record(&event).unwrap();
    let (first, waited) = in_fresh_thread(|| {
        let mine = BuiltinStream::per_thread(device);
        let first = mine.query();
        mine.wait_event(&event).unwrap();
        (first, mine.query().unwrap())
    });
    assert_eq!(first, Ok(true), "an idle per-thread stream, first call of its thread");
    assert!(!waited, "the per-thread stream waits for the parked stream's event");
    flag.set();
    outside.synchronize().unwrap();
}

/// Both paths and raw runtime calls give the same code, and the same name, for each error the
/// suites provoke without poisoning the process.
#[test]
fn both_paths_report_the_runtimes_codes() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let owned = stream(device);
    let outside = Event::new(device, EventFlags::default()).unwrap();
    owned.record(&outside).unwrap();
    owned.synchronize().unwrap();

    // Capture refusals: a query during capture, and a wait on an event recorded outside it.
    let mut seen = Vec::new();
    for (name, path) in [("driver", Some(&*owned)), ("runtime", None)] {
        let builtin;
        let captured: &StreamRef = match path {
            Some(stream) => stream,
            None => {
                builtin = BuiltinStream::per_thread(device);
                &builtin
            }
        };
        // A capture begun outside the crate is not counted, so the crate lets CUDA answer the
        // query (a capture of its own would be refused before CUDA sees it).
        let mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
        // SAFETY: a live stream of the current device.
        assert_eq!(unsafe { sys::cudaStreamBeginCapture(captured.as_raw(), mode) }, sys::cudaError::cudaSuccess);
        let query = captured.query().unwrap_err();
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above; `graph` is a local out-pointer (null: invalidated).
        let _ = unsafe { sys::cudaStreamEndCapture(captured.as_raw(), &mut graph) };
        let _ = take_last_error();
        // Through the crate's capture: a wait on an event recorded outside it invalidates it.
        let capture = captured.begin_capture(capture::ThreadLocal).unwrap();
        let isolation = captured.wait_event(&outside).unwrap_err();
        let ended = capture.end().unwrap_err();
        seen.push((name, cuda_name(&query), cuda_name(&ended), cuda_name(&isolation)));
        assert_eq!(take_last_error(), sys::cudaError::cudaSuccess, "{name}: a stale last error");
    }
    // The same through raw runtime calls.
    let raw = owned.as_raw();
    let mut graph = std::ptr::null_mut();
    // SAFETY: a live stream; out-pointers are locals; each capture is ended.
    let (query, ended, isolation) = unsafe {
        let mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
        assert_eq!(sys::cudaStreamBeginCapture(raw, mode), sys::cudaError::cudaSuccess);
        let query = sys::cudaStreamQuery(raw);
        let _ = sys::cudaStreamEndCapture(raw, &mut graph);
        assert_eq!(sys::cudaStreamBeginCapture(raw, mode), sys::cudaError::cudaSuccess);
        let isolation = sys::cudaStreamWaitEvent(raw, outside.as_raw(), 0);
        let ended = sys::cudaStreamEndCapture(raw, &mut graph);
        (query, ended, isolation)
    };
    let _ = take_last_error();
    let name = |code: sys::cudaError_t| Some(cuda_stream::CudaCode(code.0 as i32).name());
    let expected = (name(query), name(ended), name(isolation));
    assert_eq!(
        expected,
        (
            Some("cudaErrorStreamCaptureUnsupported"),
            Some("cudaErrorStreamCaptureInvalidated"),
            Some("cudaErrorStreamCaptureIsolation")
        )
    );
    for (path, query, ended, isolation) in seen {
        assert_eq!((query, ended, isolation), expected, "{path} path");
    }

    // Not ready is no error on either path.
    let flag = MappedFlag::new().unwrap();
    let legacy = BuiltinStream::legacy(device);
    cuda_stream_tests::wait_flag(&owned, &flag, Duration::from_secs(20)).unwrap();
    let pending = owned.record_event().unwrap();
    legacy.wait_event(&pending).unwrap();
    assert_eq!((owned.query(), legacy.query(), pending.query()), (Ok(false), Ok(false), Ok(false)));
    flag.set();
    legacy.synchronize().unwrap();
    assert_eq!((owned.query(), legacy.query(), pending.query()), (Ok(true), Ok(true), Ok(true)));
}

/// After a fault, both paths report the sticky error under the runtime's code and name.
#[test]
fn both_paths_report_a_sticky_fault_as_the_runtime_does() {
    let _device = gpu_or_skip!();
    cuda_stream_tests::faulting_child_test_prints(
        "sticky_fault_child",
        &[
            "runtime: Some(\"cudaErrorIllegalAddress\")",
            "driver sync: Some(\"cudaErrorIllegalAddress\")",
            "driver query: Err(Some(\"cudaErrorIllegalAddress\"))",
            "driver record: Err(Some(\"cudaErrorIllegalAddress\"))",
            "builtin sync: Some(\"cudaErrorIllegalAddress\")",
        ],
    );
}

#[test]
#[ignore = "child process of both_paths_report_a_sticky_fault_as_the_runtime_does"]
fn sticky_fault_child() {
    let device = Device::new(0).unwrap();
    let owned = stream(device);
    let event = Event::new(device, EventFlags::default()).unwrap();
    cuda_stream_tests::fault(&owned).unwrap();
    let sync = owned.synchronize().unwrap_err();
    // SAFETY: a live stream.
    let runtime = unsafe { sys::cudaStreamQuery(owned.as_raw()) };
    let _ = take_last_error();
    println!("runtime: {:?}", Some(cuda_stream::CudaCode(runtime.0 as i32).name()));
    println!("driver sync: {:?}", cuda_name(&sync));
    println!("driver query: {:?}", owned.query().as_ref().map_err(cuda_name));
    println!("driver record: {:?}", owned.record(&event).as_ref().map_err(cuda_name));
    let builtin = BuiltinStream::legacy(device).synchronize().unwrap_err();
    println!("builtin sync: {:?}", cuda_name(&builtin));
}
