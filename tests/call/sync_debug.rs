//! The sync-debug mode on the GPU: each kind of call that makes the host wait for the device
//! is reported with its API name (and still waits: a 50 ms kernel is waited for), or refused
//! before it waits or enqueues (the kernel is still running when the refusal returns; a
//! refused launch on the legacy stream never runs); asynchronous work is never reported; the
//! process-wide mode reaches every thread without a scope; a drop is reported, never refused
//! (its memory goes back to the pool).

use cuda_stream::sync_debug::{
    SyncDebugMode, SyncEvent, SyncKind, set_sync_debug_mode, sync_debug_scope, take_sync_events,
};
use cuda_stream::{
    BuiltinStream, DeviceBuffer, DeviceCopy, Error, Event, EventFlags, LaunchConfig, MemPool, PinnedBuffer,
    RecordFlags, Stream, StreamOptions, StreamRef, capture,
};
use cuda_stream_tests::{gpu_or_skip, non_blocking_stream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SPIN: Duration = Duration::from_millis(50);

/// `cs_pair` of `kernels/launch_kernels.cu`.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct Pair {
    first: u32,
    second: u32,
}
// SAFETY: two integers, no padding.
unsafe impl DeviceCopy for Pair {}

cuda_stream::kernel! {
    /// Writes the sum of its arguments to `out`.
    static SUM = fn cs_mixed_args(small: u8, middle: u16, large: u64, pair: Pair, out: *mut u64);
}

/// Launches `SUM` through the crate (so that the sync-debug mode sees it), writing 6 to `out`.
fn write_six(stream: &StreamRef, out: *mut u64) -> cuda_stream::Result<()> {
    // SAFETY: `out` is one u64 of the stream's device (the callers' buffers).
    unsafe { SUM.launch(stream, &LaunchConfig::new(1, 1), (1, 2, 3, Pair { first: 0, second: 0 }, out)) }
}

fn kinds(events: &[SyncEvent]) -> Vec<(&'static str, SyncKind)> {
    events.iter().map(|event| (event.api, event.kind)).collect()
}

#[test]
fn each_kind_of_wait_is_reported_with_its_api_name_and_still_waits() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let event = Event::new(device, EventFlags::default()).unwrap();
    let legacy = BuiltinStream::legacy(device);
    let buffer = DeviceBuffer::from_slice(&*stream, &[7u32; 256]).unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(256).unwrap();
    let mut out = DeviceBuffer::<u64, _>::zeroed(&legacy, 1).unwrap();
    legacy.synchronize().unwrap();
    let scope = sync_debug_scope(SyncDebugMode::Report);
    let waited = |wait: &dyn Fn() -> cuda_stream::Result<()>| {
        // Timed from before the launch: the kernel spins SPIN after it began, so a wait for it
        // lasts at least that long however long the launch and the record took.
        let start = Instant::now();
        cuda_stream_tests::spin(&*stream, SPIN).unwrap();
        stream.record(&event).unwrap();
        wait().unwrap();
        start.elapsed()
    };
    assert!(waited(&|| stream.synchronize()) >= SPIN - Duration::from_millis(5), "the stream synchronize waited");
    assert!(waited(&|| event.synchronize()) >= SPIN - Duration::from_millis(5), "the event synchronize waited");
    assert!(waited(&|| device.synchronize()) >= SPIN - Duration::from_millis(5), "the device synchronize waited");
    write_six(&legacy, out.as_mut_ptr()).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), vec![7; 256]);
    buffer.copy_to_pinned(&*stream, &mut pinned).unwrap();
    assert_eq!(pinned.as_slice().unwrap(), &[7; 256][..]);
    let events = scope.take_events();
    assert_eq!(
        kinds(&events),
        [
            ("cudaStreamSynchronize", SyncKind::StreamSynchronize),
            ("cudaEventSynchronize", SyncKind::EventSynchronize),
            ("cudaDeviceSynchronize", SyncKind::DeviceSynchronize),
            ("work on the legacy default stream", SyncKind::LegacyStream),
            ("cudaMemcpyAsync (pageable host memory)", SyncKind::PageableCopy),
            ("cudaEventSynchronize (page-locked memory's copies in flight)", SyncKind::PinnedWait),
        ]
    );
    assert_eq!(events[0].thread.as_deref(), std::thread::current().name());
    drop(scope);
    stream.synchronize().unwrap();
    assert!(take_sync_events().is_empty(), "a scope's events are its own");
    assert_eq!(out.to_vec().unwrap(), vec![6], "the reported launch ran");
}

#[test]
fn the_refuse_mode_fails_each_kind_before_it_waits_or_enqueues() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let event = Event::new(device, EventFlags::default()).unwrap();
    let legacy = BuiltinStream::legacy(device);
    let mut out = DeviceBuffer::<u64, _>::zeroed(&legacy, 1).unwrap();
    legacy.synchronize().unwrap();
    let buffer = DeviceBuffer::from_slice(&*stream, &[3u32; 64]).unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(64).unwrap();
    let mut host = vec![0u32; 64];
    cuda_stream_tests::spin(&*stream, Duration::from_millis(300)).unwrap();
    stream.record(&event).unwrap();
    buffer.copy_to_pinned(&*stream, &mut pinned).unwrap();
    let scope = sync_debug_scope(SyncDebugMode::Refuse);
    let start = Instant::now();
    let refused = |result: cuda_stream::Result<()>, api: &str| match result {
        Err(Error::SyncRefused { api: refused }) => assert_eq!(refused, api),
        other => panic!("{api}: {other:?}"),
    };
    refused(stream.synchronize(), "cudaStreamSynchronize");
    refused(event.synchronize(), "cudaEventSynchronize");
    refused(device.synchronize(), "cudaDeviceSynchronize");
    refused(write_six(&legacy, out.as_mut_ptr()), "work on the legacy default stream");
    refused(buffer.copy_to_slice(&*stream, &mut host), "cudaMemcpyAsync (pageable host memory)");
    refused(pinned.as_slice().map(drop), "cudaEventSynchronize (page-locked memory's copies in flight)");
    assert!(start.elapsed() < Duration::from_millis(150), "nothing waited: {:?}", start.elapsed());
    assert_eq!(stream.query(), Ok(false), "the kernel still runs");
    assert!(scope.take_events().is_empty(), "refusals are not reports");
    drop(scope);
    stream.synchronize().unwrap();
    legacy.synchronize().unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0], "the refused launch on the legacy stream never ran");
    assert_eq!(host, vec![0; 64], "the refused copy never ran");
    assert_eq!(pinned.as_slice().unwrap(), &[3; 64][..]);
}

#[test]
fn asynchronous_work_is_never_reported() {
    let device = gpu_or_skip!();
    let (stream, other) = (non_blocking_stream(device), non_blocking_stream(device));
    let blocking = Stream::new(device, StreamOptions::default()).unwrap();
    let scope = sync_debug_scope(SyncDebugMode::Refuse);
    let event = Arc::new(Event::new(device, EventFlags::default()).unwrap());
    cuda_stream_tests::spin(&*stream, Duration::from_millis(1)).unwrap();
    cuda_stream_tests::empty(&blocking).unwrap();
    stream.record(&event).unwrap();
    other.wait_event(&event).unwrap();
    other.wait_stream(&*stream).unwrap();
    let _ = event.query().unwrap();
    let _ = stream.query().unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&*stream, 1024).unwrap();
    buffer.fill_bytes(&*other, 1).unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(1024).unwrap();
    buffer.copy_to_pinned(&*stream, &mut pinned).unwrap();
    buffer.copy_from_pinned(&*other, &mut pinned).unwrap();
    stream.launch_host_fn(|| {}).unwrap();
    let capture = stream.begin_capture(capture::ThreadLocal).unwrap();
    cuda_stream_tests::empty(&*stream).unwrap();
    stream.record_with(&event, RecordFlags::external()).unwrap();
    let graph = capture.end().unwrap();
    graph.instantiate().unwrap().launch(&*other).unwrap();
    let completion = other.completion();
    cuda_stream_tests::block_on(completion).unwrap();
    drop(buffer);
    assert!(scope.take_events().is_empty());
    drop(scope);
    drop(pinned);
    stream.synchronize().unwrap();
}

#[test]
fn the_process_mode_reaches_threads_without_a_scope_of_their_own() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let _ = take_sync_events();
    assert_eq!(set_sync_debug_mode(SyncDebugMode::Report), SyncDebugMode::Off);
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("synchronizing".into())
            .spawn_scoped(scope, || {
                stream.synchronize().unwrap();
                let _quiet = sync_debug_scope(SyncDebugMode::Off);
                stream.synchronize().unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    });
    assert_eq!(set_sync_debug_mode(SyncDebugMode::Off), SyncDebugMode::Report);
    let events = take_sync_events();
    assert_eq!(kinds(&events), [("cudaStreamSynchronize", SyncKind::StreamSynchronize)], "the scope Off kept one out");
    assert_eq!(events[0].thread.as_deref(), Some("synchronizing"));
    stream.synchronize().unwrap();
    assert!(take_sync_events().is_empty(), "off again");
}

#[test]
fn a_drop_that_waits_is_reported_never_refused_and_frees_its_memory() {
    let device = gpu_or_skip!();
    let pool = MemPool::device_default(device).unwrap();
    let legacy = BuiltinStream::legacy(device);
    legacy.synchronize().unwrap();
    let used_before = pool.stats().unwrap().used_current;
    let buffer = DeviceBuffer::<u32, _>::zeroed(&legacy, 1 << 20).unwrap();
    legacy.synchronize().unwrap();
    assert!(pool.stats().unwrap().used_current > used_before);
    let scope = sync_debug_scope(SyncDebugMode::Refuse);
    drop(buffer);
    assert_eq!(kinds(&scope.take_events()), [("work on the legacy default stream", SyncKind::LegacyStream)]);
    drop(scope);
    legacy.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, used_before, "the free was enqueued, not refused");
}
