//! cuda-stream's own GPU tests. They need no nvcc-built kernels (host functions are the work
//! whose order they observe), so they also run from a build against a toolkit without nvcc,
//! such as NVIDIA's CUDA 12 runtime wheel. Without a GPU they say they are skipped; with
//! `CUDA_STREAM_REQUIRE_GPU=1` a missing GPU fails them.

use cuda_stream::{
    BuiltinStream, Device, Event, EventFlags, Ownership, Stream, StreamOptions, StreamPool, StreamRef, capture,
};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The test that captures and the one that synchronizes the device, one at a time: while a
/// capture of a device is in progress the crate refuses `Device::synchronize` of it.
static CAPTURE_OR_DEVICE_SYNC: Mutex<()> = Mutex::new(());

fn device(test: &str) -> Option<Device> {
    match Device::count() {
        Ok(count) if count > 0 => Some(Device::new(0).unwrap()),
        other => {
            if std::env::var("CUDA_STREAM_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("{test}: a GPU is required (CUDA_STREAM_REQUIRE_GPU=1): {other:?}");
            }
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no usable CUDA GPU ({other:?})");
            None
        }
    }
}

/// A host function that blocks its stream until the returned sender is used (or dropped).
fn hold(stream: &StreamRef) -> mpsc::Sender<()> {
    let (release, wait) = mpsc::channel::<()>();
    stream
        .launch_host_fn(move || {
            let _ = wait.recv_timeout(Duration::from_secs(10));
        })
        .unwrap();
    release
}

#[test]
fn every_kind_of_stream_with_its_ownership_and_priority() {
    let Some(device) = device("every_kind_of_stream_with_its_ownership_and_priority") else { return };
    let range = device.priority_range().unwrap();
    let high = Stream::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent())).unwrap();
    let blocking = Stream::new(device, StreamOptions::default()).unwrap();
    assert_eq!(high.priority().unwrap(), range.most_urgent());
    assert!(high.is_non_blocking().unwrap() && !blocking.is_non_blocking().unwrap());
    assert_eq!(high.ownership(), Ownership::Owned);
    let (legacy, per_thread) = (BuiltinStream::legacy(device), BuiltinStream::per_thread(device));
    assert_ne!(legacy, per_thread);
    assert_ne!(high, blocking);
    let expected_null = if cuda_stream::NULL_STREAM_IS_PER_THREAD { &per_thread } else { &legacy };
    assert_eq!(&BuiltinStream::null(device), expected_null);
}

#[test]
fn query_is_false_while_a_host_fn_holds_the_stream() {
    let Some(device) = device("query_is_false_while_a_host_fn_holds_the_stream") else { return };
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let release = hold(&stream);
    assert_eq!(stream.query(), Ok(false));
    release.send(()).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(stream.query(), Ok(true));
}

#[test]
fn wait_event_and_wait_stream_order_host_fns_across_streams() {
    let Some(device) = device("wait_event_and_wait_stream_order_host_fns_across_streams") else { return };
    let (a, b, c) = (
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
    );
    let first_done = Arc::new(AtomicBool::new(false));
    let release = hold(&a);
    let done = Arc::clone(&first_done);
    a.launch_host_fn(move || done.store(true, Ordering::SeqCst)).unwrap();
    b.wait_event(&a.record_event().unwrap()).unwrap();
    c.wait_stream(&a).unwrap();
    let (seen_b, seen_c) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    for (stream, seen) in [(&b, &seen_b), (&c, &seen_c)] {
        let (first, seen) = (Arc::clone(&first_done), Arc::clone(seen));
        stream.launch_host_fn(move || seen.store(first.load(Ordering::SeqCst), Ordering::SeqCst)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(!b.query().unwrap() && !c.query().unwrap(), "b and c wait for a");
    release.send(()).unwrap();
    b.synchronize().unwrap();
    c.synchronize().unwrap();
    assert!(seen_b.load(Ordering::SeqCst) && seen_c.load(Ordering::SeqCst), "b and c ran after a's work");
}

#[test]
fn elapsed_measures_a_host_fn_between_timing_events() {
    let Some(device) = device("elapsed_measures_a_host_fn_between_timing_events") else { return };
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let (start, end) =
        (Event::new(device, EventFlags::timing()).unwrap(), Event::new(device, EventFlags::timing()).unwrap());
    stream.record(&start).unwrap();
    stream.launch_host_fn(|| std::thread::sleep(Duration::from_millis(30))).unwrap();
    stream.record(&end).unwrap();
    end.synchronize().unwrap();
    let elapsed = end.elapsed(&start).unwrap().unwrap();
    assert!(elapsed >= Duration::from_millis(29), "{elapsed:?}");
}

#[test]
fn destroy_returns_at_once_and_the_pending_host_fn_still_runs() {
    let Some(device) = device("destroy_returns_at_once_and_the_pending_host_fn_still_runs") else { return };
    let _serial = CAPTURE_OR_DEVICE_SYNC.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let release = hold(&stream);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    stream.launch_host_fn(move || flag.store(true, Ordering::SeqCst)).unwrap();
    let start = Instant::now();
    if std::env::var_os("CUDA_STREAM_SANITIZER").is_some() {
        // compute-sanitizer makes cudaStreamDestroy wait for the stream: release it first.
        let _ = writeln!(std::io::stderr(), "SKIPPED the timing half: destroy blocks under compute-sanitizer");
        release.send(()).unwrap();
        stream.destroy().unwrap();
    } else {
        stream.destroy().unwrap();
        assert!(start.elapsed() < Duration::from_millis(500), "destroy waited {:?}", start.elapsed());
        assert!(!ran.load(Ordering::SeqCst));
        release.send(()).unwrap();
    }
    device.synchronize().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ran.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(ran.load(Ordering::SeqCst), "work enqueued before the destroy completed");
}

#[test]
fn a_captured_host_fn_runs_once_per_replay() {
    let Some(device) = device("a_captured_host_fn_runs_once_per_replay") else { return };
    let _serial = CAPTURE_OR_DEVICE_SYNC.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut capture = stream.begin_capture(capture::ThreadLocal).unwrap();
    let counter = Arc::clone(&runs);
    capture
        .launch_host_fn(&stream, move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[test]
fn pool_current_guard_and_completion() {
    let Some(device) = device("pool_current_guard_and_completion") else { return };
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 2).unwrap();
    let (a, b) = (pool.acquire().unwrap(), pool.acquire().unwrap());
    assert_ne!(a.id().unwrap(), b.id().unwrap());
    a.as_current(|| assert!(StreamRef::with_current(device, |s| s == &*a)));
    assert!(StreamRef::with_current(device, |s| *s == *BuiltinStream::null(device)));
    let release = hold(&b);
    let done = b.completion();
    assert!(!done.is_complete());
    release.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done.is_complete() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(done.is_complete());
}
