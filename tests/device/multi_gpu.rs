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

/// GPUs 0 and 1 of `devices` where GPU 1 can reach GPU 0's memory; else a loud skip.
fn peers_or_skip(devices: &[Device]) -> Option<(Device, Device)> {
    let (gpu0, gpu1) = (devices[0], devices[1]);
    if gpu1.can_access_peer(gpu0).unwrap() {
        Some((gpu0, gpu1))
    } else {
        eprintln!("SKIPPED: GPU 1 cannot reach GPU 0's memory on this host");
        None
    }
}

cuda_stream::kernel! {
    /// `y = a * x + y` over `n` floats (`kernels/launch_kernels.cu`).
    static SAXPY = fn cs_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
}

/// Copies `n` floats at `x` (memory of another device) into a new buffer on `stream` with a
/// kernel, after `stream` waited for `after`, and returns them.
fn read_through_kernel(stream: &Stream, after: &StreamRef, x: *const f32, n: usize) -> Vec<f32> {
    let mut y = cuda_stream::DeviceBuffer::<f32, _>::zeroed(stream, n).unwrap();
    stream.wait_stream(after).unwrap();
    let config = cuda_stream::LaunchConfig::new(n.div_ceil(256) as u32, 256);
    // SAFETY: `x` holds `n` floats this device may read (the callers grant the access) and
    // outlive the kernel (`to_vec` waits for it); `y` holds `n` floats on `stream`.
    unsafe { SAXPY.launch(stream, &config, (1.0, x, y.as_mut_ptr(), n as u32)).unwrap() };
    y.to_vec().unwrap()
}

#[test]
fn a_pools_access_lets_a_kernel_on_gpu_1_read_gpu_0s_pool_memory() {
    let Some((gpu0, gpu1)) = peers_or_skip(&gpus_or_skip!(2)) else { return };
    let (s0, s1) = (stream(gpu0), stream(gpu1));
    let pool = cuda_stream::MemPool::new(gpu0).unwrap();
    assert_eq!(pool.access(gpu1).unwrap(), cuda_stream::PoolAccess::None, "a new pool is its device's only");
    assert_eq!(pool.access(gpu0).unwrap(), cuda_stream::PoolAccess::ReadWrite);
    let values: Vec<f32> = (0..4096).map(|i| i as f32).collect();
    let mut x = cuda_stream::DeviceBuffer::<f32, _>::new_in(&pool, &s0, values.len()).unwrap();
    x.copy_from_slice(&s0, &values).unwrap();
    pool.set_access(gpu1, cuda_stream::PoolAccess::ReadWrite).unwrap();
    assert_eq!(pool.access(gpu1).unwrap(), cuda_stream::PoolAccess::ReadWrite);
    let own = pool.set_access(gpu0, cuda_stream::PoolAccess::None);
    assert!(matches!(own, Err(Error::SameDevice { device: 0, .. })), "a pool's own device keeps read-write: {own:?}");
    assert!(matches!(gpu1.enable_peer_access(gpu1), Err(Error::SameDevice { device: 1, .. })));
    assert!(!gpu0.can_access_peer(gpu0).unwrap_or(false), "a device is not its own peer");
    assert_eq!(read_through_kernel(&s1, &s0, x.as_ptr(), values.len()), values, "GPU 1 read GPU 0's pool memory");
    // Peer copies into and out of the pool's memory once access is granted (reported to
    // write nothing on some drivers: JuliaGPU/CUDA.jl#3112).
    let doubled: Vec<f32> = values.iter().map(|value| value * 2.0).collect();
    let on_gpu1 = cuda_stream::DeviceBuffer::from_slice(&s1, &doubled).unwrap();
    x.copy_from(&s0, &on_gpu1).unwrap();
    assert_eq!(x.to_vec().unwrap(), doubled, "a peer copy into the pool's memory");
    let mut back = cuda_stream::DeviceBuffer::<f32, _>::zeroed(&s1, values.len()).unwrap();
    back.copy_from(&s1, &x).unwrap();
    assert_eq!(back.to_vec().unwrap(), doubled, "a peer copy out of it");
}

#[test]
fn peer_access_lets_a_kernel_on_gpu_1_read_gpu_0s_cuda_malloc_memory() {
    let Some((gpu0, gpu1)) = peers_or_skip(&gpus_or_skip!(2)) else { return };
    let values: Vec<f32> = (0..4096).map(|i| (i * 3) as f32).collect();
    let bytes = values.len() * 4;
    let mut x: *mut std::ffi::c_void = std::ptr::null_mut();
    {
        let _current = gpu0.make_current().unwrap();
        // SAFETY: a valid out-pointer; then `bytes` bytes copied from a live slice into it.
        unsafe {
            cuda_stream::check(cuda_stream::sys::cudaMalloc(&mut x, bytes), "cudaMalloc").unwrap();
            let code = cuda_stream::sys::cudaMemcpy(
                x,
                values.as_ptr().cast(),
                bytes,
                cuda_stream::sys::cudaMemcpyKind::cudaMemcpyHostToDevice,
            );
            cuda_stream::check(code, "cudaMemcpy").unwrap();
        }
    }
    gpu1.enable_peer_access(gpu0).unwrap();
    gpu1.enable_peer_access(gpu0).unwrap();
    let (s0, s1) = (stream(gpu0), stream(gpu1));
    let read = read_through_kernel(&s1, &s0, x.cast_const().cast(), values.len());
    assert_eq!(read, values, "GPU 1 read GPU 0's cudaMalloc memory");
    gpu1.disable_peer_access(gpu0).unwrap();
    gpu1.disable_peer_access(gpu0).unwrap();
    assert_eq!(cuda_stream_tests::take_last_error(), cuda_stream::sys::cudaError::cudaSuccess, "no stale error left");
    let _current = gpu0.make_current().unwrap();
    // SAFETY: allocated above; the kernel that read it has completed (`to_vec` waited).
    cuda_stream::check(unsafe { cuda_stream::sys::cudaFree(x) }, "cudaFree").unwrap();
}

/// A buffer of GPU 0 (pool memory GPU 1 may read) as a typed launch's argument on GPU 1: the
/// kernel waits for GPU 0's write of it (a fill behind a 100 ms spin), and GPU 0's next write
/// waits for the kernel (held back behind a 200 ms spin on GPU 1): the ordering crosses the
/// devices both ways.
#[test]
fn a_buffer_of_gpu_0_used_by_a_launch_on_gpu_1_is_ordered_both_ways() {
    let Some((gpu0, gpu1)) = peers_or_skip(&gpus_or_skip!(2)) else { return };
    let (s0, s1) = (stream(gpu0), stream(gpu1));
    let pool = cuda_stream::MemPool::new(gpu0).unwrap();
    pool.set_access(gpu1, cuda_stream::PoolAccess::ReadWrite).unwrap();
    let n = 1 << 16;
    let mut x = cuda_stream::DeviceBuffer::<f32, _>::new_in(&pool, &s0, n).unwrap();
    x.copy_from_slice(&s0, &vec![1.0; n]).unwrap();
    cuda_stream_tests::spin(&*s0, std::time::Duration::from_millis(100)).unwrap();
    x.fill_bytes(&s0, 0x3F).unwrap();
    let filled = f32::from_ne_bytes([0x3F; 4]);
    let mut y = cuda_stream::DeviceBuffer::<f32, _>::zeroed(&s1, n).unwrap();
    cuda_stream_tests::spin(&*s1, std::time::Duration::from_millis(200)).unwrap();
    let config = cuda_stream::LaunchConfig::new((n as u32).div_ceil(256), 256);
    // SAFETY: the kernel reads `x`'s n floats (GPU 1 may: the pool's access) and writes `y`'s.
    unsafe { SAXPY.launch(&s1, &config, (1.0, &x, &mut y, n as u32)) }.unwrap();
    x.fill_bytes(&s0, 0).unwrap();
    let read = y.to_vec().unwrap();
    assert!(
        read.iter().all(|&v| v == filled),
        "GPU 1 read x after GPU 0's fill and before its clear: {:?}",
        &read[..4]
    );
    assert_eq!(x.to_vec().unwrap(), vec![0.0; n]);
}

/// In a capture of GPU 1's stream, a typed launch given GPU 0's buffer and a copy between the
/// two GPUs' buffers are refused before CUDA sees them (a graph holds only its own device's
/// buffers), and the capture goes on: the same launch with GPU 1's buffers alone is captured,
/// and its graph replays.
#[test]
fn a_capture_refuses_another_devices_buffers_and_goes_on() {
    let Some((gpu0, gpu1)) = peers_or_skip(&gpus_or_skip!(2)) else { return };
    let (s0, s1) = (stream(gpu0), stream(gpu1));
    let pool = cuda_stream::MemPool::new(gpu0).unwrap();
    pool.set_access(gpu1, cuda_stream::PoolAccess::ReadWrite).unwrap();
    let n = 256;
    let mut x0 = cuda_stream::DeviceBuffer::<f32, _>::new_in(&pool, &s0, n).unwrap();
    x0.copy_from_slice(&s0, &vec![1.0; n]).unwrap();
    let x1 = cuda_stream::DeviceBuffer::<f32, _>::from_slice(&s1, &vec![1.0; n]).unwrap();
    let mut y = cuda_stream::DeviceBuffer::<f32, _>::zeroed(&s1, n).unwrap();
    let captured = stream(gpu1);
    let capture = captured.begin_capture(cuda_stream::capture::ThreadLocal).unwrap();
    let config = cuda_stream::LaunchConfig::new(1, 256);
    // SAFETY: the kernel would read `x0`'s n floats (GPU 1 may: the pool's access) and write `y`'s.
    let refused = unsafe { SAXPY.launch(&captured, &config, (1.0, &x0, &mut y, n as u32)) };
    assert!(matches!(refused, Err(cuda_stream::Error::CaptureMisuse(_))), "{refused:?}");
    let copied = y.copy_from(&captured, &x0);
    assert!(matches!(copied, Err(cuda_stream::Error::CaptureMisuse(_))), "{copied:?}");
    // SAFETY: reads `x1`'s n floats and writes `y`'s, both GPU 1's, held by the graph.
    unsafe { SAXPY.launch(&captured, &config, (2.0, &x1, &mut y, n as u32)) }.unwrap();
    let graph = capture.end().unwrap();
    assert_eq!(graph.node_count().unwrap(), 1, "only the launch on GPU 1's buffers");
    graph.instantiate().unwrap().launch(&captured).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![2.0; n]);
    assert_eq!(x0.to_vec().unwrap(), vec![1.0; n]);
}
