//! Device memory beside its peers, in one process and one run: this crate's buffers, views and
//! pinned buffers, the raw C++ doing the same work by hand (`cs_floor_memory` and
//! `cs_floor` in `kernels/bench_floor.cu`), and cudarc's `CudaSlice` (its event tracking on,
//! its default, and off, its `unsafe` opt-out that leaves cross-stream ordering to the
//! caller), where cudarc has the row. PyTorch's side is `scripts/bench-torch-memory.py`; a
//! process's first enqueue of each kind is `benches/first_use.rs` (a fresh process each).
//!
//! Rows: alloc+free; a write and a read on a second stream (repeated: what a stream that uses
//! a buffer again pays; cudarc's `device_ptr_mut` and `device_ptr`); two readers on two streams; N pinned copies in flight (1, 16, 256) from one
//! pinned buffer into N views, then a wait; a chunked pipeline (16 chunks of 4 MiB over 4
//! streams: a copy in, a kernel, a copy back), end to end. Each side is timed in turn, the
//! first side rotating, 7 repetitions; medians and spreads. The raw side is timed twice where it
//! can be, through the runtime and through the driver's entry points (what cudarc calls).
//!
//! For a profiler: `MEMORY_PEERS_ONLY=text` runs only the rows whose name contains `text`,
//! `MEMORY_PEERS_SIDE=name` only the side of that name (the table then shows it alone), and
//! `MEMORY_PEERS_SCALE=n` makes each row's iterations `n` times as many.
//!
//! Run: `cargo bench --bench memory_peers` (a GPU required; prints a table and writes JSON to
//! `$BENCH_OUT/bench-memory-peers.json`).

use cuda_stream::{DeviceBuffer, Event, EventFlags, LaunchConfig, PinnedBuffer, Stream, StreamOptions, sys};
use cuda_stream_tests::Stats;
use cuda_stream_tests::bench::{cs_floor, time, write_json};
use cudarc::driver::{CudaContext, DevicePtr, DevicePtrMut};
use std::hint::black_box;

unsafe extern "C" {
    fn cs_floor_driver(op: i32, iters: i32, a: sys::cudaStream_t, b: sys::cudaStream_t, e: sys::cudaEvent_t) -> f64;
    fn cs_floor_memory(
        op: i32,
        iters: i32,
        count: i32,
        bytes: usize,
        blocks: i32,
        streams: *const sys::cudaStream_t,
        nstreams: i32,
    ) -> f64;
}

cuda_stream::kernel! {
    /// Adds 1 to each of a chunk's `n` bytes (`kernels/bench_floor.cu`).
    static CHUNK_ADD = fn cs_bench_chunk_add(chunk: *mut u8, n: u64);
    /// Takes three buffers and touches none (`kernels/bench_floor.cu`).
    static THREE_BUFFERS = fn cs_bench_three_buffers(a: *const u8, b: *const u8, c: *mut u8);
}

/// `cs_floor`'s operations used here (`enum FloorOp` of `kernels/bench_floor.cu`).
const FLOOR_RECORD: i32 = 7;
const FLOOR_RECORD_WAIT: i32 = 8;
const FLOOR_ALLOC_FREE: i32 = 16;

/// `cs_floor_memory`'s operations (`enum MemoryFloor`).
#[derive(Clone, Copy)]
enum MemoryFloor {
    TwoReaders = 0,
    PinnedInFlight = 1,
    Pipeline = 2,
    ThreeBuffers = 3,
}

const ALLOC_BYTES: usize = 4096;
const PINNED_COPY_BYTES: usize = 4096;
const PIPELINE_CHUNKS: usize = 16;
const PIPELINE_CHUNK_BYTES: usize = 4 << 20;
const PIPELINE_STREAMS: usize = 4;
const PIPELINE_BLOCKS: u32 = 64;
const REPETITIONS: usize = 7;

type Measure<'a> = Box<dyn FnMut(usize) -> f64 + 'a>;

/// One row: its sides (raw C++ through the runtime and through the driver, cudarc with
/// tracking on and off, this crate), any missing.
struct Row<'a> {
    name: String,
    iters: usize,
    sides: [Option<Measure<'a>>; 5],
}

const SIDES: [&str; 5] = ["C++", "C++ driver", "cudarc", "cudarc untracked", "cuda-stream"];
/// The index of this crate's side.
const OURS: usize = 4;

fn main() {
    let Some(device) = cuda_stream::testing::device_or_skip("memory_peers") else { return };
    let context = CudaContext::new(0).expect("cudarc's context of device 0");
    let (c_home, c_other, c_third) =
        (context.new_stream().unwrap(), context.new_stream().unwrap(), context.new_stream().unwrap());
    let untracked_context = CudaContext::new(0).expect("a second handle on device 0's primary context");
    let streams: Vec<Stream> =
        (0..PIPELINE_STREAMS).map(|_| Stream::new(device, StreamOptions::non_blocking()).unwrap()).collect();
    let raw_streams: &[sys::cudaStream_t] = &streams.iter().map(|stream| stream.as_raw()).collect::<Vec<_>>();
    let (home, other, third) = (&streams[0], &streams[1], &streams[2]);
    CHUNK_ADD.attributes(device).unwrap();
    let event = Event::new(device, EventFlags::default()).unwrap();
    let raw_event = event.as_raw();
    let floor = |op: i32| -> Measure<'_> {
        Box::new(move |iters| {
            // SAFETY: live streams and event; the floor makes and frees everything else itself.
            let ns = unsafe { cs_floor(op, iters as i32, raw_streams[0], raw_streams[1], raw_event, 0) };
            assert!(ns >= 0.0, "the C++ floor failed");
            ns
        })
    };
    // The same loop through the driver's entry points, `times` per operation of the row.
    let driver_floor = |op: i32, times: f64| -> Measure<'_> {
        Box::new(move |iters| {
            // SAFETY: live streams and event.
            let ns = unsafe { cs_floor_driver(op, iters as i32, raw_streams[0], raw_streams[1], raw_event) };
            assert!(ns >= 0.0, "the C++ driver floor failed");
            ns * times
        })
    };
    let memory_floor = |op: MemoryFloor, count: usize, bytes: usize| -> Measure<'_> {
        Box::new(move |iters| {
            // SAFETY: live streams; the floor makes and frees everything else itself.
            let ns = unsafe {
                cs_floor_memory(
                    op as i32,
                    iters as i32,
                    count as i32,
                    bytes,
                    PIPELINE_BLOCKS as i32,
                    raw_streams.as_ptr(),
                    raw_streams.len() as i32,
                )
            };
            assert!(ns >= 0.0, "the C++ floor failed");
            ns
        })
    };
    let sync = || device.synchronize().unwrap();

    // This crate's memory for the rows.
    let mut used_elsewhere = DeviceBuffer::<u8, _>::zeroed(home, ALLOC_BYTES).unwrap();
    let read_once = DeviceBuffer::<u8, _>::zeroed(home, ALLOC_BYTES).unwrap();
    let read_twice = DeviceBuffer::<u8, _>::zeroed(home, ALLOC_BYTES).unwrap();
    let mut three = DeviceBuffer::<u8, _>::zeroed(home, 3 * 1024).unwrap();
    let counts = [1usize, 16, 256];
    let mut in_flight: Vec<(DeviceBuffer<u8, &Stream>, PinnedBuffer<u8>)> = counts
        .iter()
        .map(|&count| {
            let device_side = DeviceBuffer::zeroed(home, PINNED_COPY_BYTES * count).unwrap();
            (device_side, PinnedBuffer::zeroed(PINNED_COPY_BYTES).unwrap())
        })
        .collect();
    let mut pipeline = DeviceBuffer::<u8, _>::zeroed(home, PIPELINE_CHUNK_BYTES * PIPELINE_CHUNKS).unwrap();
    let mut pipeline_host: Vec<PinnedBuffer<u8>> =
        (0..PIPELINE_CHUNKS).map(|_| PinnedBuffer::zeroed(PIPELINE_CHUNK_BYTES).unwrap()).collect();
    // cudarc's (one allocation per row: a write borrows its slice mutably).
    // SAFETY: the memory is never read.
    let mut c_written = unsafe { c_home.alloc::<u8>(ALLOC_BYTES) }.unwrap();
    // SAFETY: as above.
    let c_used = unsafe { c_home.alloc::<u8>(ALLOC_BYTES) }.unwrap();
    // SAFETY: as above.
    let c_read = unsafe { c_home.alloc::<u8>(ALLOC_BYTES) }.unwrap();
    // cudarc with its tracking off, on a context object of its own (the primary context too).
    // SAFETY: this benchmark orders nothing across streams through cudarc; it only times calls.
    unsafe { untracked_context.disable_event_tracking() };
    let (c_untracked_stream, c_untracked_other) =
        (untracked_context.new_stream().unwrap(), untracked_context.new_stream().unwrap());
    // SAFETY: the memory is never read.
    let mut c_untracked_written = unsafe { c_untracked_stream.alloc::<u8>(ALLOC_BYTES) }.unwrap();
    // SAFETY: as above.
    let c_untracked_used = unsafe { c_untracked_stream.alloc::<u8>(ALLOC_BYTES) }.unwrap();
    context.synchronize().unwrap();
    sync();

    let mut rows: Vec<Row<'_>> = vec![
        Row {
            name: "alloc+free 4 KiB".into(),
            iters: 20_000,
            sides: [
                Some(floor(FLOOR_ALLOC_FREE)),
                None,
                Some(Box::new(|n| {
                    let t = time(n, || {
                        // SAFETY: the memory is never read.
                        drop(black_box(unsafe { c_home.alloc::<u8>(ALLOC_BYTES) }.unwrap()));
                    });
                    c_home.synchronize().unwrap();
                    t
                })),
                Some(Box::new(|n| {
                    let t = time(n, || {
                        // SAFETY: the memory is never read.
                        drop(black_box(unsafe { c_untracked_stream.alloc::<u8>(ALLOC_BYTES) }.unwrap()));
                    });
                    c_untracked_stream.synchronize().unwrap();
                    t
                })),
                Some(Box::new(|n| {
                    let t = time(n, || drop(black_box(DeviceBuffer::<u8, _>::new(home, ALLOC_BYTES).unwrap())));
                    sync();
                    t
                })),
            ],
        },
        Row {
            name: "write on a 2nd stream, repeated (C++: record+wait)".into(),
            iters: 20_000,
            sides: [
                Some(floor(FLOOR_RECORD_WAIT)),
                Some(driver_floor(FLOOR_RECORD_WAIT, 1.0)),
                Some(Box::new(|n| {
                    let t = time(n, || {
                        let (address, record) = c_written.device_ptr_mut(&c_other);
                        black_box(address);
                        drop(record);
                    });
                    context.synchronize().unwrap();
                    t
                })),
                Some(Box::new(|n| {
                    let t = time(n, || {
                        let (address, record) = c_untracked_written.device_ptr_mut(&c_untracked_other);
                        black_box(address);
                        drop(record);
                    });
                    c_untracked_other.synchronize().unwrap();
                    t
                })),
                Some(Box::new(|n| {
                    let t = time(n, || {
                        used_elsewhere.use_on(other, |_, ptr| black_box(ptr)).unwrap();
                    });
                    sync();
                    t
                })),
            ],
        },
        Row {
            name: "read on a 2nd stream, repeated (C++: record+wait)".into(),
            iters: 20_000,
            sides: [
                Some(floor(FLOOR_RECORD_WAIT)),
                Some(driver_floor(FLOOR_RECORD_WAIT, 1.0)),
                Some(Box::new(|n| {
                    let t = time(n, || {
                        let (address, record) = c_used.device_ptr(&c_other);
                        black_box(address);
                        drop(record);
                    });
                    context.synchronize().unwrap();
                    t
                })),
                Some(Box::new(|n| {
                    let t = time(n, || {
                        let (address, record) = c_untracked_used.device_ptr(&c_untracked_other);
                        black_box(address);
                        drop(record);
                    });
                    c_untracked_other.synchronize().unwrap();
                    t
                })),
                Some(Box::new(|n| {
                    let view = read_once.slice(..).unwrap();
                    let t = time(n, || {
                        view.use_on(other, |_, ptr| black_box(ptr)).unwrap();
                    });
                    sync();
                    t
                })),
            ],
        },
        Row {
            name: "two readers on two streams (C++: 2 records)".into(),
            iters: 20_000,
            sides: [
                Some(memory_floor(MemoryFloor::TwoReaders, 0, 0)),
                Some(driver_floor(FLOOR_RECORD, 2.0)),
                Some(Box::new(|n| {
                    let t = time(n, || {
                        for stream in [&c_other, &c_third] {
                            let (address, record) = c_read.device_ptr(stream);
                            black_box(address);
                            drop(record);
                        }
                    });
                    context.synchronize().unwrap();
                    t
                })),
                None,
                Some(Box::new(|n| {
                    let view = read_twice.slice(..).unwrap();
                    let t = time(n, || {
                        view.use_on(other, |_, ptr| black_box(ptr)).unwrap();
                        view.use_on(third, |_, ptr| black_box(ptr)).unwrap();
                    });
                    sync();
                    t
                })),
            ],
        },
    ];
    rows.push(Row {
        name: "kernel of 3 buffers on a 2nd stream (C++: launch+record)".into(),
        iters: 20_000,
        sides: [
            Some(memory_floor(MemoryFloor::ThreeBuffers, 0, 0)),
            None,
            None,
            None,
            Some(Box::new(|n| {
                let config = LaunchConfig::new(1, 1);
                let (a, rest) = three.slice_mut(..).unwrap().split_at_mut(1024).unwrap();
                let (b, mut c) = rest.split_at_mut(1024).unwrap();
                let t = time(n, || {
                    // SAFETY: the kernel touches none of its buffers.
                    unsafe { THREE_BUFFERS.launch(other, &config, (&a, &b, &mut c)) }.unwrap();
                });
                sync();
                t
            })),
        ],
    });
    for (&count, (chunks, pinned)) in counts.iter().zip(&mut in_flight) {
        rows.push(Row {
            name: format!("pinned H2D 4 KiB x {count} in flight, per copy"),
            iters: (4096 / count).max(16),
            sides: [
                Some(memory_floor(MemoryFloor::PinnedInFlight, count, PINNED_COPY_BYTES)),
                None,
                None,
                None,
                Some(Box::new(move |n| {
                    let t = time(n, || {
                        for mut chunk in chunks.chunks_mut(PINNED_COPY_BYTES).unwrap() {
                            chunk.copy_from_pinned(home, pinned).unwrap();
                        }
                        pinned.as_mut_slice().unwrap();
                    });
                    t / count as f64
                })),
            ],
        });
    }
    rows.push(Row {
        name: format!("pipeline {PIPELINE_CHUNKS} x 4 MiB on {PIPELINE_STREAMS} streams, end to end"),
        iters: 20,
        sides: [
            Some(memory_floor(MemoryFloor::Pipeline, PIPELINE_CHUNKS, PIPELINE_CHUNK_BYTES)),
            None,
            None,
            None,
            Some(Box::new(|n| {
                time(n, || {
                    let config = LaunchConfig::new(PIPELINE_BLOCKS, 256);
                    for (k, (mut chunk, host)) in
                        pipeline.chunks_mut(PIPELINE_CHUNK_BYTES).unwrap().zip(pipeline_host.iter_mut()).enumerate()
                    {
                        let stream = &streams[k % PIPELINE_STREAMS];
                        chunk.copy_from_pinned(stream, host).unwrap();
                        // SAFETY: the kernel adds 1 to the chunk's bytes, no others.
                        unsafe { CHUNK_ADD.launch(stream, &config, (&mut chunk, PIPELINE_CHUNK_BYTES as u64)) }
                            .unwrap();
                        chunk.copy_to_pinned(stream, host).unwrap();
                    }
                    sync();
                })
            })),
        ],
    });
    if let Ok(only) = std::env::var("MEMORY_PEERS_ONLY") {
        rows.retain(|row| row.name.contains(&only));
    }
    if let Some(scale) = std::env::var("MEMORY_PEERS_SCALE").ok().and_then(|scale| scale.parse::<usize>().ok()) {
        for row in &mut rows {
            row.iters *= scale;
        }
    }
    if let Ok(side) = std::env::var("MEMORY_PEERS_SIDE") {
        for row in &mut rows {
            for (name, measure) in SIDES.iter().zip(&mut row.sides) {
                if *name != side {
                    *measure = None;
                }
            }
        }
    }
    println!(
        "device memory on {} beside its peers, {REPETITIONS} repetitions, ns per operation",
        device.name().unwrap()
    );
    print!("{:<52}", "operation");
    for side in SIDES {
        print!(" {side:>16}");
    }
    println!(" {:>9} {:>9}   spread of ours (min..max)", "ours/C++", "ours/drv");
    let mut json = Vec::new();
    for row in &mut rows {
        let mut samples: [Vec<f64>; 5] = Default::default();
        for side in row.sides.iter_mut().flatten() {
            side(row.iters / 10 + 1);
        }
        for rep in 0..REPETITIONS {
            for turn in 0..SIDES.len() {
                let index = (rep + turn) % SIDES.len();
                if let Some(side) = &mut row.sides[index] {
                    samples[index].push(side(row.iters));
                }
            }
        }
        let stats = samples.map(|samples| (!samples.is_empty()).then(|| Stats::of(samples)));
        print!("{:<52}", row.name);
        for side in &stats {
            print!(" {:>16}", side.as_ref().map_or("-".to_owned(), |s| format!("{:.0}", s.median)));
        }
        // This crate's side is missing only where MEMORY_PEERS_SIDE named another.
        match &stats[OURS] {
            Some(ours) => {
                let ratio = |raw: &Option<Stats>| {
                    raw.as_ref().map_or("-".to_owned(), |raw| format!("{:.3}", ours.median / raw.median))
                };
                println!(" {:>9} {:>9}   {:.0}..{:.0}", ratio(&stats[0]), ratio(&stats[1]), ours.min, ours.max);
            }
            None => println!(),
        }
        let cells: Vec<String> = SIDES
            .iter()
            .zip(&stats)
            .filter_map(|(side, stats)| stats.as_ref().map(|s| format!("\"{side}\":{}", s.json())))
            .collect();
        json.push(format!("{{\"op\":\"{}\",{}}}", row.name, cells.join(",")));
    }
    let path = write_json("bench-memory-peers.json", &format!("{{\"rows\":[{}]}}", json.join(",")));
    println!("json: {}", path.display());
}
