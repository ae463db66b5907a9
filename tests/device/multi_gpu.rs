//! Several GPUs from one thread: every operation works on a stream of a device that is not
//! current and leaves the current device as it was. Skips with fewer than two GPUs (fails under
//! `CUDA_STREAM_REQUIRE_GPUS=2`).

use cuda_stream::{
    BuiltinStream, Device, Error, Event, EventFlags, Stream, StreamOptions, StreamPool, StreamRef, capture,
};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{MappedFlag, TagLog, gpus_or_skip, poll_until};
use std::time::Duration;

#[test]
fn an_event_of_gpu_1_orders_a_stream_of_gpu_0() {
    let devices = gpus_or_skip!(2);
    let (gpu0, gpu1) = (devices[0], devices[1]);
    let _current = gpu0.make_current().unwrap();
    let (s0, s1) = (stream(gpu0), stream(gpu1));
    let log = TagLog::new(8).unwrap();
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&s1, &flag, Duration::from_secs(10)).unwrap();
    cuda_stream_tests::tag(&s1, &log, 1, Duration::ZERO).unwrap();
    let event = s1.record_event().unwrap();
    s0.wait_event(&event).unwrap();
    cuda_stream_tests::tag(&s0, &log, 2, Duration::ZERO).unwrap();
    let early = poll_until(Duration::from_millis(100), || log.count() > 0);
    assert!(early.is_none(), "ran before GPU 1's event: tags {:?}, flag {:?}", log.tags(), flag.outcome());
    flag.set();
    s0.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
    assert_eq!(Device::current().unwrap(), gpu0);
}

#[test]
fn wait_stream_orders_across_devices() {
    let devices = gpus_or_skip!(2);
    let (gpu0, gpu1) = (devices[0], devices[1]);
    let _current = gpu0.make_current().unwrap();
    let (s0, s1) = (stream(gpu0), stream(gpu1));
    let log = TagLog::new(8).unwrap();
    cuda_stream_tests::tag(&s0, &log, 1, Duration::from_millis(50)).unwrap();
    s1.wait_stream(&s0).unwrap();
    cuda_stream_tests::tag(&s1, &log, 2, Duration::ZERO).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
    assert_eq!(Device::current().unwrap(), gpu0);
}

#[test]
fn recording_an_event_on_another_devices_stream_is_refused() {
    let devices = gpus_or_skip!(2);
    let event = Event::new(devices[1], EventFlags::default()).unwrap();
    let on_gpu0 = stream(devices[0]);
    let error = on_gpu0.record(&event).unwrap_err();
    assert_eq!(
        error,
        Error::DeviceMismatch { what: "an event is recorded on a stream of its own device", expected: 0, found: 1 }
    );
}

#[test]
fn every_operation_works_on_a_device_that_is_not_current() {
    let devices = gpus_or_skip!(2);
    let (gpu0, gpu1) = (devices[0], devices[1]);
    let _current = gpu0.make_current().unwrap();
    let unchanged = || assert_eq!(Device::current().unwrap(), gpu0, "the current device changed");
    let range = gpu1.priority_range().unwrap();
    unchanged();
    let s1 = Stream::new(gpu1, StreamOptions::non_blocking().with_priority(range.most_urgent())).unwrap();
    unchanged();
    assert_eq!(s1.device(), gpu1);
    assert_eq!(s1.priority().unwrap(), range.most_urgent());
    assert!(s1.is_non_blocking().unwrap());
    let log = TagLog::new(16).unwrap();
    cuda_stream_tests::tag(&s1, &log, 1, Duration::from_millis(20)).unwrap();
    unchanged();
    assert!(!s1.query().unwrap());
    let (start, end) =
        (Event::new(gpu1, EventFlags::timing()).unwrap(), Event::new(gpu1, EventFlags::timing()).unwrap());
    s1.record(&start).unwrap();
    cuda_stream_tests::spin(&s1, Duration::from_millis(5)).unwrap();
    s1.record(&end).unwrap();
    s1.synchronize().unwrap();
    assert!(end.elapsed(&start).unwrap().unwrap() >= Duration::from_millis(4));
    unchanged();
    let child = s1.fork().unwrap();
    assert_eq!(child.device(), gpu1);
    child.launch_host_fn(|| ()).unwrap();
    cuda_stream_tests::block_on(child.completion()).unwrap();
    unchanged();
    let legacy1 = BuiltinStream::legacy(gpu1);
    cuda_stream_tests::tag(&legacy1, &log, 2, Duration::ZERO).unwrap();
    legacy1.synchronize().unwrap();
    assert_ne!(legacy1, BuiltinStream::legacy(gpu0), "each device has its own legacy stream");
    unchanged();
    let pool = StreamPool::new(gpu1, StreamOptions::non_blocking(), 2).unwrap();
    let lease = pool.acquire().unwrap();
    assert_eq!(lease.device(), gpu1);
    lease.as_current(|| {
        assert!(StreamRef::with_current(gpu1, |s| s == &*lease));
        assert!(!StreamRef::with_current(gpu0, |s| s == &*lease), "current streams are per device");
    });
    let capture = s1.begin_capture(capture::ThreadLocal).unwrap();
    cuda_stream_tests::tag(&s1, &log, 3, Duration::ZERO).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&lease).unwrap();
    lease.synchronize().unwrap();
    unchanged();
    assert_eq!(log.tags(), vec![1, 2, 3]);
    drop((lease, child));
    s1.destroy().unwrap();
    unchanged();
}

#[test]
fn a_wrong_device_is_a_typed_error_when_a_handle_is_wrapped_and_when_events_are_timed() {
    let devices = gpus_or_skip!(2);
    let (gpu0, gpu1) = (devices[0], devices[1]);
    let s1 = stream(gpu1);
    // SAFETY: `s1` outlives every borrow; nothing is taken over on error.
    let wrong = unsafe { cuda_stream::BorrowedStream::borrow_raw_on(s1.as_raw(), gpu0) }.unwrap_err();
    assert!(matches!(wrong, Error::DeviceMismatch { expected: 0, found: 1, .. }), "{wrong:?}");
    // SAFETY: as above.
    let read = unsafe { cuda_stream::BorrowedStream::borrow_raw(s1.as_raw()) }.unwrap();
    assert_eq!(read.device(), gpu1, "the device is read from the handle, whatever is current");
    // SAFETY: on error the handle is not taken: `s1` still owns it.
    let owned = unsafe { Stream::from_raw_owned(s1.as_raw(), gpu0) }.unwrap_err();
    assert!(matches!(owned, Error::DeviceMismatch { .. }), "{owned:?}");
    s1.synchronize().expect("still ours");
    let (e0, e1) = (Event::new(gpu0, EventFlags::timing()).unwrap(), Event::new(gpu1, EventFlags::timing()).unwrap());
    stream(gpu0).record(&e0).unwrap();
    s1.record(&e1).unwrap();
    e1.synchronize().unwrap();
    let elapsed = e1.elapsed(&e0).unwrap_err();
    assert!(matches!(elapsed, Error::DeviceMismatch { expected: 0, found: 1, .. }), "{elapsed:?}");
}

#[test]
fn as_current_with_device_switches_both_and_restores_both_on_two_gpus() {
    let devices = gpus_or_skip!(2);
    let (gpu0, gpu1) = (devices[0], devices[1]);
    let _current = gpu0.make_current().unwrap();
    let s1 = stream(gpu1);
    let seen = s1
        .as_current_with_device(|| (Device::current().unwrap(), StreamRef::with_current(gpu1, |s| s == &*s1)))
        .unwrap();
    assert_eq!(seen, (gpu1, true));
    assert_eq!(Device::current().unwrap(), gpu0);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s1.as_current_with_device(|| panic!("unwinding"));
    }));
    assert!(unwound.is_err());
    assert_eq!(Device::current().unwrap(), gpu0, "the device is restored on panic");
    assert!(StreamRef::with_current(gpu1, |s| s == &*BuiltinStream::null(gpu1)), "and the stream");
}

/// Issue 22 item 9, shown on two GPUs: a fresh thread that uses only GPU 1, through every
/// kind of call (streams, events and `elapsed`, priorities, capture info, attributes, graph
/// capture and instantiation, completion futures, buffers), never creates GPU 0's primary
/// context. In a child process: other tests here create GPU 0's.
#[test]
fn a_thread_using_only_gpu_1_never_creates_gpu_0s_primary_context() {
    let _devices = gpus_or_skip!(2);
    cuda_stream_tests::child_test_prints("gpu_1_only_child", &["GPU 0's primary context was never created"]);
}

#[test]
#[ignore = "run in a child process by a_thread_using_only_gpu_1_never_creates_gpu_0s_primary_context"]
fn gpu_1_only_child() {
    let (gpu0, gpu1) = (Device::new(0).unwrap(), Device::new(1).unwrap());
    assert!(!gpu0.has_primary_context().unwrap(), "a fresh process has no context on GPU 0");
    std::thread::spawn(move || {
        let untouched = |after: &str| {
            assert!(!gpu0.has_primary_context().unwrap(), "{after} created GPU 0's primary context");
        };
        let stream = Stream::new(gpu1, StreamOptions::non_blocking()).unwrap();
        untouched("Stream::new");
        let (start, end) =
            (Event::new(gpu1, EventFlags::timing()).unwrap(), Event::new(gpu1, EventFlags::timing()).unwrap());
        stream.record(&start).unwrap();
        cuda_stream_tests::spin(&stream, Duration::from_millis(2)).unwrap();
        stream.record(&end).unwrap();
        stream.synchronize().unwrap();
        assert!(end.elapsed(&start).unwrap().is_some());
        untouched("records, a launch, synchronize and elapsed");
        stream.priority().unwrap();
        stream.capture_info().unwrap();
        stream.sync_policy().unwrap();
        untouched("priority, capture_info and sync_policy");
        let capture = stream.begin_capture(cuda_stream::capture::ThreadLocal).unwrap();
        cuda_stream_tests::spin(&stream, Duration::from_micros(10)).unwrap();
        let graph = capture.end().unwrap();
        let exec = graph.instantiate().unwrap();
        exec.launch(&stream).unwrap();
        untouched("a capture, instantiate and a graph launch");
        cuda_stream_tests::block_on(stream.completion()).unwrap();
        let marker = std::sync::Arc::new(Event::new(gpu1, EventFlags::default()).unwrap());
        stream.record(&marker).unwrap();
        cuda_stream_tests::block_on(marker.completion()).unwrap();
        untouched("completion futures");
        let buffer = cuda_stream::DeviceBuffer::<u32, _>::zeroed(&stream, 1024).unwrap();
        assert_eq!(buffer.to_vec().unwrap(), vec![0; 1024]);
        drop(buffer);
        stream.synchronize().unwrap();
        untouched("a device buffer");
    })
    .join()
    .unwrap();
    println!("GPU 0's primary context was never created");
}
