//! Several GPUs from one thread: a stream on each device, GPU 0 waiting for GPU 1's event, and
//! the current device untouched throughout.

use cuda_stream::{Device, Stream, StreamOptions};
use cuda_stream_tests::TagLog;
use std::time::Duration;

fn main() -> cuda_stream::Result<()> {
    let count = Device::count().unwrap_or(0);
    if count < 2 {
        println!("multi_gpu: this machine has {count} usable GPU(s); the example needs 2. Nothing to show.");
        return Ok(());
    }
    let (gpu0, gpu1) = (Device::new(0)?, Device::new(1)?);
    let current = Device::current()?;
    let (s0, s1) =
        (Stream::new(gpu0, StreamOptions::non_blocking())?, Stream::new(gpu1, StreamOptions::non_blocking())?);
    let log = TagLog::new(4)?;
    cuda_stream_tests::tag(&s1, &log, 1, Duration::from_millis(10))?;
    s0.wait_event(&s1.record_event()?)?;
    cuda_stream_tests::tag(&s0, &log, 0, Duration::ZERO)?;
    s0.synchronize()?;
    println!("order on the GPUs: {:?} (GPU 1's kernel first); current device still {}", log.tags(), current.ordinal());
    Ok(())
}
