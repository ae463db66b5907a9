//! Graph capture on a GPU.

use cuda_stream::{BuiltinStream, CaptureStatus, Error, Stream, StreamOptions, capture};
use cuda_stream_tests::{TagLog, gpu_or_skip, poll_until};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[test]
fn capture_100_kernels_and_a_host_fn_on_two_streams_and_replay_three_times() {
    let device = gpu_or_skip!();
    let main = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = TagLog::new(400).unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut capture = main.begin_capture(capture::Global).unwrap();
    assert_eq!(main.capture_status().unwrap(), CaptureStatus::Active);
    let info = main.capture_info().unwrap();
    assert_eq!(info.status, CaptureStatus::Active);
    let side = main.fork().unwrap();
    assert_eq!(side.capture_info().unwrap().id, info.id, "the forked stream joined the capture");
    for i in 0..50 {
        cuda_stream_tests::tag(&main, &log, i, Duration::ZERO).unwrap();
        cuda_stream_tests::tag(&side, &log, 100 + i, Duration::ZERO).unwrap();
    }
    let in_graph = Arc::clone(&runs);
    capture
        .launch_host_fn(&side, move || {
            in_graph.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    main.wait_stream(&side).unwrap();
    let graph = capture.end().unwrap();
    assert_eq!(main.capture_status().unwrap(), CaptureStatus::None);
    assert_eq!(log.count(), 0, "captured work did not run");
    let exec = graph.instantiate().unwrap();
    drop(graph);
    let replay = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    exec.upload(&replay).unwrap();
    for _ in 0..3 {
        exec.launch(&replay).unwrap();
    }
    replay.synchronize().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3, "the host function ran once per replay");
    let tags = log.tags();
    assert_eq!(tags.len(), 300);
    for replay in tags.chunks(100) {
        let mains: Vec<u32> = replay.iter().copied().filter(|t| *t < 100).collect();
        let sides: Vec<u32> = replay.iter().copied().filter(|t| *t >= 100).collect();
        assert_eq!(mains, (0..50).collect::<Vec<_>>());
        assert_eq!(sides, (100..150).collect::<Vec<_>>());
    }
    assert_eq!(Arc::strong_count(&runs), 2, "the graph's user object holds the closure");
    drop(exec);
    // CUDA releases the user object (and so the closure) on a thread of its own, once the
    // last graph or executable holding it is gone.
    let freed = poll_until(Duration::from_secs(5), || Arc::strong_count(&runs) == 1);
    assert!(freed.is_some(), "the executable's drop freed its host function");
}

#[test]
fn the_legacy_stream_cannot_be_captured_and_nesting_is_refused() {
    let device = gpu_or_skip!();
    let legacy = BuiltinStream::legacy(device);
    assert!(matches!(legacy.begin_capture(capture::Relaxed), Err(Error::CaptureMisuse(_))));
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let capture = stream.begin_capture(capture::ThreadLocal).unwrap();
    let nested = stream.begin_capture(capture::ThreadLocal).unwrap_err();
    assert!(nested.cuda_code().is_some(), "{nested}");
    drop(capture);
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::None, "dropping the guard ended the capture");
}

#[test]
fn synchronize_during_capture_is_an_error_and_invalidates_the_capture() {
    let device = gpu_or_skip!();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = TagLog::new(4).unwrap();
    let capture = stream.begin_capture(capture::Relaxed).unwrap();
    cuda_stream_tests::tag(&stream, &log, 1, Duration::ZERO).unwrap();
    let error = stream.synchronize().unwrap_err();
    assert_eq!(error.cuda_code().map(|c| c.name()), Some("cudaErrorStreamCaptureUnsupported"), "{error}");
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::Invalidated);
    let query = stream.query().unwrap_err();
    assert!(query.cuda_code().is_some(), "{query}");
    let ended = capture.end().unwrap_err();
    assert_eq!(ended.cuda_code().map(|c| c.name()), Some("cudaErrorStreamCaptureInvalidated"), "{ended}");
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::None);
    // The stream works again, and the captured kernel never ran.
    stream.synchronize().unwrap();
    assert_eq!(log.count(), 0);
    cuda_stream_tests::tag(&stream, &log, 2, Duration::ZERO).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(log.tags(), vec![2]);
}
