//! Several GPUs from one thread: a stream on each device, GPU 0 waiting for GPU 1's event, and
//! the current device untouched throughout; then, where the GPUs reach each other's memory,
//! a kernel on GPU 1 reading a buffer of GPU 0 (peer access, the uses ordered across the
//! devices by the launch) and a peer copy back.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/multi_gpu.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{Device, DeviceBuffer, LaunchConfig, MappedWords, MemPool, PoolAccess, Stream, StreamOptions};
use std::sync::atomic::Ordering;
use std::time::Duration;

cuda_stream::kernel! {
    /// Spins for `ns` nanoseconds, then appends `tag` to `log`: mapped host memory that every
    /// GPU reaches, a count then `capacity` tags in the order the GPUs ran the kernels.
    static TAG = fn multi_gpu_tag(log: *mut u32, capacity: u32, tag: u32, ns: u64);
    /// `y[i] = a * x[i]` over `n` floats.
    static SCALE = fn multi_gpu_scale(x: *const f32, y: *mut f32, a: f32, n: u32);
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

    // Peer access: GPU 1 reads GPU 0's memory in place.
    if !gpu1.can_access_peer(gpu0)? {
        println!("GPU 1 cannot reach GPU 0's memory on this host: no peer part");
        return Ok(());
    }
    // Stream-ordered memory comes from a pool, which grants the access (cudaMalloc memory
    // would take gpu1.enable_peer_access(gpu0) instead).
    let pool = MemPool::new(gpu0)?;
    pool.set_access(gpu1, PoolAccess::ReadWrite)?;
    let n = 1 << 20;
    let mut x = DeviceBuffer::new_in(&pool, &s0, n)?;
    x.copy_from_slice(&s0, &vec![1.5f32; n])?;
    let mut y = DeviceBuffer::<f32, _>::new(&s1, n)?;
    // SAFETY: the kernel reads `x`'s n floats (GPU 1 may: the pool's access) and writes `y`'s.
    unsafe { SCALE.launch(&s1, &LaunchConfig::new(n.div_ceil(256) as u32, 256), (&x, &mut y, 2.0, n as u32))? };
    // A peer copy of GPU 1's result into GPU 0's buffer, on GPU 0's stream.
    x.copy_from(&s0, &y)?;
    assert!(x.to_vec()?.iter().all(|&value| value == 3.0));
    println!("GPU 1 scaled GPU 0's buffer in place through peer access; the result copied back to GPU 0");
    Ok(())
}
