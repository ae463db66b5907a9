//! Priorities: a latency-sensitive task next to a batch job that keeps the GPU full. The same
//! short kernel is timed on a stream at the batch's priority and on one at the highest priority.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/priorities.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{LaunchConfig, MappedWords, Stream, StreamOptions, sys};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

cuda_stream::kernel! {
    /// Each thread spins for `ns` nanoseconds.
    static SPIN = fn priorities_spin(ns: u64);
    /// Writes `value` to `word`, mapped host memory the host reads while the GPU runs.
    static MARK = fn priorities_mark(word: *mut u32, value: u32);
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("priorities") else { return Ok(()) };
    // Both kernels loaded now: CUDA's lazy loading would load the mark at its first launch,
    // behind the backlog it is meant to overtake.
    SPIN.attributes(device)?;
    MARK.attributes(device)?;
    let range = device.priority_range()?;
    let sms = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount)? as u32;
    let batch = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent()))?;
    let same = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent()))?;
    let urgent = Stream::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent()))?;
    let done = MappedWords::<u32>::new(1)?;
    println!("priority range {range}; batch: 10 waves of full-GPU 1 ms blocks at {}", range.least_urgent().value());
    for (name, stream) in [("batch priority", &same), ("highest priority", &urgent)] {
        done.words()[0].store(0, Ordering::Relaxed);
        let backlog = LaunchConfig::new(sms * 2 * 10, 1024);
        // SAFETY: the kernel takes a number of nanoseconds.
        unsafe { SPIN.launch(&batch, &backlog, (1_000_000,))? };
        std::thread::sleep(Duration::from_millis(1));
        let start = Instant::now();
        // SAFETY: `done` is mapped memory of one word that outlives the kernel (synchronized
        // below before it drops).
        unsafe { MARK.launch(stream, &LaunchConfig::new(1, 1), (done.as_ptr(), 1))? };
        while done.words()[0].load(Ordering::Acquire) != 1 && start.elapsed() < Duration::from_secs(10) {
            std::hint::spin_loop();
        }
        let latency = start.elapsed();
        device.synchronize()?;
        println!("  short task at {name:<16} finished after {:.2} ms", latency.as_secs_f64() * 1e3);
    }
    Ok(())
}
