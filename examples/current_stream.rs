//! The current stream: `as_current` makes a stream current for this thread and device while a
//! closure runs; code inside it (here, the kernel launchers given `Current`) uses it without
//! being handed a stream. Calls nest, and the previous stream is current again afterwards.

use cuda_stream::{Stream, StreamOptions, StreamRef};
use cuda_stream_tests::{Current, TagLog};
use std::time::Duration;

fn main() -> cuda_stream::Result<()> {
    let Some(device) = cuda_stream_tests::gpu::example_device("current_stream") else { return Ok(()) };
    let (outer, inner) =
        (Stream::new(device, StreamOptions::non_blocking())?, Stream::new(device, StreamOptions::non_blocking())?);
    let log = TagLog::new(4)?;
    let current = || StreamRef::with_current(device, |s| format!("{:?}", s.as_raw()));
    println!("default current stream: {}", current());
    outer.as_current(|| -> cuda_stream::Result<()> {
        cuda_stream_tests::tag(&Current, &log, 1, Duration::ZERO)?;
        inner.as_current(|| {
            println!("inside the inner call: {} (inner is {:?})", current(), inner.as_raw());
            cuda_stream_tests::tag(&Current, &log, 2, Duration::ZERO)
        })?;
        println!("back in the outer call: {} (outer is {:?})", current(), outer.as_raw());
        Ok(())
    })?;
    device.synchronize()?;
    println!("tags written by launches on the current stream: {:?}", log.tags());
    Ok(())
}
