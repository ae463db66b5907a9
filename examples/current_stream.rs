//! The current stream: a scoped, nestable guard makes a stream current for this thread and
//! device; code below it (here, the kernel launchers given `Current`) uses it without being
//! handed a stream.

use cuda_stream::{Stream, StreamOptions};
use cuda_stream_tests::{Current, TagLog};
use std::time::Duration;

fn main() -> cuda_stream::Result<()> {
    let Some(device) = cuda_stream_tests::gpu::example_device("current_stream") else { return Ok(()) };
    let (outer, inner) =
        (Stream::new(device, StreamOptions::non_blocking())?, Stream::new(device, StreamOptions::non_blocking())?);
    let log = TagLog::new(4)?;
    println!("default current stream: id {}", Stream::with_current(device, Stream::id)?);
    {
        let _outer = outer.make_current();
        cuda_stream_tests::tag(&Current, &log, 1, Duration::ZERO)?;
        {
            let _inner = inner.make_current();
            println!(
                "inside the inner guard: id {} (inner is {})",
                Stream::with_current(device, Stream::id)?,
                inner.id()
            );
            cuda_stream_tests::tag(&Current, &log, 2, Duration::ZERO)?;
        }
        println!("back to the outer guard: id {} (outer is {})", Stream::with_current(device, Stream::id)?, outer.id());
    }
    device.synchronize()?;
    println!("tags written by launches on the current stream: {:?}", log.tags());
    Ok(())
}
