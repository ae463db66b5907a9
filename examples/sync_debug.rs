//! Finding the calls that make the host wait for the GPU: a pipeline that should overlap its
//! copies and kernels runs once under a sync-debug scope that reports (each wait, its CUDA
//! call and where it came from), then under one that refuses (the wait fails, nothing waits).
//! Set `RUST_BACKTRACE=1` to see where each reported wait was called.
//!
//! A crate of its own: this file as `src/main.rs`, with `cuda-stream` (feature `testing`, for
//! the GPU gate) as a dependency.

use cuda_stream::sync_debug::{SyncDebugMode, sync_debug_scope};
use cuda_stream::{DeviceBuffer, Error, PinnedBuffer, Stream, StreamOptions};

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("sync_debug") else { return Ok(()) };
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let mut pinned = PinnedBuffer::from_slice(&[1.0f32; 1 << 20])?;
    let mut buffer = DeviceBuffer::<f32, _>::new(&stream, 1 << 20)?;

    let step = |buffer: &mut DeviceBuffer<f32, &Stream>, pinned: &mut PinnedBuffer<f32>| {
        buffer.copy_from_pinned(&stream, pinned)?; // asynchronous: fine
        let first = buffer.to_vec()?[0]; // a pageable copy: the host waits here
        buffer.copy_to_pinned(&stream, pinned)?; // asynchronous: fine
        stream.synchronize()?; // the host waits here too
        Ok::<f32, Error>(first)
    };

    let report = sync_debug_scope(SyncDebugMode::Report);
    step(&mut buffer, &mut pinned)?;
    for event in report.take_events() {
        println!("the host waited: {} ({:?}) on thread {:?}", event.api, event.kind, event.thread);
        if event.backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            println!("{}", event.backtrace);
        }
    }
    drop(report);

    let refuse = sync_debug_scope(SyncDebugMode::Refuse);
    match step(&mut buffer, &mut pinned) {
        Err(error @ Error::SyncRefused { .. }) => println!("refused: {error}"),
        other => println!("unexpected: {other:?}"),
    }
    drop(refuse);
    stream.synchronize()
}
