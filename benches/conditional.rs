//! The conditional-node benchmark: a loop of N iterations of a one-thread kernel that counts
//! down (`kernels/conditional_kernels.cu`), run four ways in this one process, interleaved:
//!
//! * **graph while**: one launch of a graph whose while node repeats the countdown kernel
//!   until the kernel clears the condition (`cuda_stream::conditional`), then one synchronize;
//! * **host loop, mapped flag**: the host launches the step kernel, synchronizes the stream and
//!   reads the kernel's "keep going" flag from mapped pinned memory, N times;
//! * **host loop, copy back**: the same, reading the flag with a device-to-host copy
//!   (`DeviceBuffer::copy_to_slice`, which waits for it);
//! * **unrolled graph**: a captured graph of N step kernels, no decision at all: what N kernels
//!   cost inside one graph launch, the floor of the while node.
//!
//! Each way starts by resetting the counter with one kernel (inside the graph, or launched by
//! the host loop), and every loop's result is checked (the counter reaches 0; the while ran N
//! times). Prints a table of medians and min..max of 7 repetitions, per loop and per
//! iteration, and writes it as JSON to `$BENCH_OUT/bench-conditional.json` (default
//! `target/`). `--quick` runs fewer loops, for smoke tests.

use cuda_stream::conditional::ConditionHandle;
use cuda_stream::{Device, DeviceBuffer, Graph, GraphExec, LaunchConfig, Stream, StreamOptions, capture, check, sys};
use cuda_stream_tests::Stats;
use cuda_stream_tests::bench::{time, write_json};
use std::ffi::c_void;

cuda_stream::kernel! {
    /// One while iteration: `*runs += 1`, `*counter -= 1`, condition = `*counter > 0`.
    static COUNTDOWN = fn cs_cond_countdown(handle: ConditionHandle, counter: *mut u32, runs: *mut u32);
    /// `*target = value`.
    static STORE = fn cs_cond_store(target: *mut u32, value: u32);
    /// One host-loop step: `*counter -= 1`, `*keep_going = *counter > 0`.
    static STEP = fn cs_cond_step(counter: *mut u32, keep_going: *mut u32);
}

const REPETITIONS: usize = 7;

/// One `u32` of mapped pinned host memory that kernels write and the host reads.
struct MappedWord {
    host: *mut u32,
    device: *mut u32,
}

impl MappedWord {
    fn new() -> MappedWord {
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; CUDA's flag.
        check(unsafe { sys::cudaHostAlloc(&mut host, 4, sys::cudaHostAllocMapped) }, "cudaHostAlloc").unwrap();
        let mut device: *mut c_void = std::ptr::null_mut();
        // SAFETY: `host` came from cudaHostAlloc with the mapped flag.
        check(unsafe { sys::cudaHostGetDevicePointer(&mut device, host, 0) }, "cudaHostGetDevicePointer").unwrap();
        MappedWord { host: host.cast(), device: device.cast() }
    }

    fn read(&self) -> u32 {
        // SAFETY: a live u32 of pinned memory; the kernel that writes it has completed (the
        // stream was synchronized).
        unsafe { std::ptr::read_volatile(self.host) }
    }
}

impl Drop for MappedWord {
    fn drop(&mut self) {
        // SAFETY: every kernel that used it was synchronized; freed once.
        let _ = unsafe { sys::cudaFreeHost(self.host.cast()) };
    }
}

/// One way to run the loop, once.
type Way<'a> = Box<dyn FnMut() + 'a>;

/// The four ways, in the order of the table.
const WAYS: [&str; 4] = ["graph while", "host loop, mapped flag", "host loop, copy back", "unrolled graph"];

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let device = match Device::count() {
        Ok(count) if count > 0 => Device::new(0).unwrap(),
        other => {
            if std::env::var("CUDA_STREAM_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("a GPU is required (CUDA_STREAM_REQUIRE_GPU=1): {other:?}");
            }
            println!("SKIPPED conditional benchmark: no usable CUDA GPU ({other:?})");
            return;
        }
    };
    if !cuda_stream_tests::KERNELS_BUILT {
        println!("SKIPPED conditional benchmark: the test kernels were not built (the toolkit has no nvcc)");
        return;
    }
    for kernel in [COUNTDOWN.attributes(device), STORE.attributes(device), STEP.attributes(device)] {
        kernel.expect("the conditional kernels load");
    }
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let one = LaunchConfig::new(1, 1);
    let mut counter = DeviceBuffer::<u32, _>::zeroed(&stream, 1).unwrap();
    let mut runs = DeviceBuffer::<u32, _>::zeroed(&stream, 1).unwrap();
    let mut device_flag = DeviceBuffer::<u32, _>::zeroed(&stream, 1).unwrap();
    let (counter_ptr, runs_ptr, device_flag_ptr) = (counter.as_mut_ptr(), runs.as_mut_ptr(), device_flag.as_mut_ptr());
    let mapped = MappedWord::new();

    println!(
        "conditional benchmark on {} (driver {}), {REPETITIONS} repetitions: µs per loop of N iterations \
         (ns per iteration), median and min..max",
        device.name().unwrap(),
        cuda_stream::driver_version().unwrap()
    );
    let iteration_counts: &[u32] = if quick { &[10, 100] } else { &[1, 10, 100, 1000, 10_000] };
    let mut json = Vec::new();
    for &n in iteration_counts {
        // The while graph: reset, then repeat the countdown while it says so.
        let mut graph = Graph::new(device).unwrap();
        {
            let mut root = graph.builder();
            let keep_going = root.condition(Some(1)).unwrap();
            // SAFETY: `counter` and `runs` hold one u32 each and outlive every launch.
            let reset = unsafe { root.add_kernel(&STORE, &one, (counter_ptr, n), &[]) }.unwrap();
            let (_, mut body) = root.add_while(&keep_going, &[reset]).unwrap();
            // SAFETY: as above.
            unsafe { body.add_kernel(&COUNTDOWN, &one, (keep_going.handle(), counter_ptr, runs_ptr), &[]) }.unwrap();
        }
        let while_exec = graph.instantiate().unwrap();
        // The unrolled graph: reset, then n steps, captured.
        let unrolled_exec: GraphExec = {
            let filling = stream.begin_capture(capture::ThreadLocal).unwrap();
            // SAFETY: as above; `device_flag` holds one u32.
            unsafe {
                STORE.launch(&stream, &one, (counter_ptr, n)).unwrap();
                for _ in 0..n {
                    STEP.launch(&stream, &one, (counter_ptr, device_flag_ptr)).unwrap();
                }
            }
            filling.end().unwrap().instantiate().unwrap()
        };
        while_exec.upload(&stream).unwrap();
        unrolled_exec.upload(&stream).unwrap();

        // Checked once: the while ran its body n times, and each way leaves the counter at 0.
        runs.fill_bytes(&stream, 0).unwrap();
        while_exec.launch(&stream).unwrap();
        let (ran, left) = (runs.to_vec().unwrap()[0], counter.to_vec().unwrap()[0]);
        assert_eq!((ran, left), (n, 0), "the while ran {ran} times for {n} and left the counter at {left}");

        let graph_loop = || {
            while_exec.launch(&stream).unwrap();
            stream.synchronize().unwrap();
        };
        let host_mapped = || {
            // SAFETY: as above; `mapped` is one u32 of mapped memory.
            unsafe { STORE.launch(&stream, &one, (counter_ptr, n)) }.unwrap();
            let mut steps = 0;
            loop {
                // SAFETY: as above.
                unsafe { STEP.launch(&stream, &one, (counter_ptr, mapped.device)) }.unwrap();
                stream.synchronize().unwrap();
                steps += 1;
                if mapped.read() == 0 {
                    break;
                }
            }
            assert_eq!(steps, n, "the host loop on a mapped flag stopped after {steps} steps, not {n}");
        };
        let host_copy = || {
            // SAFETY: as above.
            unsafe { STORE.launch(&stream, &one, (counter_ptr, n)) }.unwrap();
            let mut steps = 0;
            let mut flag = [0u32];
            loop {
                // SAFETY: as above.
                unsafe { STEP.launch(&stream, &one, (counter_ptr, device_flag_ptr)) }.unwrap();
                device_flag.copy_to_slice(&stream, &mut flag).unwrap();
                steps += 1;
                if flag[0] == 0 {
                    break;
                }
            }
            assert_eq!(steps, n, "the host loop copying its flag back stopped after {steps} steps, not {n}");
        };
        let unrolled = || {
            unrolled_exec.launch(&stream).unwrap();
            stream.synchronize().unwrap();
        };
        let mut sides: [(Way<'_>, Vec<f64>); 4] = [
            (Box::new(graph_loop), Vec::new()),
            (Box::new(host_mapped), Vec::new()),
            (Box::new(host_copy), Vec::new()),
            (Box::new(unrolled), Vec::new()),
        ];
        // Enough loops per sample to last a few milliseconds on the host-loop sides.
        let loops = (if quick { 200 } else { 2_000 } / n as usize).max(3);
        for (run, _) in &mut sides {
            run();
        }
        for rep in 0..REPETITIONS {
            for turn in 0..sides.len() {
                let (run, samples) = &mut sides[(rep + turn) % sides.len()];
                samples.push(time(loops, &mut *run));
            }
        }
        let [graph_while, mapped_loop, copy_loop, unrolled_graph] = sides.map(|(_, samples)| Stats::of(samples));
        let all = [graph_while, mapped_loop, copy_loop, unrolled_graph];
        println!("N = {n} ({loops} loops per sample)");
        for (way, stats) in WAYS.iter().zip(&all) {
            println!(
                "  {way:<24} {:>10.1} µs  ({:>8.0} ns/iteration)  {:.1}..{:.1} µs",
                stats.median / 1e3,
                stats.median / f64::from(n),
                stats.min / 1e3,
                stats.max / 1e3
            );
        }
        let over = |host: &Stats| host.ratio(&graph_while);
        println!(
            "  host loop / graph while: {:.2} (mapped flag), {:.2} (copy back); graph while / unrolled: {:.2}",
            over(&mapped_loop).median,
            over(&copy_loop).median,
            graph_while.ratio(&unrolled_graph).median
        );
        let per_iteration = |stats: &Stats| {
            let n = f64::from(n);
            Stats { median: stats.median / n, min: stats.min / n, max: stats.max / n }.json()
        };
        json.push(format!(
            "{{\"iterations\":{n},\"loops_per_sample\":{loops},\"graph_while_ns\":{},\"host_mapped_flag_ns\":{},\
             \"host_copy_back_ns\":{},\"unrolled_graph_ns\":{},\"graph_while_per_iteration_ns\":{},\
             \"host_mapped_flag_per_iteration_ns\":{},\"host_copy_back_per_iteration_ns\":{},\
             \"unrolled_graph_per_iteration_ns\":{},\"host_mapped_flag_over_graph_while\":{},\
             \"host_copy_back_over_graph_while\":{},\"graph_while_over_unrolled\":{}}}",
            graph_while.json(),
            mapped_loop.json(),
            copy_loop.json(),
            unrolled_graph.json(),
            per_iteration(&graph_while),
            per_iteration(&mapped_loop),
            per_iteration(&copy_loop),
            per_iteration(&unrolled_graph),
            over(&mapped_loop).json_ratio(),
            over(&copy_loop).json_ratio(),
            graph_while.ratio(&unrolled_graph).json_ratio(),
        ));
    }
    let path = write_json("bench-conditional.json", &format!("[\n{}\n]\n", json.join(",\n")));
    println!("json: {}", path.display());
}

/// A ratio's JSON cell, with more digits than [`Stats::json`] gives.
trait RatioJson {
    fn json_ratio(&self) -> String;
}

impl RatioJson for Stats {
    fn json_ratio(&self) -> String {
        format!("{{\"median\":{:.4},\"min\":{:.4},\"max\":{:.4}}}", self.median, self.min, self.max)
    }
}
