//! An exclusive stream pool: 8 threads lease streams, each holding one no other thread holds,
//! and the pool creates only as many as were held at once.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/stream_pool.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{LaunchConfig, StreamOptions, StreamPool};
use std::time::Duration;

cuda_stream::kernel! {
    /// Each thread spins for `ns` nanoseconds.
    static SPIN = fn stream_pool_spin(ns: u64);
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("stream_pool") else { return Ok(()) };
    let range = device.priority_range()?;
    let pool = StreamPool::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent()), 32)?;
    let spin = Duration::from_micros(200).as_nanos() as u64;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|worker| {
                let pool = &pool;
                scope.spawn(move || -> cuda_stream::Result<()> {
                    for _ in 0..10 {
                        let lease = pool.acquire()?;
                        // SAFETY: the kernel takes a number of nanoseconds.
                        unsafe { SPIN.launch(&lease, &LaunchConfig::new(1, 32), (spin,))? };
                        lease.synchronize()?;
                    }
                    println!("worker {worker} done");
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|worker| worker.join().expect("workers do not panic"))
    })?;
    println!(
        "80 leases served by {} streams (bound {}), priority {}",
        pool.created(),
        pool.capacity(),
        range.most_urgent().value()
    );
    Ok(())
}
