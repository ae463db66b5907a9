//! The overhead benchmark: each stream operation measured four ways in this one process,
//! interleaved: the raw C++ loop on the runtime API compiled by nvcc (`kernels/bench_floor.cu`,
//! the runtime floor), the same loop on the driver API's entry points where the operation has
//! one (the driver floor), raw FFI from Rust through cuda-stream-sys, and the safe cuda-stream
//! API. Prints a table (medians and
//! min..max of 7 repetitions) and writes it as JSON to `$BENCH_OUT/bench-overhead.json`
//! (default `target/`). `--quick` runs fewer operations, for smoke tests.

use cuda_stream::race::{Access, AccessKind, RaceMode, race_scope};
use cuda_stream::{
    Device, DeviceBuffer, Event, EventFlags, LaunchConfig, PinnedBuffer, SharedPinned, Stream, StreamOptions,
    StreamPool, capture, check, sys,
};
use cuda_stream_tests::Stats;
use cuda_stream_tests::bench::{cs_floor, time, write_json};
use std::ffi::c_void;
use std::hint::black_box;
use std::sync::Arc;

unsafe extern "C" {
    fn cs_floor_driver_has(op: i32) -> i32;
    fn cs_floor_driver(op: i32, iters: i32, a: sys::cudaStream_t, b: sys::cudaStream_t, e: sys::cudaEvent_t) -> f64;
    fn cs_bench_launch_empty(stream: sys::cudaStream_t) -> sys::cudaError_t;
    fn cs_bench_launch_halve_add(stream: sys::cudaStream_t, data: *mut f32, n: i32) -> sys::cudaError_t;
    fn cs_bench_noop_host_fn(data: *mut c_void);
}

cuda_stream::kernel! {
    /// `cs_empty_ex` of `kernels/launch_kernels.cu`: the typed launch's rows.
    static EMPTY = fn cs_empty_ex();
}

/// The numbers of `enum FloorOp` in `kernels/bench_floor.cu`.
#[derive(Copy, Clone)]
enum FloorOp {
    CreateDestroyDefault = 0,
    CreateDestroyNonBlocking = 1,
    CreateDestroyPriority = 2,
    QueryIdle = 3,
    SynchronizeIdle = 4,
    GetPriority = 5,
    EventCreateDestroy = 6,
    EventRecord = 7,
    RecordWaitEvent = 8,
    EventQuery = 9,
    LaunchEmpty = 10,
    LaunchSync = 11,
    HostFnRoundTrip = 12,
    GraphReplay100 = 13,
    DirectLaunch100 = 14,
    EventSynchronize = 15,
    AllocFree = 16,
    PinnedCopy = 17,
    PinnedCopyBack = 18,
    LaunchEx = 19,
    GraphReplayCopyKernelCopy = 20,
}

/// The bytes of one allocation and of one pinned copy, as in `kernels/bench_floor.cu`.
const ALLOC_BYTES: usize = 4096;
const PINNED_COPY_BYTES: usize = 64 << 20;
/// The floats of the copy-kernel-copy graph, as `kCopyKernelCopyFloats` in
/// `kernels/bench_floor.cu` (16 KiB each way: the launch's overhead dominates).
const COPY_KERNEL_COPY_FLOATS: usize = 4096;

const REPETITIONS: usize = 7;

type Measure<'a> = Box<dyn FnMut(usize) -> f64 + 'a>;

struct Op<'a> {
    name: &'static str,
    iters: usize,
    cpp: Option<Measure<'a>>,
    driver: Option<Measure<'a>>,
    ffi: Option<Measure<'a>>,
    safe: Measure<'a>,
    /// Ops per iteration that the reported ns divide by (100 for the 100-kernel rows).
    per_iter: f64,
}

fn ok(code: sys::cudaError_t) {
    assert_eq!(code, sys::cudaError::cudaSuccess, "{}", cuda_stream::CudaCode(code.0 as i32));
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let scale = if quick { 20 } else { 1 };
    let device = match Device::count() {
        Ok(count) if count > 0 => Device::new(0).unwrap(),
        other => {
            if std::env::var("CUDA_STREAM_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("a GPU is required (CUDA_STREAM_REQUIRE_GPU=1): {other:?}");
            }
            println!("SKIPPED overhead benchmark: no usable CUDA GPU ({other:?})");
            return;
        }
    };
    let range = device.priority_range().unwrap();
    let high = range.most_urgent();
    // Shared: the home of the copy-kernel-copy graph's buffer, which the graph holds.
    let a = Arc::new(Stream::new(device, StreamOptions::non_blocking()).unwrap());
    let b = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let event = Event::new(device, EventFlags::default()).unwrap();
    a.record(&event).unwrap();
    a.synchronize().unwrap();
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 64).unwrap();
    let (ra, rb, re) = (a.as_raw(), b.as_raw(), event.as_raw());
    // SAFETY (for every `unsafe` below): the raw handles are live for the whole benchmark, and
    // out-pointers are locals.
    let floor = |op: FloorOp| -> Measure<'_> {
        Box::new(move |iters| {
            // SAFETY: see above.
            let ns = unsafe { cs_floor(op as i32, iters as i32, ra, rb, re, high.value()) };
            assert!(ns >= 0.0, "the C++ floor failed");
            ns
        })
    };
    // The driver floor, for the operations that have one in `cs_floor_driver`.
    let driver_floor = |op: FloorOp| -> Option<Measure<'_>> {
        // SAFETY: a pure function of its argument.
        (unsafe { cs_floor_driver_has(op as i32) } != 0).then(|| -> Measure<'_> {
            Box::new(move |iters| {
                // SAFETY: see above.
                let ns = unsafe { cs_floor_driver(op as i32, iters as i32, ra, rb, re) };
                assert!(ns >= 0.0, "the driver floor failed");
                ns
            })
        })
    };
    // The safe graph for the graph rows.
    let graph_exec = {
        let capture = a.begin_capture(capture::ThreadLocal).unwrap();
        for _ in 0..100 {
            // SAFETY: see above.
            check(unsafe { cs_bench_launch_empty(ra) }, "launch").unwrap();
        }
        capture.end().unwrap().instantiate().unwrap()
    };
    graph_exec.upload(&a).unwrap();
    a.synchronize().unwrap();
    // The safe copy-kernel-copy graph, captured as the floor's (`CopyKernelCopy` in
    // `kernels/bench_floor.cu`): a copy out of page-locked memory into a buffer homed on `a`,
    // the kernel over the buffer, the copy back. The executable is all that holds the memory
    // once this block ends, and each launch orders itself with the memory's other uses.
    let copy_kernel_copy_exec = {
        let data = Arc::new(DeviceBuffer::<f32, _>::zeroed(Arc::clone(&a), COPY_KERNEL_COPY_FLOATS).unwrap());
        let host = Arc::new(SharedPinned::new(PinnedBuffer::<f32>::zeroed(COPY_KERNEL_COPY_FLOATS).unwrap()));
        a.synchronize().unwrap();
        let mut capture = a.begin_capture(capture::ThreadLocal).unwrap();
        capture.copy_from_pinned(&*a, (&data, ..), (&host, ..)).unwrap();
        capture
            .use_on(&*a, &data, |stream, data| {
                // SAFETY: `use_on`'s contract: the address is used only by this kernel, enqueued
                // on `stream` while it is part of the capture. The kernel reads and writes the
                // buffer's COPY_KERNEL_COPY_FLOATS floats (all of it, as `use_on` declares), which
                // the graph holds for every launch, each launch ordered with the buffer's other
                // uses.
                check(
                    unsafe { cs_bench_launch_halve_add(stream.as_raw(), data, COPY_KERNEL_COPY_FLOATS as i32) },
                    "launch",
                )
            })
            .unwrap()
            .unwrap();
        capture.copy_to_pinned(&*a, (&host, ..), (&data, ..)).unwrap();
        capture.end().unwrap().instantiate().unwrap()
    };
    copy_kernel_copy_exec.upload(&a).unwrap();
    a.synchronize().unwrap();
    // The buffers of the memory rows.
    let mut used_elsewhere = DeviceBuffer::<u8, _>::new(&a, ALLOC_BYTES).unwrap();
    let mut pinned = PinnedBuffer::<u8>::zeroed(PINNED_COPY_BYTES).unwrap();
    let mut pinned_target = DeviceBuffer::<u8, _>::new(&a, PINNED_COPY_BYTES).unwrap();
    let mut pinned_back = PinnedBuffer::<u8>::zeroed(PINNED_COPY_BYTES).unwrap();
    let pinned_source = DeviceBuffer::<u8, _>::zeroed(&a, PINNED_COPY_BYTES).unwrap();

    let mut ops: Vec<Op<'_>> = vec![
        Op {
            name: "create+destroy (default)",
            iters: 2_000,
            cpp: Some(floor(FloorOp::CreateDestroyDefault)),
            driver: driver_floor(FloorOp::CreateDestroyDefault),
            ffi: Some(Box::new(|n| {
                time(n, || {
                    let mut s = std::ptr::null_mut();
                    // SAFETY: see above.
                    unsafe {
                        ok(sys::cudaStreamCreate(&mut s));
                        ok(sys::cudaStreamDestroy(s));
                    }
                })
            })),
            safe: Box::new(|n| time(n, || drop(black_box(Stream::new(device, StreamOptions::default()).unwrap())))),
            per_iter: 1.0,
        },
        Op {
            name: "create+destroy (non-blocking)",
            iters: 2_000,
            cpp: Some(floor(FloorOp::CreateDestroyNonBlocking)),
            driver: driver_floor(FloorOp::CreateDestroyNonBlocking),
            ffi: Some(Box::new(|n| {
                time(n, || {
                    let mut s = std::ptr::null_mut();
                    // SAFETY: see above.
                    unsafe {
                        ok(sys::cudaStreamCreateWithFlags(&mut s, sys::cudaStreamNonBlocking));
                        ok(sys::cudaStreamDestroy(s));
                    }
                })
            })),
            safe: Box::new(|n| {
                time(n, || drop(black_box(Stream::new(device, StreamOptions::non_blocking()).unwrap())))
            }),
            per_iter: 1.0,
        },
        Op {
            name: "create+destroy (priority)",
            iters: 2_000,
            cpp: Some(floor(FloorOp::CreateDestroyPriority)),
            driver: driver_floor(FloorOp::CreateDestroyPriority),
            ffi: Some(Box::new(|n| {
                time(n, || {
                    let mut s = std::ptr::null_mut();
                    // SAFETY: see above.
                    unsafe {
                        ok(sys::cudaStreamCreateWithPriority(&mut s, sys::cudaStreamNonBlocking, high.value()));
                        ok(sys::cudaStreamDestroy(s));
                    }
                })
            })),
            safe: Box::new(|n| {
                let options = StreamOptions::non_blocking().with_priority(high);
                time(n, || drop(black_box(Stream::new(device, options).unwrap())))
            }),
            per_iter: 1.0,
        },
        Op {
            name: "pool acquire+release",
            iters: 100_000,
            cpp: None,
            driver: None,
            ffi: None,
            safe: Box::new(|n| time(n, || drop(black_box(pool.acquire().unwrap())))),
            per_iter: 1.0,
        },
        Op {
            name: "query (idle)",
            iters: 20_000,
            cpp: Some(floor(FloorOp::QueryIdle)),
            driver: driver_floor(FloorOp::QueryIdle),
            // SAFETY: see above.
            ffi: Some(Box::new(|n| time(n, || ok(unsafe { sys::cudaStreamQuery(ra) })))),
            safe: Box::new(|n| time(n, || assert!(a.query().unwrap()))),
            per_iter: 1.0,
        },
        Op {
            name: "synchronize (idle)",
            iters: 20_000,
            cpp: Some(floor(FloorOp::SynchronizeIdle)),
            driver: driver_floor(FloorOp::SynchronizeIdle),
            // SAFETY: see above.
            ffi: Some(Box::new(|n| time(n, || ok(unsafe { sys::cudaStreamSynchronize(ra) })))),
            safe: Box::new(|n| time(n, || a.synchronize().unwrap())),
            per_iter: 1.0,
        },
        Op {
            name: "get priority",
            iters: 50_000,
            cpp: Some(floor(FloorOp::GetPriority)),
            driver: driver_floor(FloorOp::GetPriority),
            ffi: Some(Box::new(|n| {
                time(n, || {
                    let mut p = 0;
                    // SAFETY: see above.
                    ok(unsafe { sys::cudaStreamGetPriority(ra, &mut p) });
                    black_box(p);
                })
            })),
            safe: Box::new(|n| {
                time(n, || {
                    black_box(a.priority().unwrap());
                })
            }),
            per_iter: 1.0,
        },
        Op {
            name: "event create+destroy",
            iters: 20_000,
            cpp: Some(floor(FloorOp::EventCreateDestroy)),
            driver: driver_floor(FloorOp::EventCreateDestroy),
            ffi: Some(Box::new(|n| {
                time(n, || {
                    let mut e = std::ptr::null_mut();
                    // SAFETY: see above.
                    unsafe {
                        ok(sys::cudaEventCreateWithFlags(&mut e, sys::cudaEventDisableTiming));
                        ok(sys::cudaEventDestroy(e));
                    }
                })
            })),
            safe: Box::new(|n| time(n, || drop(black_box(Event::new(device, EventFlags::default()).unwrap())))),
            per_iter: 1.0,
        },
        Op {
            name: "event record",
            iters: 20_000,
            cpp: Some(floor(FloorOp::EventRecord)),
            driver: driver_floor(FloorOp::EventRecord),
            ffi: Some(Box::new(|n| {
                // SAFETY: see above.
                let t = time(n, || ok(unsafe { sys::cudaEventRecord(re, ra) }));
                a.synchronize().unwrap();
                t
            })),
            safe: Box::new(|n| {
                let t = time(n, || a.record(&event).unwrap());
                a.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "event record, race detector on",
            iters: 20_000,
            cpp: Some(floor(FloorOp::EventRecord)),
            driver: driver_floor(FloorOp::EventRecord),
            ffi: None,
            safe: Box::new(|n| {
                let scope = race_scope(RaceMode::Report);
                let t = time(n, || a.record(&event).unwrap());
                a.synchronize().unwrap();
                drop(scope);
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "declared access, race detector on",
            iters: 20_000,
            cpp: None,
            driver: None,
            ffi: None,
            safe: Box::new(|n| {
                let scope = race_scope(RaceMode::Report);
                let access = Access::bytes(0x7e00_0000_0000, 256, AccessKind::Write);
                let t = time(n, || a.declare_accesses("bench", &[access]).unwrap());
                a.synchronize().unwrap();
                drop(scope);
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "record + wait_event",
            iters: 20_000,
            cpp: Some(floor(FloorOp::RecordWaitEvent)),
            driver: driver_floor(FloorOp::RecordWaitEvent),
            ffi: Some(Box::new(|n| {
                let t = time(n, || {
                    // SAFETY: see above.
                    unsafe {
                        ok(sys::cudaEventRecord(re, ra));
                        ok(sys::cudaStreamWaitEvent(rb, re, 0));
                    }
                });
                device.synchronize().unwrap();
                t
            })),
            safe: Box::new(|n| {
                let t = time(n, || {
                    a.record(&event).unwrap();
                    b.wait_event(&event).unwrap();
                });
                device.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "wait_stream (vs raw record+wait)",
            iters: 20_000,
            cpp: Some(floor(FloorOp::RecordWaitEvent)),
            driver: driver_floor(FloorOp::RecordWaitEvent),
            ffi: None,
            safe: Box::new(|n| {
                let t = time(n, || b.wait_stream(&a).unwrap());
                device.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "event query (done)",
            iters: 50_000,
            cpp: Some(floor(FloorOp::EventQuery)),
            driver: driver_floor(FloorOp::EventQuery),
            // SAFETY: see above.
            ffi: Some(Box::new(|n| time(n, || ok(unsafe { sys::cudaEventQuery(re) })))),
            safe: Box::new(|n| time(n, || assert!(event.query().unwrap()))),
            per_iter: 1.0,
        },
        Op {
            name: "event synchronize (done)",
            iters: 50_000,
            cpp: Some(floor(FloorOp::EventSynchronize)),
            driver: driver_floor(FloorOp::EventSynchronize),
            // SAFETY: see above.
            ffi: Some(Box::new(|n| time(n, || ok(unsafe { sys::cudaEventSynchronize(re) })))),
            safe: Box::new(|n| time(n, || event.synchronize().unwrap())),
            per_iter: 1.0,
        },
        Op {
            name: "launch empty kernel (queue full)",
            iters: 20_000,
            cpp: Some(floor(FloorOp::LaunchEmpty)),
            driver: driver_floor(FloorOp::LaunchEmpty),
            ffi: Some(Box::new(|n| {
                // SAFETY: see above.
                let t = time(n, || ok(unsafe { cs_bench_launch_empty(ra) }));
                device.synchronize().unwrap();
                t
            })),
            safe: Box::new(|n| {
                // SAFETY: see above.
                let t = time(n, || check(unsafe { cs_bench_launch_empty(a.as_raw()) }, "launch").unwrap());
                device.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "typed launch, against cudaLaunchKernelEx",
            iters: 20_000,
            cpp: Some(floor(FloorOp::LaunchEx)),
            driver: None,
            ffi: Some(Box::new(|n| {
                let t = time(n, || {
                    let config = sys::cudaLaunchConfig_t {
                        gridDim: sys::dim3 { x: 1, y: 1, z: 1 },
                        blockDim: sys::dim3 { x: 1, y: 1, z: 1 },
                        dynamicSmemBytes: 0,
                        stream: ra,
                        attrs: std::ptr::null_mut(),
                        numAttrs: 0,
                    };
                    let mut args = [std::ptr::null_mut::<c_void>()];
                    // SAFETY: see above; the empty kernel's stub takes no arguments.
                    ok(unsafe { sys::cudaLaunchKernelExC(&config, EMPTY.as_host_stub(), args.as_mut_ptr()) })
                });
                device.synchronize().unwrap();
                t
            })),
            safe: Box::new(|n| {
                let config = LaunchConfig::new(1, 1);
                // SAFETY: the empty kernel touches no memory.
                let t = time(n, || unsafe { EMPTY.launch(&a, &config, ()) }.unwrap());
                device.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "typed launch, against <<<>>>",
            iters: 20_000,
            cpp: Some(floor(FloorOp::LaunchEmpty)),
            driver: None,
            ffi: None,
            safe: Box::new(|n| {
                let config = LaunchConfig::new(1, 1);
                // SAFETY: the empty kernel touches no memory.
                let t = time(n, || unsafe { EMPTY.launch(&a, &config, ()) }.unwrap());
                device.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "launch + synchronize",
            iters: 5_000,
            cpp: Some(floor(FloorOp::LaunchSync)),
            driver: driver_floor(FloorOp::LaunchSync),
            ffi: Some(Box::new(|n| {
                time(n, || {
                    // SAFETY: see above.
                    unsafe {
                        ok(cs_bench_launch_empty(ra));
                        ok(sys::cudaStreamSynchronize(ra));
                    }
                })
            })),
            safe: Box::new(|n| {
                time(n, || {
                    // SAFETY: see above.
                    check(unsafe { cs_bench_launch_empty(a.as_raw()) }, "launch").unwrap();
                    a.synchronize().unwrap();
                })
            }),
            per_iter: 1.0,
        },
        Op {
            name: "host fn round trip (closure vs C fn)",
            iters: 2_000,
            cpp: Some(floor(FloorOp::HostFnRoundTrip)),
            driver: driver_floor(FloorOp::HostFnRoundTrip),
            ffi: Some(Box::new(|n| {
                time(n, || {
                    // SAFETY: see above; the C function ignores its argument.
                    unsafe {
                        ok(sys::cudaLaunchHostFunc(ra, Some(cs_bench_noop_host_fn), std::ptr::null_mut()));
                        ok(sys::cudaStreamSynchronize(ra));
                    }
                })
            })),
            safe: Box::new(|n| {
                time(n, || {
                    let token = black_box(7u64);
                    a.launch_host_fn(move || {
                        black_box(token);
                    })
                    .unwrap();
                    a.synchronize().unwrap();
                })
            }),
            per_iter: 1.0,
        },
        Op {
            name: "completion future round trip",
            iters: 2_000,
            cpp: Some(floor(FloorOp::HostFnRoundTrip)),
            driver: driver_floor(FloorOp::HostFnRoundTrip),
            ffi: None,
            safe: Box::new(|n| time(n, || cuda_stream_tests::block_on(a.completion()).unwrap())),
            per_iter: 1.0,
        },
        Op {
            name: "current stream: as_current enter+exit",
            iters: 1_000_000,
            cpp: None,
            driver: None,
            ffi: None,
            safe: Box::new(|n| time(n, || a.as_current(|| black_box(())))),
            per_iter: 1.0,
        },
        Op {
            name: "graph replay, per kernel of 100",
            iters: 1_000,
            cpp: Some(floor(FloorOp::GraphReplay100)),
            driver: driver_floor(FloorOp::GraphReplay100),
            ffi: None,
            safe: Box::new(|n| {
                time(n, || {
                    graph_exec.launch(&a).unwrap();
                    a.synchronize().unwrap();
                })
            }),
            per_iter: 100.0,
        },
        Op {
            name: "graph replay, copy-kernel-copy (captured)",
            iters: 2_000,
            cpp: Some(floor(FloorOp::GraphReplayCopyKernelCopy)),
            driver: driver_floor(FloorOp::GraphReplayCopyKernelCopy),
            ffi: None,
            safe: Box::new(|n| {
                time(n, || {
                    copy_kernel_copy_exec.launch(&a).unwrap();
                    a.synchronize().unwrap();
                })
            }),
            per_iter: 1.0,
        },
        Op {
            name: "direct launch, per kernel of 100",
            iters: 200,
            cpp: Some(floor(FloorOp::DirectLaunch100)),
            driver: driver_floor(FloorOp::DirectLaunch100),
            ffi: None,
            safe: Box::new(|n| {
                time(n, || {
                    for _ in 0..100 {
                        // SAFETY: see above.
                        check(unsafe { cs_bench_launch_empty(a.as_raw()) }, "launch").unwrap();
                    }
                    a.synchronize().unwrap();
                })
            }),
            per_iter: 100.0,
        },
        Op {
            name: "buffer alloc+free 4 KiB (stream-ordered)",
            iters: 20_000,
            cpp: Some(floor(FloorOp::AllocFree)),
            driver: None,
            ffi: None,
            safe: Box::new(|n| {
                let t = time(n, || drop(black_box(DeviceBuffer::<u8, _>::new(&a, ALLOC_BYTES).unwrap())));
                device.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "buffer use on a 2nd stream (vs record+wait)",
            iters: 20_000,
            cpp: Some(floor(FloorOp::RecordWaitEvent)),
            driver: driver_floor(FloorOp::RecordWaitEvent),
            ffi: None,
            safe: Box::new(|n| {
                let t = time(n, || used_elsewhere.use_on(&b, |_, _| ()).unwrap());
                device.synchronize().unwrap();
                t
            }),
            per_iter: 1.0,
        },
        Op {
            name: "pinned H2D 64 MiB + wait",
            iters: 100,
            cpp: Some(floor(FloorOp::PinnedCopy)),
            driver: None,
            ffi: None,
            safe: Box::new(|n| {
                time(n, || {
                    pinned_target.copy_from_pinned(&a, &mut pinned).unwrap();
                    // A host write waits for the copy out of the buffer (a read would not).
                    pinned.as_mut_slice().unwrap();
                })
            }),
            per_iter: 1.0,
        },
        Op {
            name: "pinned D2H 64 MiB + wait",
            iters: 100,
            cpp: Some(floor(FloorOp::PinnedCopyBack)),
            driver: None,
            ffi: None,
            safe: Box::new(|n| {
                time(n, || {
                    pinned_source.copy_to_pinned(&a, &mut pinned_back).unwrap();
                    pinned_back.as_slice().unwrap();
                })
            }),
            per_iter: 1.0,
        },
    ];

    println!(
        "overhead benchmark on {} (driver {}), {REPETITIONS} repetitions, ns per operation",
        device.name().unwrap(),
        cuda_stream::driver_version().unwrap()
    );
    println!(
        "{:<38} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}   spread safe (min..max)",
        "operation", "C++ rt", "C++ drv", "FFI", "safe", "safe/rt", "safe/drv"
    );
    let mut json = Vec::new();
    // One row's name (a part of it) alone, and more iterations of each, for a profile.
    if let Ok(only) = std::env::var("OVERHEAD_ONLY") {
        ops.retain(|op| op.name.contains(&only));
    }
    let more = std::env::var("OVERHEAD_SCALE").ok().and_then(|more| more.parse::<usize>().ok()).unwrap_or(1);
    for op in &mut ops {
        let iters = (op.iters * more / scale).max(10);
        let per_iter = op.per_iter;
        let mut sides: [(Option<&mut Measure<'_>>, Vec<f64>); 4] = [
            (op.cpp.as_mut(), Vec::new()),
            (op.driver.as_mut(), Vec::new()),
            (op.ffi.as_mut(), Vec::new()),
            (Some(&mut op.safe), Vec::new()),
        ];
        // Warm up every side once.
        for (measure, _) in &mut sides {
            if let Some(measure) = measure {
                measure(iters / 10 + 1);
            }
        }
        for rep in 0..REPETITIONS {
            // Interleave, rotating who goes first.
            for turn in 0..sides.len() {
                let (measure, samples) = &mut sides[(rep + turn) % 4];
                if let Some(measure) = measure {
                    samples.push(measure(iters) / per_iter);
                }
            }
        }
        let [cpp, driver, ffi, safe] = sides.map(|(_, samples)| (!samples.is_empty()).then(|| Stats::of(samples)));
        let safe = safe.expect("the safe side always runs");
        let show = |s: &Option<Stats>| s.as_ref().map_or("-".to_string(), |s| format!("{:.0}", s.median));
        let over = |floor: &Option<Stats>| floor.as_ref().map(|f| safe.median / f.median);
        let show_ratio = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.3}"));
        let (over_rt, over_drv) = (over(&cpp), over(&driver));
        println!(
            "{:<38} {:>8} {:>8} {:>8} {:>8.0} {:>9} {:>9}   {:.0}..{:.0}",
            op.name,
            show(&cpp),
            show(&driver),
            show(&ffi),
            safe.median,
            show_ratio(over_rt),
            show_ratio(over_drv),
            safe.min,
            safe.max
        );
        let field = |s: &Option<Stats>| s.as_ref().map_or("null".to_string(), Stats::json);
        let json_ratio = |r: Option<f64>| r.map_or("null".to_string(), |r| format!("{r:.4}"));
        json.push(format!(
            "{{\"op\":\"{}\",\"iterations\":{iters},\"cpp_ns\":{},\"driver_ns\":{},\"ffi_ns\":{},\"safe_ns\":{},\"safe_over_cpp\":{},\"safe_over_driver\":{}}}",
            op.name,
            field(&cpp),
            field(&driver),
            field(&ffi),
            field(&Some(safe)),
            json_ratio(over_rt),
            json_ratio(over_drv)
        ));
    }
    let path = write_json("bench-overhead.json", &format!("[\n{}\n]\n", json.join(",\n")));
    println!("json: {}", path.display());
}
