//! Graph capture on a GPU.

use cuda_stream::{BuiltinStream, CaptureStatus, Error, Event, EventFlags, Stream, StreamOptions, capture, sys};
use cuda_stream_tests::{TagLog, gpu_or_skip, poll_until};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// One test at a time: a capture in progress makes the crate refuse other tests' synchronizes
/// (a Global capture) and legacy-stream use (any capture of the device).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn capture_100_kernels_and_a_host_fn_on_two_streams_and_replay_three_times() {
    let device = gpu_or_skip!();
    let _serial = serial();
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
    let _serial = serial();
    let legacy = BuiltinStream::legacy(device);
    assert!(matches!(legacy.begin_capture(capture::Relaxed), Err(Error::CaptureMisuse(_))));
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let capture = stream.begin_capture(capture::ThreadLocal).unwrap();
    let nested = stream.begin_capture(capture::ThreadLocal).unwrap_err();
    assert!(matches!(nested, Error::CaptureMisuse(_)), "a nested begin is refused before CUDA: {nested}");
    drop(capture);
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::None, "dropping the guard ended the capture");
}

#[test]
fn synchronize_and_query_during_capture_are_refused_and_the_capture_survives() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = TagLog::new(4).unwrap();
    let capture = stream.begin_capture(capture::Relaxed).unwrap();
    cuda_stream_tests::tag(&stream, &log, 1, Duration::ZERO).unwrap();
    // CUDA would answer both with cudaErrorStreamCaptureUnsupported and invalidate the capture:
    // the crate refuses them first.
    assert!(matches!(stream.synchronize(), Err(Error::CaptureMisuse(_))));
    assert!(matches!(stream.query(), Err(Error::CaptureMisuse(_))));
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::Active);
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::None);
    // The captured kernel did not run; the graph runs it.
    stream.synchronize().unwrap();
    assert_eq!(log.count(), 0);
    exec.launch(&stream).unwrap();
    cuda_stream_tests::tag(&stream, &log, 2, Duration::ZERO).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
}

#[test]
fn a_per_thread_stream_cannot_be_captured_in_relaxed_mode() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let per_thread = BuiltinStream::per_thread(device);
    // A Relaxed capture may end on another thread, where handle 0x2 is another stream.
    let refused = per_thread.begin_capture(capture::Relaxed).unwrap_err();
    assert!(matches!(refused, Error::CaptureMisuse(_)), "{refused:?}");
    assert_eq!(per_thread.capture_status().unwrap(), CaptureStatus::None, "nothing was begun");
    let log = TagLog::new(4).unwrap();
    let capture = per_thread.begin_capture(capture::ThreadLocal).unwrap();
    cuda_stream_tests::tag(&*per_thread, &log, 1, Duration::ZERO).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&per_thread).unwrap();
    per_thread.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1], "the other modes capture it");
}

#[test]
fn dropping_a_forked_stream_before_the_join_ends_the_capture_with_an_error_not_a_crash() {
    let _device = gpu_or_skip!();
    // In a child process: if the driver crashed destroying a stream that joined a capture, only
    // the child would go.
    cuda_stream_tests::child_test_prints("forked_stream_dropped_child", &["forked: end "]);
}

#[test]
#[ignore = "child process of dropping_a_forked_stream_before_the_join_ends_the_capture_with_an_error_not_a_crash"]
fn forked_stream_dropped_child() {
    let device = cuda_stream::Device::new(0).unwrap();
    let main = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = TagLog::new(4).unwrap();
    let capture = main.begin_capture(capture::Global).unwrap();
    let side = main.fork().unwrap();
    cuda_stream_tests::tag(&side, &log, 1, Duration::ZERO).unwrap();
    drop(side); // destroyed while it is part of the capture, before any join
    match capture.end() {
        Ok(_) => println!("forked: end succeeded"),
        Err(error) => println!("forked: end refused with {}", error.cuda_code().map_or("none", |code| code.name())),
    }
    assert_eq!(main.capture_status().unwrap(), CaptureStatus::None, "the capture is over either way");
    main.synchronize().unwrap();
    assert_eq!(log.count(), 0, "captured work never ran");
}

/// Two threads, each inside a raw launcher's closure, record an event on their own per-thread
/// stream while another library (raw FFI here, as cudarc's safe `begin_capture` would) captures
/// it. Such a record waits for the other threads' fast calls, and a launcher's closure is one:
/// the two would wait for each other forever. Each record is refused instead, and nothing hangs
/// (in a child process, so that a hang fails this test and not the binary).
#[test]
fn records_into_foreign_captures_inside_raw_launchers_are_refused_not_deadlocked() {
    let _device = gpu_or_skip!();
    cuda_stream_tests::child_test_prints("foreign_capture_records_in_launchers_child", &["both records refused"]);
}

#[test]
#[ignore = "child process of records_into_foreign_captures_inside_raw_launchers_are_refused_not_deadlocked"]
fn foreign_capture_records_in_launchers_child() {
    let device = cuda_stream::Device::new(0).unwrap();
    let barrier = std::sync::Barrier::new(2);
    let records: Vec<cuda_stream::Result<()>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let per_thread = BuiltinStream::per_thread(device);
                    let event = Event::new(device, EventFlags::default()).unwrap();
                    let mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
                    // SAFETY: this thread's per-thread stream, captured here and ended below, as
                    // another library's capture would be.
                    let begun = unsafe { sys::cudaStreamBeginCapture(per_thread.as_raw(), mode) };
                    assert_eq!(begun, sys::cudaError::cudaSuccess);
                    let mut recorded = None;
                    per_thread
                        .launch("record inside a launcher", |_| {
                            // Both threads inside their launchers' fast calls at once.
                            barrier.wait();
                            recorded = Some(per_thread.record(&event));
                            sys::cudaError::cudaSuccess
                        })
                        .unwrap();
                    let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
                    // SAFETY: ends the capture begun above; its graph is destroyed once.
                    unsafe {
                        assert_eq!(
                            sys::cudaStreamEndCapture(per_thread.as_raw(), &mut graph),
                            sys::cudaError::cudaSuccess
                        );
                        assert_eq!(sys::cudaGraphDestroy(graph), sys::cudaError::cudaSuccess);
                    }
                    recorded.expect("the launcher ran")
                })
            })
            .collect();
        threads.into_iter().map(|thread| thread.join().unwrap()).collect()
    });
    for record in &records {
        assert!(matches!(record, Err(Error::CaptureMisuse(_))), "refused, not recorded into the capture: {record:?}");
    }
    println!("both records refused");
}

/// A thread that forked and joined streams of a capture (`wait_stream`, through its own marker
/// event, recorded into the capture) exits while another thread ends the capture: the marker is
/// destroyed outside the end (a destroy racing an end crashed libcuda).
#[test]
fn a_thread_that_joined_streams_of_a_capture_exits_while_the_capture_ends() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let options = StreamOptions::non_blocking();
    let (a, b) = (Stream::new(device, options).unwrap(), Stream::new(device, options).unwrap());
    for _ in 0..200 {
        let capture = a.begin_capture(capture::ThreadLocal).unwrap();
        let (joined, wait_joined) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                b.wait_stream(&a).unwrap();
                cuda_stream_tests::spin(&b, Duration::ZERO).unwrap();
                a.wait_stream(&b).unwrap();
                joined.send(()).unwrap();
                // The thread's markers are destroyed as it exits, beside the end below.
            });
            wait_joined.recv().unwrap();
            let graph = capture.end().unwrap();
            assert_eq!(graph.node_count().unwrap(), 1, "the forked kernel, joined back");
        });
    }
}
