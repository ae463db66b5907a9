//! Host functions and completion futures: a Rust closure runs when the GPU work before it is
//! done, and `stream.completion().await` waits for two streams with a ten-line executor (no
//! async runtime).
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/host_functions.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{LaunchConfig, Stream, StreamOptions};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

cuda_stream::kernel! {
    /// Each thread spins for `ns` nanoseconds.
    static SPIN = fn host_functions_spin(ns: u64);
}

/// Runs a future to completion on this thread, parked while it waits: the whole executor.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("host_functions") else { return Ok(()) };
    let fast = Stream::new(device, StreamOptions::non_blocking())?;
    let slow = Stream::new(device, StreamOptions::non_blocking())?;
    let nanos = |duration: Duration| duration.as_nanos() as u64;
    // Loaded now, not at the first launch (CUDA's lazy loading), so the times below are the
    // kernels' own.
    SPIN.attributes(device)?;
    let start = Instant::now();
    // SAFETY: the kernel takes a number of nanoseconds.
    unsafe { SPIN.launch(&fast, &LaunchConfig::new(1, 32), (nanos(Duration::from_millis(20)),))? };
    // SAFETY: as above.
    unsafe { SPIN.launch(&slow, &LaunchConfig::new(1, 32), (nanos(Duration::from_millis(60)),))? };
    slow.launch_host_fn(move || println!("host function: slow stream's kernel done at {:?}", start.elapsed()))?;
    let (fast_done, slow_done) = (fast.completion(), slow.completion());
    block_on(async {
        fast_done.await?;
        println!("fast stream complete after {:?}", start.elapsed());
        slow_done.await?;
        println!("slow stream complete after {:?}", start.elapsed());
        Ok(())
    })
}
