//! A loop that runs on the GPU: a graph whose while node repeats its body until a kernel says
//! stop, in one graph launch, with no trip to the host between iterations.
//!
//! The kernel (`examples/kernels/conditional_while.cu`) counts down a device counter and sets
//! the loop's condition from device code:
//!
//! ```c++
//! extern "C" __global__ void conditional_while_countdown(cudaGraphConditionalHandle handle,
//!                                                        uint32_t* counter, uint32_t* runs) {
//!   uint32_t left = *counter;
//!   if (left > 0) left -= 1;
//!   *counter = left;
//!   *runs += 1;
//!   cudaGraphSetConditional(handle, left > 0 ? 1u : 0u);
//! }
//! ```
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/conditional_while.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::conditional::ConditionHandle;
use cuda_stream::{DeviceBuffer, Graph, LaunchConfig, Stream, StreamOptions, capture};

cuda_stream::kernel! {
    /// One iteration: counts the run, decrements the counter, keeps the loop going while it
    /// is above zero.
    static COUNTDOWN = fn conditional_while_countdown(handle: ConditionHandle, counter: *mut u32, runs: *mut u32);
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("conditional_while") else { return Ok(()) };
    // Skipped, and said so, under compute-sanitizer (the workspace's GPU runs set
    // CUDA_STREAM_SANITIZER there).
    let why = "a launch of a graph with a conditional node faults under it (CUDA 13.0), with no error reported";
    if std::env::var_os("CUDA_STREAM_SANITIZER").is_some() {
        eprintln!("SKIPPED conditional_while under compute-sanitizer: {why}");
        return Ok(());
    }
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    // The kernel's module loaded before the body's capture (CUDA's lazy loading would load it
    // at the first launch, inside the capture).
    COUNTDOWN.attributes(device)?;
    let mut counter = DeviceBuffer::<u32, _>::zeroed(&stream, 1)?;
    let mut runs = DeviceBuffer::<u32, _>::zeroed(&stream, 1)?;
    let (counter_ptr, runs_ptr) = (counter.as_mut_ptr(), runs.as_mut_ptr());

    // An empty graph, and a while node in it. Its condition starts every launch at 1, so the
    // body runs at least once (a do-while); the body's kernel decides from there.
    let mut graph = Graph::new(device)?;
    {
        let mut root = graph.builder();
        let keep_going = root.condition(Some(1))?;
        let (_loop, mut body) = root.add_while(&keep_going, &[])?;
        // Fill the body by capturing a stream: whatever is launched on it until `end` becomes
        // the body (kernels, copies, memsets; no host functions or events in a body).
        let filling = body.capture(&stream, capture::ThreadLocal)?;
        // SAFETY: `counter` and `runs` hold one u32 each on the stream's device, and live until
        // the graph's launches below are done (they are read back after them).
        unsafe { COUNTDOWN.launch(&stream, &LaunchConfig::new(1, 1), (keep_going.handle(), counter_ptr, runs_ptr))? };
        filling.end()?;
    }
    let exec = graph.instantiate()?;

    for start in [10u32, 3, 1000] {
        counter.copy_from_slice(&stream, &[start])?;
        runs.fill_bytes(&stream, 0)?;
        exec.launch(&stream)?; // one launch: the whole loop
        let (ran, left) = (runs.to_vec()?[0], counter.to_vec()?[0]);
        println!("counted down from {start}: the body ran {ran} times, the counter is {left}");
        assert_eq!((ran, left), (start, 0));
    }
    Ok(())
}
