//! Host memory three ways, as a CUDA C++ program uses it:
//! * memory the program already has, page-locked for a while (`cudaHostRegister`): a `Vec`
//!   lent to [`register_host`], whose copies are asynchronous, and which is unregistered
//!   (after its copies) when the closure returns;
//! * pinned buffers from a pool ([`PinnedPool`]): one per batch, each batch's memory reused
//!   from the last instead of `cudaHostAlloc` and `cudaFreeHost` again;
//! * zero-copy: a kernel that works on pinned memory in place through its device address
//!   ([`PinnedBuffer::use_on`]).
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/host_memory.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{DeviceBuffer, LaunchConfig, PinnedBuffer, PinnedPool, Stream, StreamOptions, register_host};
use std::time::Instant;

cuda_stream::kernel! {
    /// Doubles each of `n` floats in place.
    static DOUBLE = fn host_memory_double(values: *mut f32, n: u32);
}

const N: usize = 1 << 20;

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("host_memory") else { return Ok(()) };
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256);

    // 1. A Vec the program has, registered while its copies run.
    let mut data: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let mut buffer = DeviceBuffer::<f32, _>::new(&stream, N)?;
    register_host(&mut data, |registered| -> cuda_stream::Result<()> {
        buffer.copy_from_pinned(&stream, registered)?;
        // SAFETY: the kernel doubles the buffer's N floats, no others.
        unsafe { DOUBLE.launch(&stream, &config, (&mut buffer, N as u32))? };
        buffer.copy_to_pinned(&stream, registered)
    })??;
    assert!(data.iter().enumerate().all(|(i, &value)| value == 2.0 * i as f32));
    println!("registered Vec: copied in, doubled, copied back ({} MiB)", (N * 4) >> 20);

    // 2. One pinned buffer per batch, from a pool: after the first batch, no allocation.
    let pool = PinnedPool::new();
    for batch in 0..4 {
        let started = Instant::now();
        let mut staging = PinnedBuffer::from_slice_in(&pool, &vec![batch as f32; N])?;
        buffer.copy_from_pinned(&stream, &mut staging)?;
        // SAFETY: as above.
        unsafe { DOUBLE.launch(&stream, &config, (&mut buffer, N as u32))? };
        buffer.copy_to_pinned(&stream, &mut staging)?;
        assert!(staging.as_slice()?.iter().all(|&value| value == 2.0 * batch as f32));
        let stats = pool.stats();
        println!(
            "batch {batch}: {:>7.0} us, pool: {} KiB in use, {} KiB cached",
            started.elapsed().as_secs_f64() * 1e6,
            stats.in_use_bytes >> 10,
            stats.cached_bytes >> 10
        );
    }

    // 3. Zero-copy: the kernel doubles pinned memory where it is.
    let mut shared = PinnedBuffer::from_slice(&vec![1.5f32; N])?;
    shared.use_on(&stream, |stream, values| {
        // SAFETY: the kernel doubles the pinned buffer's N floats through their device address.
        unsafe { DOUBLE.launch(stream, &config, (values, N as u32)) }
    })??;
    // The host's read waits for the kernel.
    assert!(shared.as_slice()?.iter().all(|&value| value == 3.0));
    println!("zero-copy: the kernel doubled pinned memory in place");
    Ok(())
}
