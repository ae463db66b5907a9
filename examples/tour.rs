//! A tour of this machine's CUDA streams: the toolkit these crates were built against, the
//! driver, each device with its stream priority range, and a kernel on a high-priority
//! non-blocking stream, timed with events. Without a GPU it says so and exits 0.

use cuda_stream::{BuiltinStream, Device, EventFlags, Stream, StreamOptions, sys};
use std::time::{Duration, Instant};

fn main() {
    println!("cuda-stream tour");
    println!("  toolkit      CUDA {} at {}", version(sys::CUDART_VERSION as i32), sys::TOOLKIT_ROOT);
    let mode =
        if cuda_stream::NULL_STREAM_IS_PER_THREAD { "per-thread default stream" } else { "legacy default stream" };
    println!("  handle 0     {mode}");
    match cuda_stream::runtime_version() {
        Ok(runtime) => println!("  runtime      CUDA {} (linked statically)", version(runtime)),
        Err(error) => println!("  runtime      {error}"),
    }
    match cuda_stream::driver_version() {
        Ok(0) => println!("  driver       none installed"),
        Ok(driver) => println!("  driver       supports CUDA {}", version(driver)),
        Err(error) => println!("  driver       {error}"),
    }
    let count = match Device::count() {
        Ok(count) if count > 0 => count,
        Ok(_) => return println!("\nNo CUDA device: nothing more to show."),
        Err(error) => {
            return println!("\nNo usable CUDA GPU here ({error}).\nNothing more to show; this is not an error.");
        }
    };
    for ordinal in 0..count {
        if let Err(error) = show_device(ordinal) {
            println!("  device {ordinal}: {error}");
        }
    }
}

fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn show_device(ordinal: i32) -> cuda_stream::Result<()> {
    let device = Device::new(ordinal)?;
    let range = device.priority_range()?;
    let sms = cuda_stream_tests::sm_count(device)?;
    println!("\ndevice {ordinal}: {} ({sms} SMs)", device.name()?);
    println!("  stream priorities  {range} ({} levels; lower is more urgent)", range.levels());
    let legacy = BuiltinStream::legacy(device);
    let per_thread = BuiltinStream::per_thread(device);
    println!("  legacy stream      id {}", legacy.id()?);
    println!("  per-thread stream  id {} (this thread's)", per_thread.id()?);

    let stream = Stream::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent()))?;
    println!(
        "  new stream         id {}, non-blocking {}, priority {} (asked {})",
        stream.id()?,
        stream.is_non_blocking()?,
        stream.priority()?.value(),
        range.most_urgent().value()
    );
    let start = cuda_stream::Event::new(device, EventFlags::timing())?;
    let end = cuda_stream::Event::new(device, EventFlags::timing())?;
    let spin = Duration::from_millis(5);
    let host = Instant::now();
    stream.record(&start)?;
    cuda_stream_tests::spin_grid(&stream, spin, sms, 128)?;
    stream.record(&end)?;
    let busy_after_launch = !stream.query()?;
    stream.synchronize()?;
    let gpu = end.elapsed(&start)?.unwrap_or_default();
    println!(
        "  spin kernel        {sms} blocks x {spin:?}: GPU {:.3} ms, host {:.3} ms, busy right after launch: {busy_after_launch}",
        gpu.as_secs_f64() * 1e3,
        host.elapsed().as_secs_f64() * 1e3
    );
    stream.destroy()
}
