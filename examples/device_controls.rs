//! Device controls, as NVIDIA's deviceQuery and a CUDA C++ program's start-up use them: the
//! schedule set before the device's context exists (`cudaSetDeviceFlags`), what the device is
//! (`cudaGetDeviceProperties`), its memory (`cudaMemGetInfo`), and a kernel opting in to more
//! than 48 KiB of dynamic shared memory (`cudaFuncSetAttribute`).
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/device_controls.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{DeviceBuffer, DeviceFlags, Error, LaunchConfig, Schedule, Stream, StreamOptions};
use std::time::Instant;

cuda_stream::kernel! {
    /// Fills `words` words of dynamic shared memory with their indices and sums them into
    /// `out[0]`.
    static SHARED_SUM = fn device_controls_shared_sum(out: *mut u64, words: u32);
    /// Each thread spins for `ns` nanoseconds.
    static SPIN = fn device_controls_spin(ns: u64);
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("device_controls") else { return Ok(()) };

    // First, before anything creates the device's context: threads that synchronize sleep
    // until the device signals, instead of spinning (a core saved while long kernels run).
    device.set_flags(DeviceFlags::schedule(Schedule::BlockingSync))?;
    println!("device 0 schedule: {:?} (set before its context exists)", device.flags()?.schedule);

    let properties = device.properties()?;
    let (major, minor) = properties.compute_capability;
    println!("{}: compute capability {major}.{minor}, {} SMs", properties.name, properties.multiprocessors);
    println!(
        "  {} GiB of memory, {} MiB of L2, {} KiB of shared memory per block ({} KiB opted in)",
        properties.total_memory >> 30,
        properties.l2_cache_bytes >> 20,
        properties.shared_memory_per_block >> 10,
        properties.shared_memory_per_block_optin >> 10
    );

    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    // The context exists now: its flags are set.
    match device.set_flags(DeviceFlags::schedule(Schedule::Spin)) {
        Err(Error::ContextActive { .. }) => println!("  set_flags after the context exists: refused"),
        other => println!("  set_flags after the context exists: {other:?}"),
    }

    let before = device.memory_info()?;
    let buffer = DeviceBuffer::<u8, _>::zeroed(&stream, 256 << 20)?;
    stream.synchronize()?;
    let during = device.memory_info()?;
    drop(buffer);
    println!("  free memory: {} MiB, then {} MiB with a 256 MiB buffer", before.free >> 20, during.free >> 20);

    // 96 KiB of dynamic shared memory (or what the device allows): above the default 48 KiB,
    // so the kernel opts in first.
    let bytes = (96 << 10).min(properties.shared_memory_per_block_optin);
    let words = (bytes / 4) as u32;
    SHARED_SUM.set_max_dynamic_shared_memory(device, bytes)?;
    let mut out = DeviceBuffer::<u64, _>::zeroed(&stream, 1)?;
    // SAFETY: one u64 on the stream's device; the configuration gives the kernel the `words`
    // words of dynamic shared memory it uses.
    unsafe { SHARED_SUM.launch(&stream, &LaunchConfig::new(1, 256).shared_bytes(bytes), (out.as_mut_ptr(), words))? };
    let sum = out.to_vec()?[0];
    let expected = u64::from(words) * u64::from(words - 1) / 2;
    println!("  a kernel with {} KiB of dynamic shared memory summed {sum} (expected {expected})", bytes >> 10);

    // A synchronize behind a 100 ms kernel: under blocking sync the thread sleeps meanwhile.
    SPIN.attributes(device)?;
    let start = Instant::now();
    // SAFETY: the kernel takes a number of nanoseconds.
    unsafe { SPIN.launch(&stream, &LaunchConfig::new(1, 32), (100_000_000,))? };
    stream.synchronize()?;
    println!("  waited {:.1} ms for a 100 ms kernel, asleep", start.elapsed().as_secs_f64() * 1e3);
    if sum != expected {
        eprintln!("the shared-memory sum is wrong");
        std::process::exit(1);
    }
    Ok(())
}
