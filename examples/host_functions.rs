//! Host functions and completion futures: a Rust closure runs when the GPU work before it is
//! done, and `stream.completion().await` waits for two streams with a ten-line executor (no
//! async runtime).

use cuda_stream::{Stream, StreamOptions};
use cuda_stream_tests::block_on;
use std::time::{Duration, Instant};

fn main() -> cuda_stream::Result<()> {
    let Some(device) = cuda_stream_tests::gpu::example_device("host_functions") else { return Ok(()) };
    let fast = Stream::new(device, StreamOptions::non_blocking())?;
    let slow = Stream::new(device, StreamOptions::non_blocking())?;
    let start = Instant::now();
    cuda_stream_tests::spin(&fast, Duration::from_millis(20))?;
    cuda_stream_tests::spin(&slow, Duration::from_millis(60))?;
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
