//! CuPy's CUDA graph tests (`tests/cupy_tests/cuda_tests/test_graph.py`, class `TestGraph`),
//! ported onto this crate's API: the cases about memory work and capture structure.
//!
//! CuPy captures array expressions between `stream.begin_capture()` and `end_capture()`; here a
//! [`Capture`](cuda_stream::Capture) captures the same shapes of work through its own calls:
//!
//! * the input array (`cupy.random.random((100,))`) becomes page-locked host memory copied in by
//!   the graph (`Capture::copy_from_pinned`), which the host rewrites between launches, so each
//!   replay is seen to read new input;
//! * CuPy's element-wise kernels (`a * 3`, `3 * x + 1`, `a + 4`, ...) become the test kernel
//!   `cs_saxpy` (`y = a * x + y`) through `Capture::use_on`, with device-to-device copies
//!   (`Capture::copy`) and fills (`Capture::fill_bytes`) preparing `y`;
//! * arrays CuPy allocates from its pool during the capture become graph memory
//!   (`Capture::alloc` / `Capture::free`, or `Capture::keep` and `GraphOutput::take` for a
//!   result read after the launch);
//! * the result is copied out by the graph (`Capture::copy_to_pinned`) and compared with the
//!   host's own computation, as CuPy compares with `func(a)` run outside the capture;
//! * each `upload` parametrization is one test per value (`GraphExec::upload` before the
//!   launch, or not);
//! * `with s2:` after `e1.record(s1); s2.wait_event(e1)` is a fork (`s2.wait_stream(&s1)`), and
//!   the join back the same the other way.
//!
//! Differences in behaviour, ported as this crate's behaviour:
//! * CuPy's `s.synchronize()` and `s.done` during a capture reach CUDA, which refuses them and
//!   invalidates the capture (`cudaErrorStreamCaptureUnsupported`, then
//!   `cudaErrorStreamCaptureInvalidated` at the end). This crate refuses them itself, before
//!   CUDA sees them (`Error::CaptureMisuse`): the capture stays valid, ends, and its graph
//!   replays (`test_stream_capture_failure1`, `4`, `6`).
//! * CuPy's `cuda.Stream.null.is_capturing()` during a capture: this crate refuses every use of
//!   the legacy stream while a capture of its device is in progress (`Error::CaptureMisuse`),
//!   whatever the capturing stream's kind, where CUDA answers for a non-blocking capture and
//!   fails (`cudaErrorStreamCaptureImplicit`) for a blocking one
//!   (`test_stream_is_capturing`, `test_null_stream_cannot_capture`).
//!
//! Cases of the peer file not ported (no counterpart here):
//! * `_helper2` (`cupy.sin`, `cupy.sqrt`) and `_helper3` (`cupy.fft`) of
//!   `test_capture_run_on_same_stream` / `..._different_streams`: no math or cuFFT kernels in
//!   the test kernels; the element-wise `_helper1` is ported (as `cs_saxpy` chains).
//! * `_helper4` and `test_stream_capture_failure5`, and the `cupy.where` half of
//!   `test_stream_capture_failure3`: CuPy's library code synchronizes on the host (a Python
//!   `if` on a device value) and raises its own `RuntimeError`. The nearest thing here, a
//!   buffer's own copy from a host slice during the capture (it would wait for the copy), is
//!   refused with `Error::CaptureMisuse` and leaves the capture usable, while its copy from
//!   another buffer is captured: ported inside
//!   `a_buffers_own_copy_is_captured_and_a_refused_host_copy_leaves_the_capture_usable`.
//! * `test_stream_capture_failure2`'s ends on the wrong stream (`s2.end_capture()` before and
//!   after the fork: `cudaErrorIllegalState`, `cudaErrorStreamCaptureUnmatched`): a capture
//!   is ended only through its own `Capture` guard (`Capture::end` consumes it), so an end on
//!   another stream does not compile. Ported instead: beginning a capture on the forked stream,
//!   which is part of the capture already, is refused, and the capture still replays.
//! * `test_stream_capture_failure_cublas`, `_cusolver`, `_curand`, `_cusparse`: CuPy's refusal
//!   of library handles (`NotImplementedError`); this crate wraps no such library.
//! * `test_debug_dot_str`: the crate has no `cudaGraphDebugDotPrint` wrapper.

use cuda_stream::capture::{Global, Relaxed, ThreadLocal};
use cuda_stream::{
    BuiltinStream, CaptureMode, CaptureStatus, DeviceBuffer, Error, GraphExec, LaunchConfig, PinnedBuffer,
    SharedPinned, Stream, StreamOptions, StreamRef,
};
use cuda_stream_tests::{gpu_or_skip, non_blocking_stream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Elements of the arrays (CuPy's 100, rounded up to more than one block).
const N: usize = 1000;

type Shared<T> = Arc<DeviceBuffer<T, Arc<Stream>>>;
type Host = Arc<SharedPinned<f32>>;

cuda_stream::kernel! {
    /// `y = a * x + y` over `n` elements.
    static SAXPY = fn cs_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
}

/// One test at a time: the legacy stream's refusal during a capture is process-wide (any test's
/// capture), and the graph allocator's blocks are the device's.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `y = a * x + y` over `N` `f32`s.
///
/// # Safety
/// `x` and `y` are device addresses of `N` `f32`s on the stream's device, valid until the kernel
/// has run (for a captured launch: at every launch of the graph).
unsafe fn saxpy(stream: &StreamRef, a: f32, x: *const f32, y: *mut f32) -> cuda_stream::Result<()> {
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256);
    // SAFETY: the caller's contract; `cs_saxpy` reads `x` and writes `y`, N elements each.
    unsafe { SAXPY.launch(stream, &config, (a, x, y, N as u32)) }
}

fn shared(home: &Arc<Stream>, values: &[f32]) -> Shared<f32> {
    Arc::new(DeviceBuffer::from_slice(Arc::clone(home), values).unwrap())
}

fn zeroed(home: &Arc<Stream>) -> Shared<f32> {
    Arc::new(DeviceBuffer::zeroed(Arc::clone(home), N).unwrap())
}

fn host(values: &[f32]) -> Host {
    Arc::new(SharedPinned::new(PinnedBuffer::from_slice(values).unwrap()))
}

/// Input `seed`: distinct small integers (exact in `f32` through the kernels below).
fn input(seed: f32) -> Vec<f32> {
    (0..N).map(|i| seed + (i % 97) as f32).collect()
}

fn set_host(buffer: &Host, values: &[f32]) {
    // Waits for the copies of earlier launches out of it.
    buffer.lock().as_mut_slice().unwrap().copy_from_slice(values);
}

fn read_host(buffer: &Host) -> Vec<f32> {
    // Waits for the copies of earlier launches into it.
    buffer.lock().as_slice().unwrap().to_vec()
}

/// One launch of `cs_saxpy` outside any capture (adds 0 to a scratch buffer): its module's load
/// and signature check happen before the captures.
fn warm_up(home: &Arc<Stream>) {
    let scratch = zeroed(home);
    // SAFETY: N f32s on the home stream's device, alive until the synchronize below.
    unsafe { saxpy(home, 0.0, scratch.as_ptr(), scratch.as_ptr().cast_mut()) }.unwrap();
    home.synchronize().unwrap();
}

/// `_helper1` in `cs_saxpy` terms, computed on the host: `((a + 3) * 7.5) * 2 + a`: adds the
/// constant through a buffer of threes, scales, then adds `a` again. Exact in `f32` for inputs
/// below 200.
fn helper1(a: f32) -> f32 {
    ((a + 3.0) * 7.5) * 2.0 + a
}

/// Captures `_helper1` on `stream`: the input copied in from `host_in`, an intermediate in graph
/// memory (allocated and freed by the graph), kernels on it, and the result copied into `out`.
///
/// `t = threes (d2d copy); t = 1*a + t; u = 0 (memset); u = 7.5*t + u; r = a (d2d); r = 2*u + r`
fn capture_helper1<M: CaptureMode>(
    stream: &Stream,
    host_in: &Host,
    threes: &Shared<f32>,
    out: &cuda_stream::CaptureBuffer<f32>,
    capture: &mut cuda_stream::Capture<'_, M>,
) {
    let mut a = capture.alloc::<f32>(stream, N).unwrap();
    capture.copy_from_pinned(stream, (&a, ..), (host_in, ..)).unwrap();
    let mut t = capture.alloc::<f32>(stream, N).unwrap();
    capture.copy(stream, (&t, ..), (threes, ..)).unwrap();
    // Each `use_on` below: graph allocations of this capture, N f32s each, alive until
    // their free, which the graph orders after these kernels.
    // SAFETY: N f32s each, alive at every launch (see above).
    capture.use_on(stream, (&a, &t), |s, (a, t)| unsafe { saxpy(s, 1.0, a.cast_const(), t) }).unwrap().unwrap();
    let mut u = capture.alloc::<f32>(stream, N).unwrap();
    capture.fill_bytes(stream, &u, .., 0).unwrap();
    // SAFETY: N f32s each, alive at every launch (see above).
    capture.use_on(stream, (&t, &u), |s, (t, u)| unsafe { saxpy(s, 7.5, t.cast_const(), u) }).unwrap().unwrap();
    capture.copy(stream, (out, ..), (&a, ..)).unwrap();
    // SAFETY: N f32s each, alive at every launch (see above).
    capture.use_on(stream, (&u, out), |s, (u, r)| unsafe { saxpy(s, 2.0, u.cast_const(), r) }).unwrap().unwrap();
    for buffer in [&mut a, &mut t, &mut u] {
        capture.free(stream, buffer).unwrap();
    }
}

/// `test_capture_run_on_same_stream[upload]` (`_helper1`): captured and replayed on the same
/// stream, the result copied to the host by the graph. Relaunched with new host input.
fn capture_run_on_same_stream(upload: bool) {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let s = non_blocking_stream(device);
    let threes = shared(&home, &[3.0; N]);
    let host_in = host(&input(0.0));
    let host_out = host(&[0.0; N]);
    let mut capture = s.begin_capture(ThreadLocal).unwrap();
    let mut out = capture.alloc::<f32>(&s, N).unwrap();
    capture_helper1(&s, &host_in, &threes, &out, &mut capture);
    capture.copy_to_pinned(&s, (&host_out, ..), (&out, ..)).unwrap();
    capture.free(&s, &mut out).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(read_host(&host_out), vec![0.0; N], "nothing ran at the capture");
    if upload {
        exec.upload(&s).unwrap();
    }
    for seed in [0.0f32, 50.0, 100.0] {
        set_host(&host_in, &input(seed));
        exec.launch(&s).unwrap();
        let expected: Vec<f32> = input(seed).into_iter().map(helper1).collect();
        assert_eq!(read_host(&host_out), expected, "the launch with input {seed}");
    }
}

#[test]
fn capture_run_on_same_stream_upload() {
    capture_run_on_same_stream(true);
}

#[test]
fn capture_run_on_same_stream_no_upload() {
    capture_run_on_same_stream(false);
}

/// `test_capture_run_on_different_streams[upload]` (`_helper1`): captured on `s1`, uploaded
/// and launched on `s2`. The result is the graph's own allocation, kept after the launch (CuPy's
/// `out1`, allocated during the capture), taken and read after each launch.
fn capture_run_on_different_streams(upload: bool) {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let (s1, s2) = (non_blocking_stream(device), non_blocking_stream(device));
    let threes = shared(&home, &[3.0; N]);
    let host_in = host(&input(0.0));
    let mut capture = s1.begin_capture(Global).unwrap();
    let out = capture.alloc::<f32>(&s1, N).unwrap();
    capture_helper1(&s1, &host_in, &threes, &out, &mut capture);
    let output = capture.keep(out).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    if upload {
        exec.upload(&s2).unwrap();
    }
    for seed in [0.0f32, 7.0] {
        set_host(&host_in, &input(seed));
        exec.launch(&s2).unwrap();
        let taken = output.take(&*home).unwrap();
        let expected: Vec<f32> = input(seed).into_iter().map(helper1).collect();
        assert_eq!(taken.to_vec().unwrap(), expected, "the launch on s2 with input {seed}");
        // The graph's allocation is freed (its drop), so the executable launches again.
    }
}

#[test]
fn capture_run_on_different_streams_upload() {
    capture_run_on_different_streams(true);
}

#[test]
fn capture_run_on_different_streams_no_upload() {
    capture_run_on_different_streams(false);
}

/// `b = a * 3` captured: `b = 0; b = 3 * a + b`, `a` a shared buffer the host refills.
fn capture_times_three<M: CaptureMode>(
    capture: &mut cuda_stream::Capture<'_, M>,
    s: &Stream,
    a: &Shared<f32>,
    b: &Shared<f32>,
) {
    capture.fill_bytes(s, b, .., 0).unwrap();
    // SAFETY: shared buffers of N f32s, held by the graph.
    capture.use_on(s, (a, b), |s, (a, b)| unsafe { saxpy(s, 3.0, a.cast_const(), b) }).unwrap().unwrap();
}

fn launched_and_checked(exec: &GraphExec, s: &Stream, upload: bool, b: &Shared<f32>, a_input: &[f32]) {
    assert_eq!(b.to_vec().unwrap(), vec![0.0; N], "nothing ran at the capture");
    if upload {
        exec.upload(s).unwrap();
    }
    exec.launch(s).unwrap();
    let expected: Vec<f32> = a_input.iter().map(|a| 3.0 * a).collect();
    assert_eq!(b.to_vec().unwrap(), expected, "the graph's integrity: b = 3 * a");
}

/// `test_stream_is_capturing[upload]`: `s` is capturing during the capture only; the legacy
/// stream (CuPy's `Stream.null`) is refused during it (see the module docs), and answers "not
/// capturing" after it.
fn stream_is_capturing(upload: bool) {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let s = non_blocking_stream(device);
    let legacy = BuiltinStream::legacy(device);
    let a_input = input(1.0);
    let (a, b) = (shared(&home, &a_input), zeroed(&home));
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    let mut capture = s.begin_capture(ThreadLocal).unwrap();
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::Active);
    assert!(matches!(legacy.capture_status(), Err(Error::CaptureMisuse(_))), "the legacy stream during a capture");
    capture_times_three(&mut capture, &s, &a, &b);
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    assert_eq!(legacy.capture_status().unwrap(), CaptureStatus::None);
    launched_and_checked(&exec, &s, upload, &b, &a_input);
}

#[test]
fn stream_is_capturing_upload() {
    stream_is_capturing(true);
}

#[test]
fn stream_is_capturing_no_upload() {
    stream_is_capturing(false);
}

/// `test_null_stream_cannot_capture[upload]`: a blocking stream captured (Global mode, CuPy's
/// default); the legacy stream is refused during the capture, and the graph is intact (`b = a +
/// 4`: `b = fours; b = 1 * a + b`).
fn null_stream_cannot_capture(upload: bool) {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let s = Stream::new(device, StreamOptions::default()).unwrap();
    let legacy = BuiltinStream::legacy(device);
    let a_input = input(2.0);
    let (a, fours, b) = (shared(&home, &a_input), shared(&home, &[4.0; N]), zeroed(&home));
    let mut capture = s.begin_capture(Global).unwrap();
    capture.copy(&s, (&b, ..), (&fours, ..)).unwrap();
    // SAFETY: shared buffers of N f32s, held by the graph.
    capture.use_on(&s, (&a, &b), |s, (a, b)| unsafe { saxpy(s, 1.0, a.cast_const(), b) }).unwrap().unwrap();
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::Active);
    assert!(matches!(legacy.capture_status(), Err(Error::CaptureMisuse(_))), "the legacy stream during a capture");
    assert!(matches!(legacy.synchronize(), Err(Error::CaptureMisuse(_))), "nor is it synchronized");
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    assert_eq!(legacy.capture_status().unwrap(), CaptureStatus::None);
    assert_eq!(b.to_vec().unwrap(), vec![0.0; N], "nothing ran at the capture");
    if upload {
        exec.upload(&s).unwrap();
    }
    exec.launch(&s).unwrap();
    let expected: Vec<f32> = a_input.iter().map(|a| a + 4.0).collect();
    assert_eq!(b.to_vec().unwrap(), expected, "b = a + 4");
}

#[test]
fn null_stream_cannot_capture_upload() {
    null_stream_cannot_capture(true);
}

#[test]
fn null_stream_cannot_capture_no_upload() {
    null_stream_cannot_capture(false);
}

/// `test_capture_launch_host_func[upload]`: a host function captured runs once per launch; here
/// it follows a captured copy, and a launch's copy result is seen too.
fn capture_launch_host_func(upload: bool) {
    let device = gpu_or_skip!();
    let _alone = alone();
    let s = non_blocking_stream(device);
    let count = Arc::new(AtomicU32::new(0));
    let host_in = host(&input(0.0));
    let host_out = host(&[0.0; N]);
    let mut capture = s.begin_capture(ThreadLocal).unwrap();
    let mut on_device = capture.alloc::<f32>(&s, N).unwrap();
    capture.copy_from_pinned(&s, (&on_device, ..), (&host_in, ..)).unwrap();
    let counted = Arc::clone(&count);
    capture.launch_host_fn(&s, move || _ = counted.fetch_add(1, Ordering::SeqCst)).unwrap();
    capture.copy_to_pinned(&s, (&host_out, ..), (&on_device, ..)).unwrap();
    capture.free(&s, &mut on_device).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 0, "nothing ran at the capture");
    if upload {
        exec.upload(&s).unwrap();
    }
    for launch in 1..=2 {
        set_host(&host_in, &input(launch as f32));
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(count.load(Ordering::SeqCst), launch, "the host function ran once per launch");
        assert_eq!(read_host(&host_out), input(launch as f32), "the round trip of launch {launch}");
    }
}

#[test]
fn capture_launch_host_func_upload() {
    capture_launch_host_func(true);
}

#[test]
fn capture_launch_host_func_no_upload() {
    capture_launch_host_func(false);
}

/// `test_stream_fork_join[upload]`: `out1 = a * 100` on `s1`, forked to `s2` for
/// `out2 = 3 * out1 + 1`, joined back to `s1`, which copies `out2` to the host. Both streams
/// leave the capture at its end; relaunched with new input.
fn stream_fork_join<M: CaptureMode>(mode: M, upload: bool) {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let (s1, s2) = (non_blocking_stream(device), non_blocking_stream(device));
    let ones = shared(&home, &[1.0; N]);
    let host_in = host(&input(0.0));
    let host_out = host(&[0.0; N]);
    let mut capture = s1.begin_capture(mode).unwrap();
    let mut a = capture.alloc::<f32>(&s1, N).unwrap();
    capture.copy_from_pinned(&s1, (&a, ..), (&host_in, ..)).unwrap();
    let mut out1 = capture.alloc::<f32>(&s1, N).unwrap();
    capture.fill_bytes(&s1, &out1, .., 0).unwrap();
    // Each `use_on` below: graph allocations and a shared buffer, N f32s each, alive at each
    // launch until the graph's frees, which wait for these kernels.
    // SAFETY: N f32s each, alive at every launch (see above).
    capture.use_on(&s1, (&a, &out1), |s, (a, o)| unsafe { saxpy(s, 100.0, a.cast_const(), o) }).unwrap().unwrap();
    s2.wait_stream(&s1).unwrap();
    assert_eq!(s2.capture_status().unwrap(), CaptureStatus::Active, "the fork joined s2 to the capture");
    let mut out2 = capture.alloc::<f32>(&s2, N).unwrap();
    capture.copy(&s2, (&out2, ..), (&ones, ..)).unwrap();
    // SAFETY: N f32s each, alive at every launch (see above).
    capture.use_on(&s2, (&out1, &out2), |s, (o1, o2)| unsafe { saxpy(s, 3.0, o1.cast_const(), o2) }).unwrap().unwrap();
    s1.wait_stream(&s2).unwrap();
    capture.copy_to_pinned(&s1, (&host_out, ..), (&out2, ..)).unwrap();
    for buffer in [&mut a, &mut out1, &mut out2] {
        capture.free(&s1, buffer).unwrap();
    }
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(s1.capture_status().unwrap(), CaptureStatus::None);
    assert_eq!(s2.capture_status().unwrap(), CaptureStatus::None);
    if upload {
        exec.upload(&s1).unwrap();
    }
    for seed in [0.0f32, 11.0] {
        set_host(&host_in, &input(seed));
        exec.launch(&s1).unwrap();
        let expected: Vec<f32> = input(seed).into_iter().map(|a| 3.0 * (a * 100.0) + 1.0).collect();
        assert_eq!(read_host(&host_out), expected, "func(a * 100) with input {seed}");
    }
}

#[test]
fn stream_fork_join_upload() {
    stream_fork_join(Global, true);
}

#[test]
fn stream_fork_join_no_upload() {
    stream_fork_join(Global, false);
}

#[test]
fn stream_fork_join_thread_local() {
    stream_fork_join(ThreadLocal, false);
}

#[test]
fn stream_fork_join_relaxed() {
    stream_fork_join(Relaxed, true);
}

/// `test_stream_capture_failure1` / `failure6` (`s.synchronize()`) and `failure4` (`s.done`)
/// during a capture: refused by the crate before CUDA sees them, so the capture is not
/// invalidated: it ends, and the work captured before and after the refusal replays. The
/// stream leaves the capture and synchronizes normally.
#[test]
fn synchronize_and_query_during_a_capture_are_refused_and_the_capture_stays_valid() {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let s = non_blocking_stream(device);
    let a_input = input(3.0);
    let (a, b) = (shared(&home, &a_input), zeroed(&home));
    let mut capture = s.begin_capture(Global).unwrap();
    assert!(matches!(s.synchronize(), Err(Error::CaptureMisuse(_))), "failure1/6: synchronize");
    capture.fill_bytes(&s, &b, .., 0).unwrap();
    assert!(matches!(s.query(), Err(Error::CaptureMisuse(_))), "failure4: query (`s.done`)");
    // SAFETY: shared buffers of N f32s, held by the graph.
    capture.use_on(&s, (&a, &b), |s, (a, b)| unsafe { saxpy(s, 3.0, a.cast_const(), b) }).unwrap().unwrap();
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::Active, "not invalidated");
    let exec = capture.end().expect("the refusals left the capture valid").instantiate().unwrap();
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    s.synchronize().unwrap();
    launched_and_checked(&exec, &s, false, &b, &a_input);
}

/// `test_stream_capture_failure3`, its end half: a stream forked into the capture does work and
/// is never joined back; the end fails with `cudaErrorStreamCaptureUnjoined`, both streams leave
/// the capture, the forked work never ran, and both streams run ordinary work afterwards.
#[test]
fn an_unjoined_fork_fails_the_end_and_both_streams_work_afterwards() {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let (s1, s2) = (non_blocking_stream(device), non_blocking_stream(device));
    let (a, b) = (shared(&home, &input(0.0)), zeroed(&home));
    let mut capture = s1.begin_capture(Global).unwrap();
    s2.wait_stream(&s1).unwrap();
    // SAFETY: shared buffers of N f32s, held by the graph (never launched: the end fails).
    capture.use_on(&s2, (&a, &b), |s, (a, b)| unsafe { saxpy(s, 1.0, a.cast_const(), b) }).unwrap().unwrap();
    let ended = capture.end().map(drop).unwrap_err();
    assert_eq!(ended.cuda_code().map(|code| code.name()), Some("cudaErrorStreamCaptureUnjoined"), "{ended}");
    assert_eq!(s1.capture_status().unwrap(), CaptureStatus::None);
    assert_eq!(s2.capture_status().unwrap(), CaptureStatus::None);
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![0.0; N], "the captured kernel never ran");
    let mut plain = DeviceBuffer::<u32, _>::zeroed(&s2, N).unwrap();
    plain.fill_bytes(&s1, 0x21).unwrap();
    assert_eq!(plain.to_vec().unwrap(), vec![0x2121_2121; N], "both streams work after the failed capture");
}

/// `test_stream_capture_failure2`, adapted (see the module docs): `s2`, forked into `s1`'s
/// capture, cannot begin a capture of its own; the refusal leaves the capture intact, and its
/// graph (work on both streams, joined) replays.
#[test]
fn a_forked_stream_cannot_begin_its_own_capture_and_the_capture_replays() {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    warm_up(&home);
    let (s1, s2) = (non_blocking_stream(device), non_blocking_stream(device));
    let a_input = input(5.0);
    let (a, b) = (shared(&home, &a_input), zeroed(&home));
    let mut capture = s1.begin_capture(Global).unwrap();
    capture.fill_bytes(&s1, &b, .., 0).unwrap();
    s2.wait_stream(&s1).unwrap();
    assert!(matches!(s2.begin_capture(Global).map(drop), Err(Error::CaptureMisuse(_))), "s2 is part of a capture");
    // SAFETY: shared buffers of N f32s, held by the graph.
    capture.use_on(&s2, (&a, &b), |s, (a, b)| unsafe { saxpy(s, 3.0, a.cast_const(), b) }).unwrap().unwrap();
    s1.wait_stream(&s2).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(s2.capture_status().unwrap(), CaptureStatus::None);
    launched_and_checked(&exec, &s1, true, &b, &a_input);
}

/// Host-to-device, device-to-device and device-to-host copies in one capture (the copies CuPy's
/// arrays make: `cupy.asarray`, `a.copy()`, `a.get()`), replayed three times with new host input.
/// A buffer's own ordered copy (`DeviceBuffer::copy_from`) on the capturing stream is captured
/// beside the capture's own copies (CuPy's `cupy.copyto` in a captured stream), while its copy
/// from a host slice is refused (`Error::CaptureMisuse`, the counterpart of CuPy's refused
/// synchronizing calls in `failure5`) and the capture stays usable: every launch makes both.
#[test]
fn a_buffers_own_copy_is_captured_and_a_refused_host_copy_leaves_the_capture_usable() {
    let device = gpu_or_skip!();
    let _alone = alone();
    let home = Arc::new(non_blocking_stream(device));
    let s = non_blocking_stream(device);
    let host_in = host(&input(0.0));
    let host_out = host(&[0.0; N]);
    let device_in = zeroed(&home);
    let device_copy = zeroed(&home);
    let mut plain = DeviceBuffer::<f32, _>::zeroed(&*home, N).unwrap();
    let source = DeviceBuffer::<f32, _>::from_slice(&*home, &[9.0; N]).unwrap();
    let mut capture = s.begin_capture(ThreadLocal).unwrap();
    capture.copy_from_pinned(&s, (&device_in, ..), (&host_in, ..)).unwrap();
    assert!(matches!(plain.copy_from_slice(&s, &[1.0; N]), Err(Error::CaptureMisuse(_))), "a host copy");
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::Active, "the refusal left the capture alone");
    plain.copy_from(&s, &source).unwrap();
    let mut scratch = capture.alloc::<f32>(&s, N).unwrap();
    capture.copy(&s, (&scratch, ..), (&device_in, ..)).unwrap();
    capture.copy(&s, (&device_copy, ..), (&scratch, ..)).unwrap();
    capture.free(&s, &mut scratch).unwrap();
    capture.copy_to_pinned(&s, (&host_out, ..), (&device_copy, ..)).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(plain.to_vec().unwrap(), vec![0.0; N], "nothing captured ran before a launch");
    for seed in [1.0f32, 2.0, 3.0] {
        set_host(&host_in, &input(seed));
        exec.launch(&s).unwrap();
        assert_eq!(read_host(&host_out), input(seed), "the round trip of input {seed}");
    }
    assert_eq!(device_copy.to_vec().unwrap(), input(3.0), "the device-to-device copy");
    assert_eq!(plain.to_vec().unwrap(), vec![9.0; N], "the buffer's own copy, captured, ran at each launch");
    drop(exec);
    plain.fill_bytes(&*home, 0).unwrap();
    plain.copy_from(&*home, &source).unwrap();
    assert_eq!(plain.to_vec().unwrap(), vec![9.0; N], "the same copy outside the capture");
}
