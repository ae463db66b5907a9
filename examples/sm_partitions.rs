//! Keeping SMs free for urgent work: the device's SMs split into two partitions (green
//! contexts), a long batch job on one, a short latency-sensitive job on the other. The short
//! job runs at once on its own SMs instead of queueing behind the batch's blocks. Each
//! partition lives as long as its streams.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/sm_partitions.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{DeviceBuffer, Error, LaunchConfig, Stream};
use std::time::{Duration, Instant};

cuda_stream::kernel! {
    /// y = a * x + y over n elements.
    static SAXPY = fn sm_partitions_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("sm_partitions") else { return Ok(()) };
    // Two partitions of at least 16 SMs each; a split the device cannot make says what it can.
    let partitions = match device.split_sms(16, 2) {
        Ok(partitions) => partitions,
        Err(error @ Error::SmSplit { .. }) => {
            println!("no split here: {error}");
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    for (index, partition) in partitions.iter().enumerate() {
        println!("partition {index}: {} SMs", partition.sm_count());
    }
    let (batch, urgent): (Stream, Stream) = (partitions[0].stream(None)?, partitions[1].stream(None)?);
    drop(partitions); // the streams keep their partitions alive

    let n = 1 << 24;
    let x = DeviceBuffer::from_slice(&batch, &vec![1.0f32; n])?;
    let mut y = DeviceBuffer::<f32, _>::zeroed(&batch, n)?;
    let small_x = DeviceBuffer::from_slice(&urgent, &[2.0f32; 1024])?;
    let mut small_y = DeviceBuffer::<f32, _>::zeroed(&urgent, 1024)?;
    // One launch of each partition's first, empty (n = 0), so that neither loads the kernel
    // into its green context inside the timed part.
    for stream in [&batch, &urgent] {
        // SAFETY: n = 0: the kernel touches no memory.
        unsafe { SAXPY.launch(stream, &LaunchConfig::new(1, 32), (0.0, small_x.as_ptr(), small_y.as_mut_ptr(), 0))? };
    }
    batch.synchronize()?;
    urgent.synchronize()?;

    // A long batch: many passes over 64 MiB, on the first partition's SMs only.
    for _ in 0..200 {
        // SAFETY: `x` and `y` hold `n` f32 on the device and outlive the stream's work.
        unsafe { SAXPY.launch(&batch, &LaunchConfig::new(4096, 256), (1.0, x.as_ptr(), y.as_mut_ptr(), n as u32))? };
    }
    // The urgent job, on the other partition: it does not wait for the batch.
    let start = Instant::now();
    // SAFETY: 1024 f32 each, on the device, outliving the work.
    unsafe { SAXPY.launch(&urgent, &LaunchConfig::new(4, 256), (3.0, small_x.as_ptr(), small_y.as_mut_ptr(), 1024))? };
    urgent.synchronize()?;
    let urgent_took = start.elapsed();
    batch.synchronize()?;
    let batch_took = start.elapsed();
    println!("urgent job: {urgent_took:?}; batch: {batch_took:?}");
    assert_eq!(small_y.to_vec()?, vec![6.0; 1024]);
    assert_eq!(y.to_vec()?[0], 200.0);
    if urgent_took > batch_took / 2 && batch_took > Duration::from_millis(5) {
        println!("the urgent job waited for the batch: the partitions did not isolate them");
    }
    Ok(())
}
