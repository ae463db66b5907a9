//! Priorities: a latency-sensitive task next to a batch job that keeps the GPU full. The same
//! short kernel is timed on a stream at the batch's priority and on one at the highest priority.

use cuda_stream::{Stream, StreamOptions};
use cuda_stream_tests::{TagLog, poll_until};
use std::time::Duration;

fn main() -> cuda_stream::Result<()> {
    let Some(device) = cuda_stream_tests::gpu::example_device("priorities") else { return Ok(()) };
    let range = device.priority_range()?;
    let sms = cuda_stream_tests::sm_count(device)?;
    let batch = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent()))?;
    let same = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent()))?;
    let urgent = Stream::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent()))?;
    let log = TagLog::new(2)?;
    println!("priority range {range}; batch: 10 waves of full-GPU 1 ms blocks at {}", range.least_urgent().value());
    for (name, stream) in [("batch priority", &same), ("highest priority", &urgent)] {
        log.clear();
        cuda_stream_tests::spin_grid(&batch, Duration::from_millis(1), sms * 2 * 10, 1024)?;
        std::thread::sleep(Duration::from_millis(1));
        cuda_stream_tests::tag(stream, &log, 1, Duration::ZERO)?;
        let latency = poll_until(Duration::from_secs(10), || log.count() == 1).unwrap_or(Duration::MAX);
        device.synchronize()?;
        println!("  short task at {name:<16} finished after {:.2} ms", latency.as_secs_f64() * 1e3);
    }
    Ok(())
}
