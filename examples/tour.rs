//! A tour of this machine's CUDA streams: the toolkit these crates were built against, the
//! driver, each device with its stream priority range, and a kernel on a high-priority
//! non-blocking stream, timed with events. Without a GPU it says so and exits 0.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/tour.cu` in `kernels/`,
//! `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and `cuda-stream-build`
//! as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{BuiltinStream, Device, EventFlags, LaunchConfig, Stream, StreamOptions, sys};
use std::time::{Duration, Instant};

cuda_stream::kernel! {
    /// Each thread spins for `ns` nanoseconds.
    static SPIN = fn tour_spin(ns: u64);
}

fn main() -> cuda_stream::Result<()> {
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
    // A plain "skipped" that says why without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    if cuda_stream::testing::device_or_skip("tour").is_none() {
        println!("\nNo usable CUDA GPU here.\nNothing more to show; this is not an error.");
        return Ok(());
    }
    for ordinal in 0..Device::count()? {
        if let Err(error) = show_device(ordinal) {
            println!("  device {ordinal}: {error}");
        }
    }
    Ok(())
}

fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn show_device(ordinal: i32) -> cuda_stream::Result<()> {
    let device = Device::new(ordinal)?;
    let range = device.priority_range()?;
    let sms = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount)? as u32;
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
    // Loaded now, not at its first launch (CUDA's lazy loading), so the time below is the
    // kernel's own.
    SPIN.attributes(device)?;
    let start = cuda_stream::Event::new(device, EventFlags::timing())?;
    let end = cuda_stream::Event::new(device, EventFlags::timing())?;
    let spin = Duration::from_millis(5);
    let host = Instant::now();
    stream.record(&start)?;
    // SAFETY: the kernel takes a number of nanoseconds.
    unsafe { SPIN.launch(&stream, &LaunchConfig::new(sms, 128), (spin.as_nanos() as u64,))? };
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
