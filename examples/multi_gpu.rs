//! Several GPUs from one thread: a stream on each device, GPU 0 waiting for GPU 1's event, and
//! the current device untouched throughout.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/multi_gpu.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{Device, LaunchConfig, MappedWords, Stream, StreamOptions};
use std::sync::atomic::Ordering;
use std::time::Duration;

cuda_stream::kernel! {
    /// Spins for `ns` nanoseconds, then appends `tag` to `log`: mapped host memory that every
    /// GPU reaches, a count then `capacity` tags in the order the GPUs ran the kernels.
    static TAG = fn multi_gpu_tag(log: *mut u32, capacity: u32, tag: u32, ns: u64);
}

/// Room for this many tags in the log, after its count.
const CAPACITY: u32 = 4;

fn main() -> cuda_stream::Result<()> {
    // Devices 0 and 1, or a plain "skipped" with fewer GPUs (a failure under
    // CUDA_STREAM_REQUIRE_GPUS=2, or without any GPU under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(devices) = cuda_stream::testing::devices_or_skip("multi_gpu", 2) else { return Ok(()) };
    let (gpu0, gpu1) = (devices[0], devices[1]);
    let current = Device::current()?;
    let (s0, s1) =
        (Stream::new(gpu0, StreamOptions::non_blocking())?, Stream::new(gpu1, StreamOptions::non_blocking())?);
    let log = MappedWords::<u32>::new(1 + CAPACITY as usize)?;
    let one = LaunchConfig::new(1, 1);
    // SAFETY: `log` is mapped memory of a count and `CAPACITY` tags, reachable from every GPU,
    // that outlives the kernel (`s0` waits for it and is synchronized below before `log` drops).
    unsafe { TAG.launch(&s1, &one, (log.as_ptr(), CAPACITY, 1, Duration::from_millis(10).as_nanos() as u64))? };
    s0.wait_event(&s1.record_event()?)?;
    // SAFETY: as above; `s0` is synchronized below before `log` drops.
    unsafe { TAG.launch(&s0, &one, (log.as_ptr(), CAPACITY, 0, 0))? };
    s0.synchronize()?;
    let words = log.words();
    let count = words[0].load(Ordering::Acquire).min(CAPACITY) as usize;
    let tags: Vec<u32> = words[1..=count].iter().map(|word| word.load(Ordering::Acquire)).collect();
    println!("order on the GPUs: {tags:?} (GPU 1's kernel first); current device still {}", current.ordinal());
    Ok(())
}
