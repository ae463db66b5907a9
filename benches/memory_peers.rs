//! Device memory in the peers' Rust crate, in its own process: cudarc's `CudaSlice` alloc+free
//! and its use on a second stream, with its event tracking on (its default) and off (its
//! `unsafe` opt-out, which leaves cross-stream ordering to the caller). The overhead
//! benchmark's memory rows are this crate's side and the raw C++ floor; PyTorch's side is
//! `scripts/bench-torch-memory.py`. Same sizes and iteration counts as `overhead`'s rows.
//!
//! Run: `cargo bench --bench memory_peers` (a GPU required; prints a table and writes JSON to
//! `$BENCH_OUT/bench-memory-peers.json`).

use cuda_stream_tests::Stats;
use cuda_stream_tests::bench::{time, write_json};
use cudarc::driver::{CudaContext, DevicePtr};
use std::hint::black_box;

const ALLOC_BYTES: usize = 4096;
const REPETITIONS: usize = 7;
const ITERS: usize = 20_000;

fn measure(mut run: impl FnMut(usize) -> f64) -> Stats {
    run(ITERS / 10);
    Stats::of((0..REPETITIONS).map(|_| run(ITERS)).collect())
}

fn main() {
    if cuda_stream::Device::count().unwrap_or(0) == 0 {
        println!("SKIPPED memory_peers: no usable CUDA GPU");
        return;
    }
    let context = CudaContext::new(0).expect("cudarc's context of device 0");
    let (home, other) = (context.new_stream().unwrap(), context.new_stream().unwrap());
    let mut rows = Vec::new();
    for tracking in [true, false] {
        if !tracking {
            // SAFETY: this benchmark orders nothing across streams itself; it only times calls.
            unsafe { context.disable_event_tracking() };
        }
        let label = if tracking { "event tracking on" } else { "event tracking off" };
        let alloc_free = measure(|n| {
            let t = time(n, || {
                // SAFETY: the memory is never read.
                drop(black_box(unsafe { home.alloc::<u8>(ALLOC_BYTES) }.unwrap()));
            });
            home.synchronize().unwrap();
            t
        });
        // SAFETY: as above.
        let slice = unsafe { home.alloc::<u8>(ALLOC_BYTES) }.unwrap();
        let use_elsewhere = measure(|n| {
            let t = time(n, || {
                let (address, record) = slice.device_ptr(&other);
                black_box(address);
                drop(record);
            });
            context.synchronize().unwrap();
            t
        });
        drop(slice);
        rows.push((format!("cudarc CudaSlice alloc+free 4 KiB ({label})"), alloc_free));
        rows.push((format!("cudarc CudaSlice use on a 2nd stream ({label})"), use_elsewhere));
    }
    println!("cudarc 0.19 on device 0, {REPETITIONS} repetitions, ns per operation");
    println!("{:<58} {:>9}   spread (min..max)", "operation", "median");
    let mut json = Vec::new();
    for (name, stats) in &rows {
        println!("{name:<58} {:>9.0}   {:.0}..{:.0}", stats.median, stats.min, stats.max);
        json.push(format!("{{\"op\":\"{name}\",\"ns\":{}}}", stats.json()));
    }
    let path = write_json("bench-memory-peers.json", &format!("{{\"rows\":[{}]}}", json.join(",")));
    println!("json: {}", path.display());
}
