//! Host functions on a GPU (completion futures: `tests/completion/completion.rs`).

use cuda_stream::{BuiltinStream, Error, Stream, StreamOptions, capture, live_host_fns, sys, take_host_fn_panics};
use cuda_stream_tests::{TagLog, gpu_or_skip, take_last_error};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Host-function tests share the process-wide live counter and panic queue: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn a_host_fn_runs_after_earlier_work_and_holds_back_later_work() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = Arc::new(TagLog::new(8).unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    cuda_stream_tests::tag(&stream, &log, 1, Duration::from_millis(30)).unwrap();
    let (log_in_fn, seen_in_fn) = (Arc::clone(&log), Arc::clone(&seen));
    stream
        .launch_host_fn(move || {
            seen_in_fn.lock().unwrap().push(log_in_fn.tags());
            std::thread::sleep(Duration::from_millis(50));
            seen_in_fn.lock().unwrap().push(log_in_fn.tags());
        })
        .unwrap();
    cuda_stream_tests::tag(&stream, &log, 2, Duration::ZERO).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![vec![1], vec![1]], "ran after tag 1, and tag 2 waited for it");
    assert_eq!(log.tags(), vec![1, 2]);
    assert_eq!(live_host_fns(), 0);
}

#[test]
fn a_panicking_host_fn_is_caught_reported_and_the_stream_goes_on() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let _ = take_host_fn_panics();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = TagLog::new(4).unwrap();
    stream.launch_host_fn(|| panic!("deliberate panic in a host function")).unwrap();
    cuda_stream_tests::tag(&stream, &log, 9, Duration::ZERO).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(log.tags(), vec![9], "the stream kept working after the panic");
    let panics = take_host_fn_panics();
    assert_eq!(panics.len(), 1, "{panics:?}");
    assert_eq!(panics[0].stream, Some(stream.as_raw() as usize));
    assert_eq!(panics[0].message, "deliberate panic in a host function");
    assert_eq!(live_host_fns(), 0);
}

#[test]
fn cuda_calls_inside_a_host_fn_are_refused() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let stream = Arc::new(Stream::new(device, StreamOptions::non_blocking()).unwrap());
    let (send, receive) = mpsc::channel();
    let inner = Arc::clone(&stream);
    stream
        .launch_host_fn(move || {
            let results = (
                inner.query(),
                inner.synchronize(),
                BuiltinStream::legacy(device).query().map(drop),
                device.synchronize(),
            );
            send.send(results).unwrap();
        })
        .unwrap();
    let (query, sync, create, device_sync) = receive.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(query, Err(Error::InsideHostFn));
    assert_eq!(sync, Err(Error::InsideHostFn));
    assert_eq!(create, Err(Error::InsideHostFn));
    assert_eq!(device_sync, Err(Error::InsideHostFn));
    stream.synchronize().unwrap();
    assert_eq!(stream.query(), Ok(true), "outside a host function the same calls work");
}

#[test]
fn a_failed_enqueue_frees_the_closure_once_and_never_runs_it() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = live_host_fns();
    let capturing = Stream::new(device, StreamOptions::default()).unwrap();
    let legacy = BuiltinStream::legacy(device);
    let token = Arc::new(AtomicU32::new(0));
    {
        // A capture begun outside the crate is not counted, so the enqueue reaches CUDA, which
        // refuses the legacy stream while a blocking stream captures globally.
        let mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal;
        // SAFETY: a live stream of the current device; the capture is ended below.
        assert_eq!(unsafe { sys::cudaStreamBeginCapture(capturing.as_raw(), mode) }, sys::cudaError::cudaSuccess);
        let in_fn = Arc::clone(&token);
        let error = legacy.launch_host_fn(move || in_fn.store(1, Ordering::SeqCst)).unwrap_err();
        assert_eq!(error.cuda_code().map(|c| c.name()), Some("cudaErrorStreamCaptureImplicit"), "{error}");
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above; `graph` is a local out-pointer.
        if unsafe { sys::cudaStreamEndCapture(capturing.as_raw(), &mut graph) } == sys::cudaError::cudaSuccess {
            // SAFETY: the graph the end handed over, destroyed once.
            let _ = unsafe { sys::cudaGraphDestroy(graph) };
        }
        let _ = take_last_error();
    }
    {
        let capture = capturing.begin_capture(capture::Global).unwrap();
        // Through the crate's own capture, the legacy stream is refused before CUDA sees it.
        let in_fn = Arc::clone(&token);
        let refused = legacy.launch_host_fn(move || in_fn.store(1, Ordering::SeqCst)).unwrap_err();
        assert!(matches!(refused, Error::CaptureMisuse(_)), "{refused}");
        // A FnOnce on the capturing stream itself is refused by the crate's rule.
        let in_fn = Arc::clone(&token);
        let refused = capturing.launch_host_fn(move || in_fn.store(2, Ordering::SeqCst)).unwrap_err();
        assert!(matches!(refused, Error::CaptureMisuse(_)), "{refused}");
        drop(capture);
    }
    assert_eq!(Arc::strong_count(&token), 1, "every closure was freed");
    assert_eq!(live_host_fns(), before);
    device.synchronize().unwrap();
    assert_eq!(token.load(Ordering::SeqCst), 0, "no closure ran");
}

#[test]
fn dropping_the_last_handle_inside_a_host_fn_does_not_deadlock() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = (cuda_stream::live_streams(), cuda_stream::live_events());
    let runner = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let doomed = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let event = doomed.record_event().unwrap();
    runner
        .launch_host_fn(move || {
            // The last owners of a stream and an event, dropped where CUDA calls are forbidden.
            drop((doomed, event));
        })
        .unwrap();
    runner.synchronize().unwrap();
    let settled = cuda_stream_tests::poll_until(Duration::from_secs(5), || {
        (cuda_stream::live_streams(), cuda_stream::live_events()) == (before.0 + 1, before.1)
    });
    assert!(settled.is_some(), "the stream and event were released");
    drop(runner);
    assert_eq!(cuda_stream::live_streams(), before.0);
}

#[test]
fn a_host_callback_gets_ok_after_the_work_before_it() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = Arc::new(TagLog::new(8).unwrap());
    cuda_stream_tests::tag(&stream, &log, 1, Duration::from_millis(30)).unwrap();
    let (sender, receiver) = mpsc::channel();
    let log_in_fn = Arc::clone(&log);
    stream.launch_host_callback(move |status| sender.send((status, log_in_fn.tags())).unwrap()).unwrap();
    cuda_stream_tests::tag(&stream, &log, 2, Duration::ZERO).unwrap();
    let (status, seen) = receiver.recv_timeout(Duration::from_secs(10)).expect("the callback ran");
    assert_eq!(status, Ok(()), "no fault: the callback gets Ok");
    assert_eq!(seen, vec![1], "it ran after tag 1 and before tag 2");
    stream.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
}
