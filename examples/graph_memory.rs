//! A graph that copies in, computes and copies out, NVIDIA's simpleCudaGraphs ported: a
//! host-to-device copy and memsets, a reduction in two kernels, a device-to-host copy and a
//! host function, built by hand, then cloned, then made again by capture; the three executables
//! replayed with new input each time. A graph holds the memory its nodes use (borrowed buffers'
//! memory, in the graph built by hand and in the captured one, whose buffers' own fills and
//! typed launches are captured), so the buffers are dropped here before the first launch, and
//! each launch is ordered with the host's access to the page-locked input and output: no
//! synchronize between the rounds.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/graph_memory.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{
    DeviceBuffer, Graph, GraphExec, LaunchConfig, PinnedBuffer, SharedPinned, Stream, StreamOptions, capture,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

cuda_stream::kernel! {
    /// Each block sums its share of the `n` inputs into `partial[block]`.
    static REDUCE = fn graph_memory_reduce(input: *const f32, partial: *mut f32, n: u64);
    /// One block sums the `n` partial sums into `*result`.
    static REDUCE_FINAL = fn graph_memory_reduce_final(partial: *const f32, result: *mut f32, n: u64);
}

const N: usize = 1 << 20;
const BLOCKS: u32 = 256;
const THREADS: u32 = 512;

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("graph_memory") else { return Ok(()) };
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let host_input = Arc::new(SharedPinned::new(PinnedBuffer::<f32>::zeroed(N)?));
    let host_result = Arc::new(SharedPinned::new(PinnedBuffer::<f32>::zeroed(1)?));
    let reported = Arc::new(AtomicU32::new(0));

    let (exec, clone_exec) = {
        // Borrowed buffers (their home, `&stream`, is lent): the graph holds their memory.
        let input = DeviceBuffer::<f32, _>::new(&stream, N)?;
        let partial = DeviceBuffer::<f32, _>::new(&stream, BLOCKS as usize)?;
        let result = DeviceBuffer::<f32, _>::new(&stream, 1)?;
        let mut graph = Graph::new(device)?;
        let mut builder = graph.builder();
        let copy_in = builder.add_copy_from_pinned(&input, .., &host_input, .., &[])?;
        let clear_partial = builder.add_fill_bytes(&partial, .., 0, &[])?;
        let clear_result = builder.add_fill_bytes(&result, .., 0, &[])?;
        // The kernels reach the buffers through addresses the graph hands out as it holds
        // them: each launch is ordered with the buffers' other uses.
        let (input_ptr, partial_ptr, result_ptr) = (
            builder.hold_for_kernels(&input)?,
            builder.hold_for_kernels(&partial)?,
            builder.hold_for_kernels(&result)?,
        );
        // SAFETY: reads the N inputs and writes BLOCKS partial sums, in buffers the graph holds
        // for every launch, which nothing else touches while a launch runs.
        let reduce = unsafe {
            builder.add_kernel(
                &REDUCE,
                &LaunchConfig::new(BLOCKS, THREADS),
                (input_ptr.cast_const(), partial_ptr, N as u64),
                &[copy_in, clear_partial],
            )?
        };
        // SAFETY: reads the BLOCKS partial sums and writes the one result, as above.
        let reduce_final = unsafe {
            builder.add_kernel(
                &REDUCE_FINAL,
                &LaunchConfig::new(1, THREADS),
                (partial_ptr.cast_const(), result_ptr, u64::from(BLOCKS)),
                &[reduce, clear_result],
            )?
        };
        let copy_out = builder.add_copy_to_pinned(&host_result, .., &result, .., &[reduce_final])?;
        let count = Arc::clone(&reported);
        builder.add_host_fn(
            move || {
                count.fetch_add(1, Ordering::Relaxed);
            },
            &[copy_out],
        )?;
        println!("graph built by hand: {} nodes", graph.node_count()?);
        let clone = graph.try_clone()?;
        (graph.instantiate()?, clone.instantiate()?)
        // The graphs and the buffers drop here: the executables hold the buffers' memory.
    };

    let captured_exec = by_capture(&stream, &host_input, &host_result, &reported)?;

    for (round, exec) in
        [&exec, &clone_exec, &captured_exec, &exec, &clone_exec, &captured_exec].into_iter().enumerate()
    {
        let values: Vec<f32> = (0..N).map(|i| ((i + round) % 7) as f32).collect();
        // Waits for the previous launch's copy out of the input before the host writes it.
        host_input.lock().as_mut_slice()?.copy_from_slice(&values);
        exec.launch(&stream)?;
        // Waits for this launch's copy into the result.
        let gpu = host_result.lock().as_slice()?[0];
        let cpu: f64 = values.iter().copied().map(f64::from).sum();
        println!("round {round}: GPU sum {gpu}, CPU sum {cpu}");
        assert_eq!(f64::from(gpu), cpu, "the sums agree (integers, exact in f32)");
    }
    stream.synchronize()?;
    println!("the host node ran {} times", reported.load(Ordering::Relaxed));
    assert_eq!(reported.load(Ordering::Relaxed), 6);
    Ok(())
}

/// The same graph made by capture, from borrowed buffers again: their own fills and the typed
/// launches that take them as arguments are captured on the capturing stream, and the graph
/// holds them, as the capture's copies to and from the page-locked memory (a buffer's own
/// `copy_from_pinned` stays refused in a capture: it borrows the host buffer, which the graph
/// could not hold).
fn by_capture(
    stream: &Stream,
    host_input: &Arc<SharedPinned<f32>>,
    host_result: &Arc<SharedPinned<f32>>,
    reported: &Arc<AtomicU32>,
) -> cuda_stream::Result<GraphExec> {
    let input = DeviceBuffer::<f32, _>::new(stream, N)?;
    let mut partial = DeviceBuffer::<f32, _>::new(stream, BLOCKS as usize)?;
    let mut result = DeviceBuffer::<f32, _>::new(stream, 1)?;
    let capturing = Stream::new(stream.device(), StreamOptions::non_blocking())?;
    let mut capture = capturing.begin_capture(capture::ThreadLocal)?;
    capture.copy_from_pinned(&capturing, (&input, ..), (host_input, ..))?;
    partial.fill_bytes(&capturing, 0)?;
    result.fill_bytes(&capturing, 0)?;
    // SAFETY: the kernels read and write the elements of the buffers given as arguments, as in
    // the graph built by hand; the graph holds the buffers for every launch.
    unsafe {
        REDUCE.launch(&capturing, &LaunchConfig::new(BLOCKS, THREADS), (&input, &mut partial, N as u64))?;
        REDUCE_FINAL.launch(&capturing, &LaunchConfig::new(1, THREADS), (&partial, &mut result, u64::from(BLOCKS)))?;
    }
    capture.copy_to_pinned(&capturing, (host_result, ..), (&result, ..))?;
    let count = Arc::clone(reported);
    capture.launch_host_fn(&capturing, move || {
        count.fetch_add(1, Ordering::Relaxed);
    })?;
    let graph = capture.end()?;
    println!("graph made by capture: {} nodes", graph.node_count()?);
    graph.instantiate()
    // The buffers drop here: the executable holds their memory.
}
