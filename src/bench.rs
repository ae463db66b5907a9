//! Shared by the benchmarks in `benches/`: timing loops, a start line for threads that must
//! contend, and where the JSON results go.

use cuda_stream::sys;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

unsafe extern "C" {
    /// Runs `iters` operations of `op` (`enum FloorOp` of `kernels/bench_floor.cu`, numbered as
    /// in `benches/overhead.rs`) in a raw C++ loop with streams `a`, `b` and event `e`
    /// (`priority` for the priority stream's creation); returns ns per operation, or -1 if a
    /// CUDA call failed.
    pub fn cs_floor(
        op: i32,
        iters: i32,
        a: sys::cudaStream_t,
        b: sys::cudaStream_t,
        e: sys::cudaEvent_t,
        priority: i32,
    ) -> f64;
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; the clock of the calling thread.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// ns per iteration of `body`, run `iters` times.
pub fn time(iters: usize, mut body: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..iters {
        body();
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

/// A start line that threads spin on, so that they leave it within a cache-line transfer of
/// each other: `std::sync::Barrier` parks them, and they wake tens of microseconds apart,
/// too far apart to contend in a short loop. `kernels/bench_floor.cu` starts the C++ threads
/// of the scale benchmark with the same kind. Single use.
#[derive(Debug)]
pub struct SpinBarrier {
    waiting: AtomicUsize,
}

impl SpinBarrier {
    /// A barrier that opens when `threads` threads wait on it.
    pub fn new(threads: usize) -> SpinBarrier {
        SpinBarrier { waiting: AtomicUsize::new(threads) }
    }

    /// Waits, yielding the core between looks, until every thread has arrived.
    pub fn wait(&self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        while self.waiting.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
    }
}

/// Writes `json` to `$BENCH_OUT/file` (default `target/`) and returns the path.
///
/// # Panics
/// If the file cannot be written: the benchmark's results would be lost.
pub fn write_json(file: &str, json: &str) -> PathBuf {
    let dir = std::env::var("BENCH_OUT").unwrap_or_else(|_| "target".to_string());
    let _ = std::fs::create_dir_all(&dir);
    let path = std::path::Path::new(&dir).join(file);
    std::fs::write(&path, json).expect("the JSON is writable");
    path
}
