//! Graph capture: record 100 kernels on two streams once, then replay them, and compare with
//! launching them directly.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/graph_capture.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{LaunchConfig, Stream, StreamOptions, StreamRef, capture};
use std::time::{Duration, Instant};

cuda_stream::kernel! {
    /// Does nothing: what is timed is launching it.
    static EMPTY = fn graph_capture_empty();
}

/// Launches the empty kernel, one thread.
fn empty(stream: &StreamRef) -> cuda_stream::Result<()> {
    // SAFETY: the kernel takes no arguments and touches no memory.
    unsafe { EMPTY.launch(stream, &LaunchConfig::new(1, 1), ()) }
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("graph_capture") else { return Ok(()) };
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    // One launch before the capture: a kernel's first launch loads its module and checks its
    // parameters, which is no work for a capture to record.
    empty(&stream)?;
    let capture = stream.begin_capture(capture::Global)?;
    let side = stream.fork()?;
    for _ in 0..50 {
        empty(&stream)?;
        empty(&side)?;
    }
    stream.wait_stream(&side)?;
    let exec = capture.end()?.instantiate()?;
    exec.upload(&stream)?;
    stream.synchronize()?;

    let replays = 100;
    let start = Instant::now();
    for _ in 0..replays {
        exec.launch(&stream)?;
    }
    stream.synchronize()?;
    let replayed = per_kernel(start.elapsed(), replays);
    let start = Instant::now();
    for _ in 0..replays * 100 {
        empty(&stream)?;
    }
    stream.synchronize()?;
    let direct = per_kernel(start.elapsed(), replays);
    println!("100 kernels on two streams: {replayed:?} per kernel replayed, {direct:?} launched directly");
    Ok(())
}

fn per_kernel(total: Duration, replays: u32) -> Duration {
    total / (replays * 100)
}
