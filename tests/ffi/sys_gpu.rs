//! cuda-stream-sys on a GPU, through the raw bindings only (plus the kernels' launchers).

use cuda_stream::sys;
use cuda_stream_tests::{ForeignStream, LONG_SPIN, TagLog, gpu_or_skip, poll_until};
use std::time::{Duration, Instant};

fn ok(code: sys::cudaError_t, what: &str) {
    assert_eq!(code, sys::cudaError::cudaSuccess, "{what} failed: {}", cuda_stream::CudaCode(code.0 as i32));
}

fn create(flags: u32, priority: i32) -> sys::cudaStream_t {
    let mut stream = std::ptr::null_mut();
    // SAFETY: `stream` is a valid out-pointer.
    ok(unsafe { sys::cudaStreamCreateWithPriority(&mut stream, flags, priority) }, "cudaStreamCreateWithPriority");
    stream
}

fn destroy(stream: sys::cudaStream_t) {
    // SAFETY: created by `create`, destroyed once.
    ok(unsafe { sys::cudaStreamDestroy(stream) }, "cudaStreamDestroy");
}

fn synchronize(stream: sys::cudaStream_t) {
    // SAFETY: a live stream or special handle.
    ok(unsafe { sys::cudaStreamSynchronize(stream) }, "cudaStreamSynchronize");
}

#[test]
fn non_blocking_stream_at_the_highest_priority() {
    let _device = gpu_or_skip!();
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: valid out-pointers.
    ok(unsafe { sys::cudaDeviceGetStreamPriorityRange(&mut least, &mut greatest) }, "range");
    assert!(greatest < least, "this GPU has stream priorities: {least}..{greatest}");
    let stream = create(sys::cudaStreamNonBlocking, greatest);
    let (mut priority, mut flags) = (0, 0);
    // SAFETY: live stream, valid out-pointers.
    ok(unsafe { sys::cudaStreamGetPriority(stream, &mut priority) }, "cudaStreamGetPriority");
    // SAFETY: as above.
    ok(unsafe { sys::cudaStreamGetFlags(stream, &mut flags) }, "cudaStreamGetFlags");
    assert_eq!(priority, greatest);
    assert_eq!(flags & sys::cudaStreamNonBlocking, sys::cudaStreamNonBlocking);
    destroy(stream);
    // CUDA clamps an out-of-range request in silence: the reason the safe crate refuses it.
    let clamped = create(sys::cudaStreamNonBlocking, greatest - 10);
    // SAFETY: live stream, valid out-pointer.
    ok(unsafe { sys::cudaStreamGetPriority(clamped, &mut priority) }, "cudaStreamGetPriority");
    assert_eq!(priority, greatest);
    destroy(clamped);
}

#[test]
fn query_is_not_ready_until_the_spin_kernel_ends() {
    let _device = gpu_or_skip!();
    let stream = create(sys::cudaStreamNonBlocking, 0);
    let start = Instant::now();
    cuda_stream_tests::spin(&stream, LONG_SPIN).unwrap();
    // SAFETY: live stream.
    assert_eq!(unsafe { sys::cudaStreamQuery(stream) }, sys::cudaError::cudaErrorNotReady);
    // SAFETY: as above.
    let became_ready =
        poll_until(Duration::from_secs(10), || unsafe { sys::cudaStreamQuery(stream) } == sys::cudaError::cudaSuccess);
    let waited = start.elapsed();
    assert!(became_ready.is_some(), "the stream never became ready");
    assert!(
        waited >= LONG_SPIN - Duration::from_millis(5),
        "ready after {waited:?}, before the {LONG_SPIN:?} kernel ended"
    );
    destroy(stream);
}

#[test]
fn tag_log_shows_launch_order_on_one_stream() {
    let _device = gpu_or_skip!();
    let stream = create(sys::cudaStreamNonBlocking, 0);
    let log = TagLog::new(64).unwrap();
    // Earlier kernels spin longer: only stream order keeps them first.
    for tag in 0..32u32 {
        let spin = Duration::from_micros(u64::from(32 - tag) * 20);
        cuda_stream_tests::tag(&stream, &log, tag, spin).unwrap();
    }
    synchronize(stream);
    assert_eq!(log.tags(), (0..32).collect::<Vec<_>>());
    let entries = log.entries();
    for pair in entries.windows(2) {
        assert!(pair[0].end_ns <= pair[1].start_ns, "kernels overlapped on one stream: {pair:?}");
    }
    destroy(stream);
}

#[test]
fn kernels_run_on_the_legacy_and_per_thread_handles() {
    let _device = gpu_or_skip!();
    let log = TagLog::new(8).unwrap();
    cuda_stream_tests::tag(&sys::cudaStreamLegacy, &log, 1, Duration::ZERO).unwrap();
    synchronize(sys::cudaStreamLegacy);
    cuda_stream_tests::tag(&sys::cudaStreamPerThread, &log, 2, Duration::ZERO).unwrap();
    synchronize(sys::cudaStreamPerThread);
    cuda_stream_tests::tag(&std::ptr::null_mut(), &log, 3, Duration::ZERO).unwrap();
    synchronize(std::ptr::null_mut());
    assert_eq!(log.tags(), vec![1, 2, 3]);
    let mut legacy_id = 0;
    let mut per_thread_id = 0;
    // SAFETY: special handles, valid out-pointers.
    ok(unsafe { sys::cudaStreamGetId(sys::cudaStreamLegacy, &mut legacy_id) }, "cudaStreamGetId");
    // SAFETY: as above.
    ok(unsafe { sys::cudaStreamGetId(sys::cudaStreamPerThread, &mut per_thread_id) }, "cudaStreamGetId");
    assert_ne!(legacy_id, per_thread_id, "0x1 and 0x2 are different streams");
}

#[test]
fn handle_zero_means_what_the_build_mode_says() {
    let _device = gpu_or_skip!();
    let (mut null_id, mut legacy_id, mut per_thread_id) = (0, 0, 0);
    // SAFETY: special handles, valid out-pointers.
    unsafe {
        ok(sys::cudaStreamGetId(std::ptr::null_mut(), &mut null_id), "cudaStreamGetId");
        ok(sys::cudaStreamGetId(sys::cudaStreamLegacy, &mut legacy_id), "cudaStreamGetId");
        ok(sys::cudaStreamGetId(sys::cudaStreamPerThread, &mut per_thread_id), "cudaStreamGetId");
    }
    let expected = if sys::PER_THREAD_DEFAULT_STREAM { per_thread_id } else { legacy_id };
    assert_eq!(null_id, expected, "per-thread build: {}", sys::PER_THREAD_DEFAULT_STREAM);
    // Proven with a kernel: a spin on handle 0 of another thread holds up this thread's
    // handle 0 only when handle 0 is the (shared) legacy stream.
    std::thread::scope(|scope| {
        scope.spawn(|| cuda_stream_tests::spin(&std::ptr::null_mut(), LONG_SPIN).unwrap()).join().unwrap();
    });
    // SAFETY: special handle.
    let busy = unsafe { sys::cudaStreamQuery(std::ptr::null_mut()) } == sys::cudaError::cudaErrorNotReady;
    assert_eq!(busy, !sys::PER_THREAD_DEFAULT_STREAM);
    // SAFETY: plain call.
    ok(unsafe { sys::cudaDeviceSynchronize() }, "cudaDeviceSynchronize");
}

#[test]
fn a_stream_created_in_c_is_used_from_rust_and_destroyed_in_c() {
    let _device = gpu_or_skip!();
    let foreign = ForeignStream::create().unwrap();
    let log = TagLog::new(8).unwrap();
    ForeignStream::c_tag(&foreign.raw(), &log, 10).unwrap();
    cuda_stream_tests::tag(&foreign.raw(), &log, 11, Duration::ZERO).unwrap();
    ForeignStream::c_tag(&foreign.raw(), &log, 12).unwrap();
    synchronize(foreign.raw());
    assert_eq!(log.tags(), vec![10, 11, 12]);
    foreign.destroy().unwrap();
}
