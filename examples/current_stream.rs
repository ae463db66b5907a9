//! The current stream: `as_current` makes a stream current for this thread and device while a
//! closure runs; code inside it (here, `tag`, which launches on `StreamRef::with_current`'s
//! stream) uses it without being handed a stream. Calls nest, and the previous stream is current
//! again afterwards.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/current_stream.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{Device, LaunchConfig, MappedWords, Stream, StreamOptions, StreamRef};
use std::sync::atomic::Ordering;

cuda_stream::kernel! {
    /// Appends `tag` to `log`: mapped host memory, a count then `capacity` tags in GPU order.
    static TAG = fn current_stream_tag(log: *mut u32, capacity: u32, tag: u32);
}

/// Room for this many tags in the log, after its count.
const CAPACITY: u32 = 4;

/// Launches the tag kernel on `device`'s current stream: no stream is handed in.
fn tag(device: Device, log: &MappedWords<u32>, tag: u32) -> cuda_stream::Result<()> {
    StreamRef::with_current(device, |stream| {
        // SAFETY: `log` is mapped memory of a count and `CAPACITY` tags that outlives the
        // kernel (the device is synchronized below before it drops).
        unsafe { TAG.launch(stream, &LaunchConfig::new(1, 1), (log.as_ptr(), CAPACITY, tag)) }
    })
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("current_stream") else { return Ok(()) };
    let (outer, inner) =
        (Stream::new(device, StreamOptions::non_blocking())?, Stream::new(device, StreamOptions::non_blocking())?);
    let log = MappedWords::<u32>::new(1 + CAPACITY as usize)?;
    let current = || StreamRef::with_current(device, |s| format!("{:?}", s.as_raw()));
    println!("default current stream: {}", current());
    outer.as_current(|| -> cuda_stream::Result<()> {
        tag(device, &log, 1)?;
        inner.as_current(|| {
            println!("inside the inner call: {} (inner is {:?})", current(), inner.as_raw());
            tag(device, &log, 2)
        })?;
        println!("back in the outer call: {} (outer is {:?})", current(), outer.as_raw());
        Ok(())
    })?;
    device.synchronize()?;
    let words = log.words();
    let count = words[0].load(Ordering::Acquire).min(CAPACITY) as usize;
    let tags: Vec<u32> = words[1..=count].iter().map(|word| word.load(Ordering::Acquire)).collect();
    println!("tags written by launches on the current stream: {tags:?}");
    Ok(())
}
