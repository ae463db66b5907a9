//! Graph capture: record 100 kernels on two streams once, then replay them, and compare with
//! launching them directly.

use cuda_stream::{Stream, StreamOptions, capture};
use std::time::{Duration, Instant};

fn main() -> cuda_stream::Result<()> {
    let Some(device) = cuda_stream_tests::gpu::example_device("graph_capture") else { return Ok(()) };
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let capture = stream.begin_capture(capture::Global)?;
    let side = stream.fork()?;
    for _ in 0..50 {
        cuda_stream_tests::empty(&stream)?;
        cuda_stream_tests::empty(&side)?;
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
        cuda_stream_tests::empty(&stream)?;
    }
    stream.synchronize()?;
    let direct = per_kernel(start.elapsed(), replays);
    println!("100 kernels on two streams: {replayed:?} per kernel replayed, {direct:?} launched directly");
    Ok(())
}

fn per_kernel(total: Duration, replays: u32) -> Duration {
    total / (replays * 100)
}
