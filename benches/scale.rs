//! The scale benchmark: what record, `wait_stream`, query, pool acquire + release and the
//! current-stream scope (`as_current` enter + exit) cost as the load grows, beside raw C++
//! under the same load, in this one process and run, interleaved (the order rotates every
//! repetition). Two loads:
//!
//! * **live streams** N = 1, 16, 256, 4,096: N streams exist (created up front) and one thread
//!   applies the operation round-robin over them: operation i records on stream i, makes stream
//!   i + 1 wait for stream i, queries stream i, or makes stream i current (the pool rows: a pool
//!   of N streams, all created);
//! * **threads** T = 1, 2, 4, 8, 16 (and 32 on a host with at least 32 cores): T threads, started
//!   together, each applying the operation to streams of its own (two for `wait_stream`, which
//!   alternates between them); the pool rows share one pool of T streams. Cost per operation
//!   per thread.
//!
//! The floors (`cs_scale_floor` in `kernels/bench_floor.cu`, C++ threads started the same way):
//! the runtime API loop; the driver API loop for record, wait and query; for the pool, a free list
//! of handles behind a `std::mutex` (what a typical C++ pool does); for the current stream, a
//! thread-local save/set/restore guard (the shape of PyTorch's `CUDAStreamGuard`).
//!
//! Each cell is the median of 7 repetitions (min..max beside it), after one discarded warm-up
//! run of every side. For each operation it prints growth, cost(load) / cost(1) on that axis,
//! for the C++ floors and for ours, and flags the rows where ours grows more than a floor does.
//! Writes `$BENCH_OUT/bench-scale.json` (default `target/`); `scripts/plot-benchmarks.py`
//! draws it. `--quick` runs a twentieth of the operations, for smoke tests.

use cuda_stream::{Device, Event, EventFlags, Stream, StreamOptions, StreamPool, sys};
use cuda_stream_tests::Stats;
use cuda_stream_tests::bench::{SpinBarrier, time, write_json};
use std::hint::black_box;
use std::time::Instant;

unsafe extern "C" {
    fn cs_scale_floor_has(op: i32, api: i32) -> i32;
    fn cs_scale_floor(
        op: i32,
        api: i32,
        streams: *const sys::cudaStream_t,
        per_thread: i32,
        events: *const sys::cudaEvent_t,
        iters: i32,
        threads: i32,
    ) -> f64;
}

/// The numbers of `enum ScaleOp` in `kernels/bench_floor.cu`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum ScaleOp {
    Record = 0,
    WaitStream = 1,
    Query = 2,
    Pool = 3,
    Current = 4,
}

impl ScaleOp {
    const ALL: [ScaleOp; 5] = [ScaleOp::Record, ScaleOp::WaitStream, ScaleOp::Query, ScaleOp::Pool, ScaleOp::Current];

    fn name(self) -> &'static str {
        match self {
            ScaleOp::Record => "event record",
            ScaleOp::WaitStream => "wait_stream",
            ScaleOp::Query => "query (idle)",
            ScaleOp::Pool => "pool acquire+release",
            ScaleOp::Current => "as_current enter+exit",
        }
    }

    /// What the C++ runtime column is for this operation.
    fn cpp_floor(self) -> &'static str {
        match self {
            ScaleOp::Record => "cudaEventRecord",
            ScaleOp::WaitStream => "cudaEventRecord + cudaStreamWaitEvent",
            ScaleOp::Query => "cudaStreamQuery",
            ScaleOp::Pool => "C++ std::mutex free list",
            ScaleOp::Current => "C++ thread-local guard",
        }
    }

    /// Operations per thread in one timed run with one thread; T threads run 1/T of it each.
    /// About 2 to 5 ms per run uncontended.
    fn iterations(self) -> usize {
        match self {
            ScaleOp::Record | ScaleOp::Query => 20_000,
            ScaleOp::WaitStream => 10_000,
            ScaleOp::Pool | ScaleOp::Current => 300_000,
        }
    }

    /// Streams each thread owns on the threads axis.
    fn streams_per_thread(self) -> usize {
        if self == ScaleOp::WaitStream { 2 } else { 1 }
    }
}

/// The numbers of `enum ScaleApi` in `kernels/bench_floor.cu`.
#[derive(Copy, Clone, Debug)]
enum Api {
    Runtime = 0,
    Driver = 1,
}

/// Which load grows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Axis {
    Streams,
    Threads,
}

impl Axis {
    fn name(self) -> &'static str {
        match self {
            Axis::Streams => "streams",
            Axis::Threads => "threads",
        }
    }
}

const REPETITIONS: usize = 7;
const LIVE_STREAMS: [usize; 4] = [1, 16, 256, 4_096];

/// What one timed run works on: `threads` threads, thread t owning `streams[t * per_thread..]`
/// and `events[t]`; for the pool rows, sharing `pool`, whose streams' handles the C++ pool gets.
#[derive(Copy, Clone)]
struct Work<'a> {
    op: ScaleOp,
    streams: &'a [Stream],
    /// The handles the C++ side works on: those of `streams`, or of the pool's streams.
    handles: &'a [sys::cudaStream_t],
    per_thread: usize,
    events: &'a [Event],
    pool: Option<&'a StreamPool>,
    threads: usize,
    iters: usize,
}

impl Work<'_> {
    /// The C++ floor on `api`: mean ns per operation per thread.
    fn floor(&self, api: Api) -> f64 {
        let events: Vec<sys::cudaEvent_t> = self.events.iter().map(Event::as_raw).collect();
        assert!(self.handles.len() >= self.threads * self.per_thread && events.len() >= self.threads);
        // SAFETY: `handles` holds `threads * per_thread` live streams and `events` `threads` live
        // events (checked above), alive until this returns: the C++ side joins its threads first.
        let ns = unsafe {
            cs_scale_floor(
                self.op as i32,
                api as i32,
                self.handles.as_ptr(),
                self.per_thread as i32,
                events.as_ptr(),
                self.iters as i32,
                self.threads as i32,
            )
        };
        assert!(ns >= 0.0, "the C++ floor of {} on {api:?} failed", self.op.name());
        ns
    }

    /// Ours: mean ns per operation per thread.
    fn ours(&self, device: Device) -> f64 {
        let (op, n, pool, iters, start) =
            (self.op, self.per_thread, self.pool, self.iters, SpinBarrier::new(self.threads));
        let total: f64 = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..self.threads)
                .map(|t| {
                    let own = self.streams.get(t * n..(t + 1) * n).unwrap_or_default();
                    let (event, start) = (&self.events[t], &start);
                    scope.spawn(move || ours_thread(op, own, event, pool, iters, start))
                })
                .collect();
            workers.into_iter().map(|worker| worker.join().expect("a benchmark thread panicked")).sum()
        });
        if matches!(self.op, ScaleOp::Record | ScaleOp::WaitStream) {
            device.synchronize().unwrap();
        }
        total / self.threads as f64
    }
}

/// One thread of [`Work::ours`], round-robin over its `own` streams (or on `pool`): one
/// operation before the start line, as the C++ threads do; ns per operation after it.
fn ours_thread(
    op: ScaleOp,
    own: &[Stream],
    event: &Event,
    pool: Option<&StreamPool>,
    iters: usize,
    start: &SpinBarrier,
) -> f64 {
    let n = own.len();
    let once = |i: usize| match op {
        ScaleOp::Record => own[i % n].record(event).unwrap(),
        ScaleOp::WaitStream => own[(i + 1) % n].wait_stream(&own[i % n]).unwrap(),
        ScaleOp::Query => drop(black_box(own[i % n].query().unwrap())),
        ScaleOp::Pool => drop(black_box(pool.expect("the pool rows have a pool").acquire().unwrap())),
        ScaleOp::Current => own[i % n].as_current(|| black_box(())),
    };
    once(0);
    start.wait();
    let mut i = 0;
    time(iters, || {
        once(i);
        i += 1;
    })
}

/// The sides of one row, in the order of the table.
const SIDES: [&str; 3] = ["C++ runtime", "C++ driver", "ours"];

/// One load point of one operation: each side's stats (`None` where the side has no loop).
struct Cell {
    op: ScaleOp,
    axis: Axis,
    load: usize,
    iters: usize,
    sides: [Option<Stats>; 3],
}

/// Measures every side of `work` REPETITIONS times, interleaved, after a warm-up run each.
fn measure(device: Device, axis: Axis, load: usize, work: Work<'_>) -> Cell {
    let has = |api: Api| {
        // SAFETY: a pure function of its arguments.
        unsafe { cs_scale_floor_has(work.op as i32, api as i32) != 0 }
    };
    let present = [has(Api::Runtime), has(Api::Driver), true];
    let run = |side: usize| match side {
        0 => work.floor(Api::Runtime),
        1 => work.floor(Api::Driver),
        _ => work.ours(device),
    };
    let mut samples: [Vec<f64>; 3] = Default::default();
    for side in (0..SIDES.len()).filter(|&side| present[side]) {
        run(side);
    }
    for rep in 0..REPETITIONS {
        for turn in 0..SIDES.len() {
            let side = (rep + turn) % SIDES.len();
            if present[side] {
                samples[side].push(run(side));
            }
        }
    }
    let sides = samples.map(|samples| (!samples.is_empty()).then(|| Stats::of(samples)));
    Cell { op: work.op, axis, load, iters: work.iters, sides }
}

/// A pool of `capacity` streams, every one created, and their handles (valid while the pool
/// lives; leased by no one while the benchmark runs either side).
fn full_pool(device: Device, capacity: usize) -> (StreamPool, Vec<sys::cudaStream_t>) {
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), capacity).unwrap();
    let leases: Vec<_> = (0..capacity).map(|_| pool.acquire().unwrap()).collect();
    let handles = leases.iter().map(|lease| lease.as_raw()).collect();
    drop(leases);
    (pool, handles)
}

/// `cell` over `base` (the same operation at load 1 on the same axis), side by side.
fn growth(cell: &Cell, base: &Cell) -> [Option<Stats>; 3] {
    std::array::from_fn(|side| Some(cell.sides[side]?.ratio(&base.sides[side]?)))
}

/// Whether ours grows more than the floor `side` does: `None` without that floor; with it, the
/// medians compared, and whether the spreads (min..max of the ratios) are apart too.
fn grows_more(growth: &[Option<Stats>; 3], side: usize) -> Option<(bool, bool)> {
    let (floor, ours) = (growth[side]?, growth[2]?);
    Some((ours.median > floor.median, ours.min > floor.max))
}

fn main() {
    let began = Instant::now();
    let quick = std::env::args().any(|arg| arg == "--quick");
    let scale = if quick { 20 } else { 1 };
    let Some(device) = cuda_stream_tests::gpu::example_device("scale benchmark") else { return };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let thread_counts: Vec<usize> = [1, 2, 4, 8, 16, 32].into_iter().filter(|&t| t < 32 || cores >= 32).collect();
    let max_threads = thread_counts[thread_counts.len() - 1];
    let name = device.name().unwrap();
    let driver = cuda_stream::driver_version().unwrap();
    println!(
        "scale benchmark on {name} (driver {driver}, {cores} CPU cores), {REPETITIONS} repetitions, \
         ns per operation (per thread)"
    );
    let events: Vec<Event> = (0..max_threads).map(|_| Event::new(device, EventFlags::default()).unwrap()).collect();
    let new_streams = |count: usize| -> Vec<Stream> {
        (0..count).map(|_| Stream::new(device, StreamOptions::non_blocking()).unwrap()).collect()
    };
    let raw = |streams: &[Stream]| -> Vec<sys::cudaStream_t> { streams.iter().map(|s| s.as_raw()).collect() };
    let mut cells = Vec::new();
    for &n in &LIVE_STREAMS {
        let streams = new_streams(n);
        let handles = raw(&streams);
        for op in ScaleOp::ALL.into_iter().filter(|&op| op != ScaleOp::Pool) {
            let iters = op.iterations() / scale;
            let work = Work {
                op,
                streams: &streams,
                handles: &handles,
                per_thread: n,
                events: &events,
                pool: None,
                threads: 1,
                iters,
            };
            cells.push(measure(device, Axis::Streams, n, work));
        }
        drop(streams);
        let (pool, handles) = full_pool(device, n);
        let iters = ScaleOp::Pool.iterations() / scale;
        let work = Work {
            op: ScaleOp::Pool,
            streams: &[],
            handles: &handles,
            per_thread: n,
            events: &events,
            pool: Some(&pool),
            threads: 1,
            iters,
        };
        cells.push(measure(device, Axis::Streams, n, work));
    }
    let streams = new_streams(2 * max_threads);
    let handles = raw(&streams);
    for &threads in &thread_counts {
        let (pool, pool_handles) = full_pool(device, threads);
        for op in ScaleOp::ALL {
            let iters = (op.iterations() / scale / threads).max(1);
            let work = match op {
                ScaleOp::Pool => Work {
                    op,
                    streams: &[],
                    handles: &pool_handles,
                    per_thread: 1,
                    events: &events,
                    pool: Some(&pool),
                    threads,
                    iters,
                },
                _ => Work {
                    op,
                    streams: &streams,
                    handles: &handles,
                    per_thread: op.streams_per_thread(),
                    events: &events,
                    pool: None,
                    threads,
                    iters,
                },
            };
            cells.push(measure(device, Axis::Threads, threads, work));
        }
    }

    let mut json = Vec::new();
    let show = |s: &Option<Stats>, digits: usize| s.map_or("-".to_string(), |s| format!("{:.digits$}", s.median));
    for op in ScaleOp::ALL {
        for axis in [Axis::Streams, Axis::Threads] {
            let rows: Vec<&Cell> = cells.iter().filter(|cell| cell.op == op && cell.axis == axis).collect();
            let base = rows[0];
            println!("\n{} by {} (C++ runtime column: {})", op.name(), axis.name(), op.cpp_floor());
            println!(
                "  {:>7} {:>9} {:>9} {:>9} {:>17}   {:>7} {:>7} {:>7}   flag: ours grows more than",
                axis.name(),
                "C++ rt",
                "C++ drv",
                "ours",
                "ours min..max",
                "C++ ×",
                "drv ×",
                "ours ×"
            );
            for cell in rows {
                let growth = growth(cell, base);
                let ours = cell.sides[2].expect("ours always runs");
                let mut flags = Vec::new();
                for (side, floor) in [(0, "C++"), (1, "driver")] {
                    if let Some((true, apart)) = grows_more(&growth, side) {
                        flags.push(format!(
                            "{floor}{}",
                            if apart { " (beyond the spreads)" } else { " (within the spreads)" }
                        ));
                    }
                }
                println!(
                    "  {:>7} {:>9} {:>9} {:>9.1} {:>17}   {:>7} {:>7} {:>7}   {}",
                    cell.load,
                    show(&cell.sides[0], 1),
                    show(&cell.sides[1], 1),
                    ours.median,
                    format!("{:.1}..{:.1}", ours.min, ours.max),
                    show(&growth[0], 2),
                    show(&growth[1], 2),
                    show(&growth[2], 2),
                    flags.join(", ")
                );
                let field = |s: &Option<Stats>| s.map_or("null".to_string(), |s| s.json());
                let ratio = |s: &Option<Stats>| s.map_or("null".to_string(), |s| format!("{:.4}", s.median));
                let more = |side| grows_more(&growth, side).map_or("null".to_string(), |(more, _)| more.to_string());
                json.push(format!(
                    "{{\"op\":\"{}\",\"axis\":\"{}\",\"load\":{},\"iterations\":{},\"cpp_floor\":\"{}\",\"cpp_ns\":{},\"driver_ns\":{},\"ours_ns\":{},\"cpp_growth\":{},\"driver_growth\":{},\"ours_growth\":{},\"ours_grows_more_than_cpp\":{},\"ours_grows_more_than_driver\":{}}}",
                    op.name(),
                    axis.name(),
                    cell.load,
                    cell.iters,
                    op.cpp_floor(),
                    field(&cell.sides[0]),
                    field(&cell.sides[1]),
                    field(&cell.sides[2]),
                    ratio(&growth[0]),
                    ratio(&growth[1]),
                    ratio(&growth[2]),
                    more(0),
                    more(1)
                ));
            }
        }
    }
    let seconds = began.elapsed().as_secs_f64();
    let path = write_json(
        "bench-scale.json",
        &format!(
            "{{\"benchmark\":\"scale\",\"device\":{name:?},\"driver\":{driver},\"cores\":{cores},\"repetitions\":{REPETITIONS},\"quick\":{quick},\"seconds\":{seconds:.1},\"rows\":[\n{}\n]}}\n",
            json.join(",\n")
        ),
    );
    println!("\njson: {}", path.display());
    println!("took {seconds:.1} s");
}
