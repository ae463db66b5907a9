//! Stream attributes on a GPU: the synchronization policy decides whether a waiting host thread
//! spins or sleeps (measured with the thread's own CPU clock), the L2 access-policy window
//! reads back as set and refuses what CUDA's documentation rules out before CUDA sees it, and a
//! capturing stream refuses both attributes without losing its capture.

use cuda_stream::{
    AccessPolicyWindow, AccessProperty, CaptureStatus, Device, Error, Stream, SyncPolicy, capture, check, sys,
};
use cuda_stream_tests::{gpu_or_skip, non_blocking_stream};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// The calling thread's CPU time, user and system (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid out-pointer; the clock is the calling thread's.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The fraction of its wall time this thread spends on a CPU while `synchronize` waits for a
/// 300 ms kernel enqueued under `policy`.
fn busy_fraction_of_a_wait(stream: &Stream, policy: SyncPolicy) -> f64 {
    stream.set_sync_policy(policy).unwrap();
    assert_eq!(stream.sync_policy(), Ok(policy), "the policy reads back as set");
    cuda_stream_tests::spin(stream, Duration::from_millis(300)).unwrap();
    let (cpu, wall) = (thread_cpu_time(), Instant::now());
    stream.synchronize().unwrap();
    let (cpu, wall) = (thread_cpu_time() - cpu, wall.elapsed());
    let fraction = cpu.as_secs_f64() / wall.as_secs_f64();
    println!("{policy:?}: synchronize waited {wall:?} of wall time, {cpu:?} of this thread's CPU time ({fraction:.2})");
    assert!(wall >= Duration::from_millis(200), "{policy:?}: the wait was for the 300 ms kernel ({wall:?})");
    fraction
}

// CUDA's `cudaSynchronizationPolicy`, set per stream ("valid for streams"): Spin busy-waits, so
// the waiting thread is on a CPU nearly all the time; BlockingSync blocks the thread on a
// synchronization primitive, so it hardly runs. The bounds leave wide margins either way.
#[test]
fn the_sync_policy_decides_whether_synchronize_spins_or_sleeps() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    println!("a new stream's sync policy reads back as {:?}", stream.sync_policy());
    cuda_stream_tests::empty(&stream).unwrap();
    stream.synchronize().unwrap();
    let spin = busy_fraction_of_a_wait(&stream, SyncPolicy::Spin);
    let blocking = busy_fraction_of_a_wait(&stream, SyncPolicy::BlockingSync);
    assert!(spin > 0.5, "a spinning wait runs on the CPU most of the time: {spin:.2}");
    assert!(blocking < 0.2, "a blocking wait sleeps: {blocking:.2}");
}

/// Device memory from `cudaMalloc`, freed on drop.
struct DeviceAllocation(*mut c_void);

impl DeviceAllocation {
    fn new(bytes: usize) -> DeviceAllocation {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer.
        check(unsafe { sys::cudaMalloc(&mut ptr, bytes) }, "cudaMalloc").unwrap();
        DeviceAllocation(ptr)
    }
}

impl Drop for DeviceAllocation {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`, freed once; no kernel uses it.
        let _ = unsafe { sys::cudaFree(self.0) };
    }
}

const TWO_MIB: usize = 2 << 20;

#[test]
fn the_access_policy_window_reads_back_as_set_and_bad_windows_never_reach_cuda() {
    let device = gpu_or_skip!();
    let max = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMaxAccessPolicyWindowSize).unwrap() as usize;
    println!("device 0: cudaDevAttrMaxAccessPolicyWindowSize = {max} bytes");
    assert!(max >= TWO_MIB, "GPUs of compute capability 8.0 and later have L2 access-policy windows of 2 MiB and more");
    let stream = non_blocking_stream(device);
    println!("a new stream's window reads back as {:?}", stream.access_policy_window());
    // CUDA "may align" the base and "restrict the alignment" of the size: a 2 MiB window at
    // a 2 MiB boundary inside an 8 MiB allocation is left as it is by any alignment up to
    // 2 MiB. A hit ratio of 0.5 is exact in any binary fraction. The properties are ones
    // every window may use, so no L2 set-aside is needed.
    let buffer = DeviceAllocation::new(4 * TWO_MIB);
    let base = (buffer.0 as usize).next_multiple_of(TWO_MIB) as *mut c_void;
    let window = AccessPolicyWindow {
        base_ptr: base,
        num_bytes: TWO_MIB,
        hit_ratio: 0.5,
        hit_prop: AccessProperty::Streaming,
        miss_prop: AccessProperty::Normal,
    };
    stream.set_access_policy_window(window).unwrap();
    let read = stream.access_policy_window().unwrap();
    println!("set {window:?}\nread {read:?}");
    assert_eq!(read.base_ptr, window.base_ptr);
    assert_eq!(read.num_bytes, window.num_bytes);
    assert_eq!(read.hit_ratio, window.hit_ratio);
    assert_eq!(read.hit_prop, window.hit_prop);
    assert_eq!(read.miss_prop, window.miss_prop);

    let oversize = AccessPolicyWindow { num_bytes: max + 1, ..window };
    let refused = stream.set_access_policy_window(oversize);
    assert_eq!(refused, Err(Error::AccessPolicyWindowTooLarge { num_bytes: max + 1, max, device: 0 }));
    let bad_ratio = AccessPolicyWindow { hit_ratio: 1.5, ..window };
    assert!(matches!(stream.set_access_policy_window(bad_ratio), Err(Error::InvalidAccessPolicyWindow(_))));
    let persisting_miss = AccessPolicyWindow { miss_prop: AccessProperty::Persisting, ..window };
    assert!(matches!(stream.set_access_policy_window(persisting_miss), Err(Error::InvalidAccessPolicyWindow(_))));
    assert_eq!(stream.access_policy_window(), Ok(read), "a refused window leaves the stream's window as it was");
    stream.synchronize().unwrap();
}

// Our own rule (CUDA documents neither call on a capturing stream): refused through
// `cudaStreamIsCapturing`, which leaves the capture intact, as the capture then ends in a graph.
#[test]
fn a_capturing_stream_refuses_attributes_and_keeps_its_capture() {
    let device: Device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    stream.set_sync_policy(SyncPolicy::BlockingSync).unwrap();
    let empty_window = AccessPolicyWindow {
        base_ptr: std::ptr::null_mut(),
        num_bytes: 0,
        hit_ratio: 0.0,
        hit_prop: AccessProperty::Normal,
        miss_prop: AccessProperty::Normal,
    };
    let capture = stream.begin_capture(capture::Global).unwrap();
    let refused = |result: Result<(), Error>| matches!(result, Err(Error::CaptureMisuse(_)));
    assert!(refused(stream.set_sync_policy(SyncPolicy::Spin)));
    assert!(refused(stream.sync_policy().map(drop)));
    assert!(refused(stream.set_access_policy_window(empty_window)));
    assert!(refused(stream.access_policy_window().map(drop)));
    assert_eq!(stream.capture_status(), Ok(CaptureStatus::Active));
    cuda_stream_tests::empty(&stream).unwrap();
    let graph = capture.end();
    assert!(graph.is_ok(), "the capture survived: {graph:?}");
    assert_eq!(stream.sync_policy(), Ok(SyncPolicy::BlockingSync), "the refused set changed nothing");
}
