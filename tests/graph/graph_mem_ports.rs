//! NVIDIA cuda.core's tests of its graph memory resource (`GraphMemoryResource`,
//! `cuda_core/tests/graph/test_graph_memory_resource.py`, formerly `tests/test_graph_mem.py`),
//! ported onto this crate's API. cuda.core allocates graph memory from a memory resource on a
//! capturing stream; here a capture allocates it itself:
//!
//! * `gmr.allocate(n, stream=gb)` becomes [`Capture::alloc`](cuda_stream::Capture::alloc), a
//!   [`CaptureBuffer`](cuda_stream::CaptureBuffer) used through the capture's memory calls;
//!   `buffer.close()` inside the capture becomes [`Capture::free`](cuda_stream::Capture::free).
//! * A graph allocation used after the launch (freed outside the graph) becomes
//!   [`Capture::keep`](cuda_stream::Capture::keep), and [`GraphOutput::take`] after each launch:
//!   the taken buffer's drop is `buffer.close(stream)`.
//! * `gmr.attributes` becomes [`Device::graph_memory`](cuda_stream::Device::graph_memory) (a
//!   snapshot, not a live view), `attributes.*_high = 0` becomes
//!   [`Device::reset_graph_memory_peaks`](cuda_stream::Device::reset_graph_memory_peaks), and
//!   `gmr.trim()` becomes [`Device::trim_graph_memory`](cuda_stream::Device::trim_graph_memory).
//! * The capture modes the peer parametrizes (`global`, `thread_local`, `relaxed`) are the
//!   capture mode types: each case runs in each mode (one test per mode, `case::global`, ...).
//! * The peer's NVRTC kernels (`set_zero`, `add_one` on bytes) become the existing test kernel
//!   `cs_saxpy` on `f32` (`y = 1 * ones + y` adds one) and fills (`DeviceBuffer::zeroed`,
//!   memset nodes).
//!
//! Each test observes the GPU: the bytes a launch left, read back through the crate's ordered
//! copies, or the device's graph allocator counters.
//!
//! Cases of the peer file not ported (no counterpart in this crate's API):
//! * The `AttributeError` halves of `test_graph_mem_set_attributes` (writing
//!   `reserved_mem_current` or `used_mem_current`, or a nonzero high watermark): the crate has no
//!   setter for the current values, and [`Device::reset_graph_memory_peaks`] takes no value (it
//!   only resets to zero), so each misuse is a program that does not compile; nothing to run.
//! * `test_graph_memory_resource_attributes_direct_init_raises`: `GraphMemoryStats` is a plain
//!   `Copy` snapshot with public fields, not a handle tied to a device; constructing one is legal
//!   and means nothing to CUDA, so there is nothing to refuse.
//! * The `is_host_accessible` / `is_device_accessible` flags of
//!   `test_graph_memory_resource_accessibility_flags`: there is no memory resource object to ask,
//!   and a `CaptureBuffer` gives the host no access at all (its address reaches only work that
//!   the capture enqueues). Its `device_id` half is ported (`CaptureBuffer::device`) inside
//!   `gmr_check_capture_state`.
//! * `test_graph_mem_alloc_zero` accepts a zero-byte graph allocation (a buffer of size 0); this
//!   crate refuses it (`Error::Size`, "CUDA has no empty allocation"): ported as that refusal,
//!   with the capture shown intact after it.
//! * `test_graph_alloc_with_output` reads the graph's own allocation after each launch of an
//!   `auto_free_on_launch` executable; this crate never hands an auto-free executable's output
//!   out (`GraphOutput::take` refuses it: the next launch would free it under the buffer). Ported
//!   twice: with a plain executable (take, read, drop, relaunch), and with an auto-free one whose
//!   graph copies the output into a shared buffer that the test reads (the take is refused).

use cuda_stream::capture::{Global, Relaxed, ThreadLocal};
use cuda_stream::{
    CaptureMode, DeviceBuffer, Error, Graph, GraphOutput, InstantiateOptions, LaunchConfig, MemPool, PinnedBuffer,
    SharedPinned, Stream, StreamRef,
};
use cuda_stream_tests::{gpu_or_skip, non_blocking_stream};
use std::sync::{Arc, Mutex};

/// Elements of the peer's buffers (it uses 64 bytes; more here, so that a kernel that ran on
/// only part of a buffer shows).
const N: usize = 4096;

/// The peer's `GraphMemoryTestManager.alloc(1, 1024)`: one allocation of 1024 bytes.
const ATTRIBUTE_BYTES: usize = 1024;

type Shared<T> = Arc<DeviceBuffer<T, Arc<Stream>>>;

cuda_stream::kernel! {
    /// `y = a * x + y` over `n` elements.
    static SAXPY = fn cs_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
}

/// One test at a time that uses CUDA's graph allocator, whose counters are the device's.
fn graph_memory_alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn config() -> LaunchConfig<'static> {
    LaunchConfig::new((N as u32).div_ceil(256), 256)
}

/// The peer's `add_one`: `y[i] += ones[i]` (1.0) over `N` elements.
///
/// # Safety
/// `ones` and `y` are device addresses of `N` `f32`s on the stream's device, valid until the
/// kernel has run (for a captured launch: at every launch of the graph).
unsafe fn add_one(stream: &StreamRef, ones: *const f32, y: *mut f32) -> cuda_stream::Result<()> {
    // SAFETY: the caller's contract; `cs_saxpy` reads `ones` and writes `y`, N elements each.
    unsafe { SAXPY.launch(stream, &config(), (1.0f32, ones, y, N as u32)) }
}

fn shared<T: cuda_stream::DeviceCopy>(home: &Arc<Stream>, values: &[T]) -> Shared<T> {
    Arc::new(DeviceBuffer::from_slice(Arc::clone(home), values).unwrap())
}

fn zeroed<T: cuda_stream::DeviceCopy>(home: &Arc<Stream>, len: usize) -> Shared<T> {
    Arc::new(DeviceBuffer::zeroed(Arc::clone(home), len).unwrap())
}

/// The ones `add_one` adds, and one launch of `cs_saxpy` outside any capture that adds zero
/// times them to `target` (the peer's launch of `set_zero` before its capture): the kernel's
/// signature check and its module's load happen outside the capture.
fn ones_and_warm_up(home: &Arc<Stream>, target: &Shared<f32>) -> Shared<f32> {
    let ones = shared(home, &[1.0f32; N]);
    // SAFETY: both hold N f32s on the home stream's device, alive until the synchronize below.
    unsafe { SAXPY.launch(&**home, &config(), (0.0f32, ones.as_ptr(), target.as_ptr().cast_mut(), N as u32)) }.unwrap();
    // The crate does not know of this raw write: nothing it orders runs beside it.
    home.synchronize().unwrap();
    ones
}

// ---------------------------------------------------------------------------------------------
// test_graph_alloc[mode, action]
// ---------------------------------------------------------------------------------------------

/// `test_graph_alloc[no_graph-incr]`: the same work on ordinary stream-ordered memory, with no
/// capture: copy `out` into a fresh buffer, add one three times, copy it back, free it.
#[test]
fn graph_alloc_incr_no_graph() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let mut out = DeviceBuffer::<f32, _>::zeroed(Arc::clone(&home), N).unwrap();
    let ones = shared(&home, &[1.0f32; N]);
    let mut buffer = DeviceBuffer::<f32, _>::new(&*home, N).unwrap();
    buffer.copy_from(&*home, &out).unwrap();
    for _ in 0..3 {
        // SAFETY: `ones` and `buffer` hold N f32s, alive until the read back below, which waits
        // for these kernels on the home stream (the buffer's free too).
        buffer.use_on(&*home, |stream, y| unsafe { add_one(stream, ones.as_ptr(), y) }).unwrap().unwrap();
    }
    out.copy_from(&*home, &buffer).unwrap();
    drop(buffer);
    assert_eq!(out.to_vec().unwrap(), vec![3.0f32; N]);
}

/// `test_graph_alloc[no_graph-fill]`: a fresh buffer filled with bytes 3 and copied out.
#[test]
fn graph_alloc_fill_no_graph() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = non_blocking_stream(device);
    let mut out = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::new(&home, N).unwrap();
    buffer.fill_bytes(&home, 3).unwrap();
    out.copy_from(&home, &buffer).unwrap();
    drop(buffer);
    assert_eq!(out.to_vec().unwrap(), vec![0x0303_0303; N]);
}

/// `test_graph_alloc[mode-incr]`: the graph allocates a buffer, copies `out` into it, adds one
/// three times, copies it back to `out` and frees it: each launch adds 3 (3, then 6), so the
/// graph's buffer is allocated again, and read from `out` again, at the second launch.
fn graph_alloc_incr<M: CaptureMode>(mode: M) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let capturing = non_blocking_stream(device);
    let out = zeroed::<f32>(&home, N);
    let ones = ones_and_warm_up(&home, &out);
    let mut capture = capturing.begin_capture(mode).unwrap();
    let mut buffer = capture.alloc::<f32>(&capturing, N).unwrap();
    capture.copy(&capturing, (&buffer, ..), (&out, ..)).unwrap();
    for _ in 0..3 {
        // SAFETY: `x` is `ones`, which the graph holds; `y` is the graph's buffer, freed after
        // this kernel (the free waits for its use); N f32s each.
        capture
            .use_on(&capturing, (&ones, &buffer), |stream, (x, y)| unsafe { add_one(stream, x.cast_const(), y) })
            .unwrap()
            .unwrap();
    }
    capture.copy(&capturing, (&out, ..), (&buffer, ..)).unwrap();
    capture.free(&capturing, &mut buffer).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&capturing).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![3.0f32; N], "the first launch");
    exec.launch(&capturing).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![6.0f32; N], "the second launch read the first one's result");
}

/// `test_graph_alloc[mode-fill]`: the graph allocates a buffer, fills it with bytes 3, copies
/// it to `out` and frees it.
fn graph_alloc_fill<M: CaptureMode>(mode: M) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let capturing = non_blocking_stream(device);
    let out = zeroed::<u32>(&home, N);
    let mut capture = capturing.begin_capture(mode).unwrap();
    let mut buffer = capture.alloc::<u32>(&capturing, N).unwrap();
    capture.fill_bytes(&capturing, &buffer, .., 3).unwrap();
    capture.copy(&capturing, (&out, ..), (&buffer, ..)).unwrap();
    capture.free(&capturing, &mut buffer).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0; N], "nothing ran before the launch");
    exec.launch(&capturing).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x0303_0303; N]);
}

// ---------------------------------------------------------------------------------------------
// test_graph_alloc_with_output[mode]
// ---------------------------------------------------------------------------------------------

/// The peer's graph of `test_graph_alloc_with_output`: allocates `out`, copies the input into
/// it (from page-locked memory, which the host rewrites between launches: the peer's
/// `set_buffer(in_, 5)`), adds one, and leaves it allocated after the launch. It also copies
/// `out` into `seen`, a shared buffer, so that an auto-free executable's output shows.
fn output_graph<M: CaptureMode>(
    stream: &Stream,
    mode: M,
    host_in: &Arc<SharedPinned<f32>>,
    ones: &Shared<f32>,
    seen: &Shared<f32>,
) -> (Graph, GraphOutput<f32>) {
    let mut capture = stream.begin_capture(mode).unwrap();
    let out = capture.alloc::<f32>(stream, N).unwrap();
    capture.copy_from_pinned(stream, (&out, ..), (host_in, ..)).unwrap();
    // SAFETY: `x` is `ones`, which the graph holds; `y` is the graph's allocation, alive until
    // after the launch; N f32s each.
    capture
        .use_on(stream, (ones, &out), |stream, (x, y)| unsafe { add_one(stream, x.cast_const(), y) })
        .unwrap()
        .unwrap();
    capture.copy(stream, (seen, ..), (&out, ..)).unwrap();
    let output = capture.keep(out).unwrap();
    (capture.end().unwrap(), output)
}

fn set_input(host_in: &Arc<SharedPinned<f32>>, value: f32) {
    // The host's write waits for the last launch's copy out of it.
    host_in.lock().as_mut_slice().unwrap().fill(value);
}

fn graph_alloc_with_output<M: CaptureMode>(mode: M) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let stream = non_blocking_stream(device);
    let seen = zeroed::<f32>(&home, N);
    let ones = ones_and_warm_up(&home, &seen);
    let host_in = Arc::new(SharedPinned::new(PinnedBuffer::from_slice(&[0.0f32; N]).unwrap()));

    // The graph's allocation used outside the graph after each launch: taken, read, and freed
    // (dropped) before the next launch.
    let (graph, output) = output_graph(&stream, mode, &host_in, &ones, &seen);
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    let taken = output.take(&*home).unwrap();
    assert_eq!(taken.to_vec().unwrap(), vec![1.0f32; N], "the output holds input 0 plus one");
    assert!(matches!(exec.launch(&stream), Err(Error::GraphMisuse(_))), "the taken output is alive");
    drop(taken);
    set_input(&host_in, 5.0);
    exec.launch(&stream).unwrap();
    let taken = output.take(&*home).unwrap();
    assert_eq!(taken.to_vec().unwrap(), vec![6.0f32; N], "the relaunch read the host's new input");
    drop(taken);
    drop((exec, graph, output));

    // The peer's own option: an executable that frees the last launch's output at its next
    // launch. It relaunches with the output never taken; the graph's copy into `seen` shows
    // each launch's output.
    set_input(&host_in, 0.0);
    let (graph, output) = output_graph(&stream, mode, &host_in, &ones, &seen);
    let exec = graph.instantiate_with(InstantiateOptions::new().auto_free_on_launch()).unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(seen.to_vec().unwrap(), vec![1.0f32; N], "the first launch's output");
    set_input(&host_in, 5.0);
    exec.launch(&stream).unwrap();
    assert_eq!(seen.to_vec().unwrap(), vec![6.0f32; N], "the relaunch, its output freed by CUDA");
    assert!(matches!(output.take(&*home), Err(Error::GraphMisuse(_))), "an auto-free output is never handed out");
    stream.synchronize().unwrap();
    // The auto-free executable's last output outlives it (CUDA's rule): the graph's next,
    // plain executable refuses to launch until it is taken, and its drop frees it (else it
    // stays allocated, in the counters of the tests that follow, until the process exits).
    drop(exec);
    let exec = graph.instantiate().unwrap();
    assert!(matches!(exec.launch(&stream), Err(Error::GraphMisuse(_))), "the last output is still allocated");
    let last = output.take(&*home).unwrap();
    assert_eq!(last.to_vec().unwrap(), vec![6.0f32; N], "the auto-free executable's last output");
    drop(last);
    home.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// test_graph_mem_alloc_zero[mode]
// ---------------------------------------------------------------------------------------------

/// `test_graph_mem_alloc_zero`: the peer accepts a zero-byte graph allocation; this crate
/// refuses it (and an overflowing size) before CUDA sees it, and the capture goes on: its graph
/// still allocates, fills and copies out.
fn graph_mem_alloc_zero<M: CaptureMode>(mode: M) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let stream = non_blocking_stream(device);
    let out = zeroed::<u8>(&home, 1);
    let mut capture = stream.begin_capture(mode).unwrap();
    assert!(matches!(capture.alloc::<u8>(&stream, 0), Err(Error::Size(_))), "no empty allocation");
    assert!(matches!(capture.alloc::<u32>(&stream, usize::MAX), Err(Error::Size(_))), "an overflowing size");
    let mut block = capture.alloc::<u8>(&stream, 1).unwrap();
    assert_eq!((block.len(), block.is_empty(), block.device()), (1, false, device));
    capture.fill_bytes(&stream, &block, .., 0x42).unwrap();
    capture.copy(&stream, (&out, ..), (&block, ..)).unwrap();
    capture.free(&stream, &mut block).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x42], "the capture survived the refusals");
}

// ---------------------------------------------------------------------------------------------
// test_graph_mem_set_attributes[mode] (and test_graph_memory_resource_attributes_repr)
// ---------------------------------------------------------------------------------------------

/// `test_graph_mem_set_attributes`: a graph allocation of 1024 bytes that outlives its launch
/// (the peer's `GraphMemoryTestManager.alloc`) raises all four counters; freed outside the
/// graph (`mman.free`), the memory stays with the graph allocator; the high watermarks survive
/// the trim; the reset lowers them. The peer's `attributes_repr` case: the stats' `Debug` names
/// the four counters with their values.
fn graph_mem_set_attributes<M: CaptureMode>(mode: M) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let (stream, home) = (non_blocking_stream(device), non_blocking_stream(device));
    // The peer's `mman.reset()`, first: no other executable of this binary is alive.
    device.trim_graph_memory().unwrap();
    device.reset_graph_memory_peaks().unwrap();
    let before = device.graph_memory().unwrap();

    let (graph, output) = {
        let mut capture = stream.begin_capture(mode).unwrap();
        let block = capture.alloc::<u8>(&stream, ATTRIBUTE_BYTES).unwrap();
        capture.fill_bytes(&stream, &block, .., 0x5a).unwrap();
        let output = capture.keep(block).unwrap();
        (capture.end().unwrap(), output)
    };
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    let taken = output.take(&home).unwrap();
    assert_eq!(taken.to_vec().unwrap(), vec![0x5a; ATTRIBUTE_BYTES], "the launch made and filled the allocation");
    let allocated = device.graph_memory().unwrap();
    let bytes = ATTRIBUTE_BYTES as u64;
    assert!(allocated.used_current >= before.used_current + bytes, "{before:?} then {allocated:?}");
    assert!(allocated.used_high >= bytes, "{allocated:?}");
    assert!(allocated.reserved_current >= before.reserved_current + bytes, "{before:?} then {allocated:?}");
    assert!(allocated.reserved_high >= bytes, "{allocated:?}");
    // The peer's repr case.
    let shown = format!("{allocated:?}");
    assert!(shown.starts_with("GraphMemoryStats {") && shown.ends_with('}'), "{shown}");
    for (name, value) in [
        ("used_current", allocated.used_current),
        ("used_high", allocated.used_high),
        ("reserved_current", allocated.reserved_current),
        ("reserved_high", allocated.reserved_high),
    ] {
        assert!(shown.contains(&format!("{name}: {value}")), "{name} in {shown}");
    }

    // Freed outside the graph, on the home stream: the memory goes back to the graph allocator,
    // which still holds it (the peer: "usage is not reduced yet").
    drop(taken);
    home.synchronize().unwrap();
    let freed = device.graph_memory().unwrap();
    println!("graph memory: before {before:?}, allocated {allocated:?}, freed outside the graph {freed:?}");
    assert!(freed.reserved_current > 0 && freed.used_current > 0, "{freed:?}");
    assert!(freed.reserved_high >= bytes && freed.used_high >= bytes, "{freed:?}");

    // With the graph and its executable gone (as the peer's are by then), the trim gives the
    // cached memory back; the high watermarks remain.
    drop((exec, graph, output));
    stream.synchronize().unwrap();
    device.trim_graph_memory().unwrap();
    let trimmed = device.graph_memory().unwrap();
    println!("trimmed {trimmed:?}");
    assert!(trimmed.reserved_current < allocated.reserved_current, "{allocated:?} then {trimmed:?}");
    assert!(trimmed.reserved_high >= bytes && trimmed.used_high >= bytes, "the peaks survive the trim: {trimmed:?}");

    // The peer resets the high watermarks and leaves their new values unchecked ("platform
    // dependent"); with nothing allocated any more, they fall below the peaks (as the crate's
    // own `memory_nodes` test asserts).
    device.reset_graph_memory_peaks().unwrap();
    let reset = device.graph_memory().unwrap();
    println!("reset {reset:?}");
    assert!(reset.used_high < allocated.used_high && reset.reserved_high < allocated.reserved_high, "{reset:?}");
}

// ---------------------------------------------------------------------------------------------
// test_gmr_check_capture_state[mode] (and test_graph_memory_resource_accessibility_flags)
// ---------------------------------------------------------------------------------------------

/// `test_gmr_check_capture_state`: graph memory is not allocated on a stream that is not being
/// captured (refused, nothing enqueued), and is on the capturing stream. The peer's
/// `accessibility_flags` case: the buffer is on the capture's device (`device_id`), and of
/// this capture.
fn gmr_check_capture_state<M: CaptureMode>(mode: M) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let (stream, outside) = (non_blocking_stream(device), non_blocking_stream(device));
    let (out, untouched) = (zeroed::<u8>(&home, 1), zeroed::<u8>(&home, 1));
    let mut capture = stream.begin_capture(mode).unwrap();
    assert!(matches!(capture.alloc::<u8>(&outside, 1), Err(Error::CaptureMisuse(_))), "a stream not captured");
    let mut block = capture.alloc::<u8>(&stream, 1).unwrap();
    assert_eq!((block.device(), block.capture_id(), block.len()), (device, capture.id(), 1));
    assert!(matches!(capture.fill_bytes(&outside, &block, .., 0x11), Err(Error::CaptureMisuse(_))));
    assert!(matches!(capture.copy(&outside, (&untouched, ..), (&block, ..)), Err(Error::CaptureMisuse(_))));
    capture.fill_bytes(&stream, &block, .., 0x7e).unwrap();
    capture.copy(&stream, (&out, ..), (&block, ..)).unwrap();
    capture.free(&stream, &mut block).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&stream).unwrap();
    outside.synchronize().unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x7e], "the capture's allocation, filled at the launch");
    assert_eq!(untouched.to_vec().unwrap(), vec![0], "the refused copy never ran");
}

// ---------------------------------------------------------------------------------------------
// test_dmr_check_capture_state[mode]
// ---------------------------------------------------------------------------------------------

/// `test_dmr_check_capture_state`: ordinary stream-ordered memory is allocated on a stream that
/// is not being captured, and refused on a capturing one (the peer: "consider using
/// GraphMemoryResource"), without breaking the capture. The refused allocations would have been
/// allocation nodes of the graph that no free follows: its launch would leave graph memory in
/// use. It leaves none.
fn dmr_check_capture_state<M: CaptureMode>(mode: M) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let capturing = non_blocking_stream(device);
    let pool = MemPool::new(device).unwrap();
    let out = zeroed::<u8>(&home, 1);
    // Not capturing: allocated (and freed).
    let mut fine = DeviceBuffer::<u8, _>::new(&capturing, 1).unwrap();
    fine.fill_bytes(&capturing, 0x01).unwrap();
    assert_eq!(fine.to_vec().unwrap(), vec![0x01]);
    drop(fine);
    drop(DeviceBuffer::<u8, _>::new_in(&pool, &capturing, 1).unwrap());
    capturing.synchronize().unwrap();
    device.trim_graph_memory().unwrap();
    let before = device.graph_memory().unwrap();

    let mut capture = capturing.begin_capture(mode).unwrap();
    let misuse =
        |result: cuda_stream::Result<DeviceBuffer<u8, &Stream>>| matches!(result, Err(Error::CaptureMisuse(_)));
    assert!(misuse(DeviceBuffer::new(&capturing, 1)), "DeviceBuffer::new on a capturing stream");
    assert!(misuse(DeviceBuffer::new_in(&pool, &capturing, 1)), "DeviceBuffer::new_in on a capturing stream");
    assert!(misuse(DeviceBuffer::zeroed(&capturing, 1)), "DeviceBuffer::zeroed on a capturing stream");
    capture.fill_bytes(&capturing, &out, .., 0x2c).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&capturing).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x2c], "the capture survived the refusals");
    capturing.synchronize().unwrap();
    let after = device.graph_memory().unwrap();
    assert_eq!(after.used_current, before.used_current, "the graph allocated nothing: {before:?} then {after:?}");
    assert_eq!(pool.stats().unwrap().used_current, 0, "nothing was taken from the pool");
}

// ---------------------------------------------------------------------------------------------
// One test per case and capture mode (the peer's `mode` parameter).
// ---------------------------------------------------------------------------------------------

macro_rules! in_each_mode {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            use super::*;

            #[test]
            fn global() {
                super::$case(Global);
            }

            #[test]
            fn thread_local() {
                super::$case(ThreadLocal);
            }

            #[test]
            fn relaxed() {
                super::$case(Relaxed);
            }
        }
    )*};
}

in_each_mode!(
    graph_alloc_incr,
    graph_alloc_fill,
    graph_alloc_with_output,
    graph_mem_alloc_zero,
    graph_mem_set_attributes,
    gmr_check_capture_state,
    dmr_check_capture_state,
);
