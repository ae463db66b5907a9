//! Streams on SM partitions (green contexts): a kernel saturating partition A leaves a kernel
//! on partition B running at once, on other SMs (%smid and %globaltimer stamps), where without
//! partitions the same kernel waits for the backlog; every stream operation works on a
//! partition's stream; splits the device cannot make are refused; a partition lives as long as
//! its streams.

use cuda_stream::{
    Device, DeviceBuffer, DeviceCopy, Error, Event, EventFlags, LaunchConfig, Stream, StreamOptions, StreamRef, capture,
};
use cuda_stream_tests::{gpu_or_skip, poll_until};
use std::collections::BTreeSet;
use std::time::Duration;

/// What one block saw (`cs_block_stamp` in `kernels/launch_kernels.cu`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct BlockStamp {
    start_ns: u64,
    end_ns: u64,
    sm: u32,
    value: u32,
}
// SAFETY: four integers, no padding.
unsafe impl DeviceCopy for BlockStamp {}

cuda_stream::kernel! {
    static STAMPED_SPIN = fn cs_stamped_spin(stamps: *mut BlockStamp, ns: u64, trigger_at_start: u32);
    static SAXPY = fn cs_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
}

/// Launches `blocks` blocks of `threads` spinning `spin` each, stamping into `stamps`.
fn stamped(
    stream: &StreamRef,
    stamps: &mut DeviceBuffer<BlockStamp, &Stream>,
    blocks: u32,
    threads: u32,
    spin: Duration,
) {
    assert!(stamps.len() >= blocks as usize);
    // SAFETY: one stamp per block on the stream's device.
    unsafe {
        STAMPED_SPIN.launch(
            stream,
            &LaunchConfig::new(blocks, threads),
            (stamps.as_mut_ptr(), spin.as_nanos() as u64, 0),
        )
    }
    .unwrap();
}

fn sms_of(stamps: &[BlockStamp]) -> BTreeSet<u32> {
    stamps.iter().map(|stamp| stamp.sm).collect()
}

#[test]
fn a_saturated_partition_leaves_another_partitions_kernel_running_at_once() {
    let device = gpu_or_skip!();
    STAMPED_SPIN.attributes(device).unwrap();
    let partitions = device.split_sms(16, 2).unwrap();
    let (a, b) = (partitions[0].stream(None).unwrap(), partitions[1].stream(None).unwrap());
    assert!(partitions.iter().all(|partition| partition.sm_count() >= 16), "{partitions:?}");
    // 16 waves of 2 ms on partition A's SMs (two 1024-thread blocks per SM).
    let backlog_blocks = partitions[0].sm_count() * 2 * 16;
    let mut backlog = DeviceBuffer::<BlockStamp, _>::zeroed(&a, backlog_blocks as usize).unwrap();
    let mut single = DeviceBuffer::<BlockStamp, _>::zeroed(&b, 1).unwrap();
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    stamped(&a, &mut backlog, backlog_blocks, 1024, Duration::from_millis(2));
    std::thread::sleep(Duration::from_millis(2));
    stamped(&b, &mut single, 1, 32, Duration::ZERO);
    let latency = poll_until(Duration::from_secs(10), || b.query().unwrap()).expect("B's kernel ran");
    // Two kernels running at once: compute-sanitizer never allows it (the SMs are still checked).
    let overlap_visible = cuda_stream_tests::concurrency_visible();
    if overlap_visible {
        assert_eq!(a.query(), Ok(false), "A's backlog still runs after B's kernel is done ({latency:?})");
    }
    let (backlog, single) = (backlog.to_vec().unwrap(), single.to_vec().unwrap());
    let (a_sms, b_sms) = (sms_of(&backlog), sms_of(&single));
    assert!(a_sms.len() <= partitions[0].sm_count() as usize, "A ran on {} SMs", a_sms.len());
    assert!(a_sms.is_disjoint(&b_sms), "B's kernel ran on SM {b_sms:?}, one of A's {a_sms:?}");
    let backlog_end = backlog.iter().map(|stamp| stamp.end_ns).max().unwrap();
    assert!(!overlap_visible || single[0].end_ns < backlog_end, "B's kernel ended before A's backlog");
    println!("partition B's kernel: {latency:?} after launch, beside A's 32 ms backlog on {} SMs", a_sms.len());

    // The control: without partitions, the same kernel at the same priority waits for the
    // backlog that fills every SM.
    if !overlap_visible {
        return;
    }
    let (c, d) = (non_blocking(device), non_blocking(device));
    let sms = cuda_stream_tests::sm_count(device).unwrap();
    let mut backlog = DeviceBuffer::<BlockStamp, _>::zeroed(&c, (sms * 2 * 16) as usize).unwrap();
    let mut single = DeviceBuffer::<BlockStamp, _>::zeroed(&d, 1).unwrap();
    c.synchronize().unwrap();
    d.synchronize().unwrap();
    stamped(&c, &mut backlog, sms * 2 * 16, 1024, Duration::from_millis(2));
    std::thread::sleep(Duration::from_millis(2));
    stamped(&d, &mut single, 1, 32, Duration::ZERO);
    let waited = poll_until(Duration::from_secs(10), || d.query().unwrap()).expect("the kernel ran");
    c.synchronize().unwrap();
    assert!(latency * 3 < waited, "with partitions {latency:?}, without {waited:?}");
}

fn non_blocking(device: Device) -> Stream {
    Stream::new(device, StreamOptions::non_blocking()).unwrap()
}

#[test]
fn every_stream_operation_works_on_a_partitions_stream() {
    let device = gpu_or_skip!();
    let partition = device.split_sms(8, 1).unwrap().remove(0);
    let range = device.priority_range().unwrap();
    let stream = partition.stream(Some(range.most_urgent())).unwrap();
    assert_eq!(stream.priority().unwrap(), range.most_urgent());
    assert_eq!(stream.is_non_blocking(), Ok(true));
    assert_eq!(stream.device(), device);
    stream.id().unwrap();
    let other = non_blocking(device);
    // Memory, a typed launch, copies.
    let x = DeviceBuffer::from_slice(&stream, &[1.0f32; 1000]).unwrap();
    let mut y = DeviceBuffer::from_slice(&stream, &[2.0f32; 1000]).unwrap();
    // SAFETY: 1000 floats each, home `stream`.
    unsafe { SAXPY.launch(&stream, &LaunchConfig::new(4, 256), (2.0, x.as_ptr(), y.as_mut_ptr(), 1000)).unwrap() };
    // Events both ways, wait_stream, a host function, a completion.
    let event = Event::new(device, EventFlags::default()).unwrap();
    stream.record(&event).unwrap();
    other.wait_event(&event).unwrap();
    other.wait_stream(&stream).unwrap();
    stream.wait_stream(&other).unwrap();
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = ran.clone();
    stream.launch_host_fn(move || flag.store(true, std::sync::atomic::Ordering::SeqCst)).unwrap();
    cuda_stream_tests::block_on(stream.completion()).unwrap();
    assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(y.to_vec().unwrap(), vec![4.0; 1000]);
    // A capture, replayed on another stream.
    let capture = stream.begin_capture(capture::ThreadLocal).unwrap();
    // SAFETY: as above.
    unsafe { SAXPY.launch(&stream, &LaunchConfig::new(4, 256), (1.0, x.as_ptr(), y.as_mut_ptr(), 1000)).unwrap() };
    let graph = capture.end().unwrap();
    graph.instantiate().unwrap().launch(&stream).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![5.0; 1000]);
    event.synchronize().unwrap();
    drop((x, y));
    stream.destroy().unwrap();
}

#[test]
fn splits_the_device_cannot_make_are_refused() {
    let device = gpu_or_skip!();
    let sms = cuda_stream_tests::sm_count(device).unwrap();
    match device.split_sms(sms / 2 + 8, 2) {
        Err(Error::SmSplit { possible, sm_count, count: 2, .. }) => assert!(possible < 2 && sm_count == sms),
        other => panic!("two partitions of more than half the SMs: {other:?}"),
    }
    assert!(matches!(device.split_sms(0, 1), Err(Error::SmSplit { .. })));
    assert!(matches!(device.split_sms(8, 0), Err(Error::SmSplit { .. })));
    let message = device.split_sms(sms + 1, 1).unwrap_err().to_string();
    assert!(message.contains(&format!("{sms} SMs")), "{message}");
    // The largest split there is works: as many as the device reports it can make (CUDA's
    // alignment can leave fewer than SMs / 8; 15 of 132 SMs on the H100).
    let most = match device.split_sms(8, sms / 8) {
        Ok(most) => most,
        Err(Error::SmSplit { possible, .. }) if possible > 0 => device.split_sms(8, possible).unwrap(),
        Err(other) => panic!("the largest split: {other:?}"),
    };
    assert!(!most.is_empty() && most.iter().all(|partition| partition.sm_count() >= 8), "{most:?}");
}

#[test]
fn a_partition_lives_as_long_as_its_streams() {
    let device = gpu_or_skip!();
    let live_before = cuda_stream::live_streams();
    let stream = {
        let partition = device.split_sms(8, 1).unwrap().remove(0);
        partition.stream(None).unwrap()
        // The partition handle is gone; the stream holds the green context.
    };
    let mut stamps = DeviceBuffer::<BlockStamp, _>::zeroed(&stream, 64).unwrap();
    stamped(&stream, &mut stamps, 64, 128, Duration::from_micros(100));
    let sms = sms_of(&stamps.to_vec().unwrap());
    assert!(sms.len() <= 8, "the kernel ran on {} SMs, more than its partition's 8", sms.len());
    drop(stamps);
    drop(stream);
    assert_eq!(cuda_stream::live_streams(), live_before);
    // Many partitions made and dropped: each green context goes with its last stream.
    for _ in 0..50 {
        let partitions = device.split_sms(16, 2).unwrap();
        let streams: Vec<_> = partitions.iter().map(|partition| partition.stream(None).unwrap()).collect();
        drop(partitions);
        for stream in &streams {
            cuda_stream_tests::empty(stream).unwrap();
        }
        streams.iter().for_each(|stream| stream.synchronize().unwrap());
    }
}
