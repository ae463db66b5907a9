//! A stream that waits for the host, and reports back, through words in mapped host memory
//! (stream memory operations): each round, the stream waits until the host raises a "go"
//! word (`cuStreamWaitValue32`), runs its work, and writes a "done" word
//! (`cuStreamWriteValue32`) that the host polls. No event, no host function, no synchronize
//! between them; the host touches the words only through atomics. The same round again as one
//! batch (`cuStreamBatchMemOp`), and what the device supports.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/stream_mem_ops.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{BarrierScope, LaunchConfig, MappedWords, MemOp, MemOpSupport, Stream, StreamOptions, WaitValue};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const GO: usize = 0;
const DONE: usize = 1;

cuda_stream::kernel! {
    /// Each thread spins for `ns` nanoseconds: the stream's work of a round.
    static SPIN = fn stream_mem_ops_spin(ns: u64);
}

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("stream_mem_ops") else { return Ok(()) };
    println!("{:?}", MemOpSupport::of(device)?);
    // Loads the kernel now. CUDA's lazy loading would load it at its first launch, and a load
    // can wait for the device's work: here a stream parked on a "go" the host has not raised.
    SPIN.attributes(device)?;
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let words = MappedWords::<u32>::new(2)?;
    let (go, done) = (&words.words()[GO], &words.words()[DONE]);

    for round in 1..=3 {
        // Enqueued now; runs once the host says go.
        words.wait_value(&stream, GO, WaitValue::greater_or_equal(round))?;
        // Your kernels here: one block of 32 threads that spin for 5 ms.
        // SAFETY: the kernel takes a number of nanoseconds.
        unsafe { SPIN.launch(&stream, &LaunchConfig::new(1, 32), (5_000_000,))? };
        words.write_value(&stream, DONE, round)?;

        std::thread::sleep(Duration::from_millis(10));
        println!("round {round}: the stream is idle? {} (it waits for the host)", stream.query()?);
        let start = Instant::now();
        go.store(round, Ordering::Release);
        while done.load(Ordering::Acquire) < round {
            assert!(start.elapsed() < Duration::from_secs(5), "the stream never reported back");
            std::hint::spin_loop();
        }
        println!("round {round}: done {:?} after the go (the work itself takes 5 ms)", start.elapsed());
    }

    // The same round as one batch: wait, a barrier, the report.
    let round = 4;
    let batch = [
        MemOp::Wait { index: GO, wait: WaitValue::greater_or_equal(round) },
        MemOp::Barrier(BarrierScope::System),
        MemOp::Write { index: DONE, value: round },
    ];
    words.mem_ops(&stream, &batch)?;
    go.store(round, Ordering::Release);
    stream.synchronize()?;
    println!("batch: done = {}", done.load(Ordering::Acquire));
    // Dropping the words never waits for the stream: their memory is reused only once no
    // operation can touch it any more.
    Ok(())
}
