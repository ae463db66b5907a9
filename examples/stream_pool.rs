//! An exclusive stream pool: 8 threads lease streams, each holding one no other thread holds,
//! and the pool creates only as many as were held at once.

use cuda_stream::{StreamOptions, StreamPool};
use std::time::Duration;

fn main() -> cuda_stream::Result<()> {
    let Some(device) = cuda_stream_tests::gpu::example_device("stream_pool") else { return Ok(()) };
    let range = device.priority_range()?;
    let pool = StreamPool::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent()), 32)?;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|worker| {
                let pool = &pool;
                scope.spawn(move || -> cuda_stream::Result<()> {
                    for _ in 0..10 {
                        let lease = pool.acquire()?;
                        cuda_stream_tests::spin(&*lease, Duration::from_micros(200))?;
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
