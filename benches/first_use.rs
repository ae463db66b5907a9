//! The first use of a process, as NVIDIA's asyncAPI sample makes it: pinned and device memory
//! and two events made (untimed; the context with them), then, on the legacy stream, a record,
//! a host-to-device copy, a kernel launch, a device-to-host copy and a record, each timed in
//! the calling thread's CPU time. Each side runs in a fresh child process, the first time its
//! process makes these calls: C++ (`cs_floor_first_use` in `kernels/bench_floor.cu`) and this
//! crate, alternately, 7 times (3 with `--quick`). Prints the medians and min..max per call and
//! the crate's ratio to C++, and writes `$BENCH_OUT/bench-first_use.json`.

use cuda_stream::{BuiltinStream, Device, DeviceBuffer, Event, EventFlags, LaunchConfig, PinnedBuffer};
use cuda_stream_tests::Stats;
use cuda_stream_tests::bench::thread_cpu;

/// Runs one side in this process and prints its five CPU times: `--child rust` or `--child c++`.
const CHILD: &str = "--child";
/// The line a child prints its times on, in ns.
const STEPS: &str = "steps ";
/// The elements copied and incremented (asyncAPI's 16 Mi; a multiple of 256).
const ELEMENTS: usize = 16 << 20;
const NAMES: [&str; 5] = ["event record", "pinned H2D copy", "kernel launch", "pinned D2H copy", "event record (2nd)"];

unsafe extern "C" {
    /// `kernels/bench_floor.cu`: asyncAPI's five calls, the first time in this process, each
    /// in this thread's CPU time (ns) into `step_cpu_ns[0..5]`; returns the CUDA result.
    fn cs_floor_first_use(n: i32, step_cpu_ns: *mut f64) -> i32;
}

cuda_stream::kernel! {
    /// asyncAPI's kernel (`kernels/bench_floor.cu`): adds `value` to each element.
    static INCREMENT = fn cs_bench_increment(data: *mut i32, value: i32);
}

/// The crate's side: the same calls through this crate, each timed.
fn rust_side() -> cuda_stream::Result<[f64; 5]> {
    let device = Device::new(0)?;
    let legacy = BuiltinStream::legacy(device);
    let mut host = PinnedBuffer::<i32>::zeroed(ELEMENTS)?;
    let mut data = DeviceBuffer::<i32, _>::zeroed(&legacy, ELEMENTS)?;
    let (start, stop) = (Event::new(device, EventFlags::timing())?, Event::new(device, EventFlags::timing())?);
    device.synchronize()?;
    let config = LaunchConfig::new((ELEMENTS / 256) as u32, 256);
    let mut times = [0.0; 5];
    let mut timed = |step: usize, call: &mut dyn FnMut() -> cuda_stream::Result<()>| {
        let before = thread_cpu();
        let result = call();
        times[step] = (thread_cpu() - before).as_secs_f64() * 1e9;
        result
    };
    timed(0, &mut || legacy.record(&start))?;
    timed(1, &mut || data.copy_from_pinned(&legacy, &mut host))?;
    let pointer = data.as_mut_ptr();
    // SAFETY: `ELEMENTS` ints of device memory on the legacy stream, the buffer's home, which
    // lives until the copy back below has waited for the kernel.
    timed(2, &mut || unsafe { INCREMENT.launch(&legacy, &config, (pointer, 1)) })?;
    timed(3, &mut || data.copy_to_pinned(&legacy, &mut host))?;
    timed(4, &mut || legacy.record(&stop))?;
    stop.synchronize()?;
    assert!(host.as_slice()?.iter().all(|value| *value == 1), "every element incremented");
    Ok(times)
}

/// C++'s side.
fn cpp_side() -> [f64; 5] {
    let mut times = [0.0; 5];
    // SAFETY: five writable doubles; the count is a multiple of 256.
    let code = unsafe { cs_floor_first_use(ELEMENTS as i32, times.as_mut_ptr()) };
    assert_eq!(code, 0, "cs_floor_first_use: CUDA error {code}");
    times
}

/// Runs `side` in a fresh child process and reads its five times.
fn in_child(side: &str) -> Option<[f64; 5]> {
    let exe = std::env::current_exe().expect("the benchmark knows its path");
    let output = std::process::Command::new(exe).args([CHILD, side]).output().expect("the benchmark can start itself");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|line| line.strip_prefix(STEPS));
    let times: Vec<f64> = line?.split_whitespace().filter_map(|value| value.parse().ok()).collect();
    if !output.status.success() || times.len() != 5 {
        println!("the {side} child failed: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    Some([times[0], times[1], times[2], times[3], times[4]])
}

fn main() -> cuda_stream::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(side) = args.iter().position(|arg| arg == CHILD).and_then(|at| args.get(at + 1)) {
        let times = if side == "rust" { rust_side()? } else { cpp_side() };
        println!("{STEPS}{}", times.map(|ns| ns.to_string()).join(" "));
        return Ok(());
    }
    if cuda_stream::testing::device_or_skip("first_use benchmark").is_none() {
        return Ok(());
    }
    let reps = if args.iter().any(|arg| arg == "--quick") { 3 } else { 7 };
    let (mut cpp, mut rust) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        cpp.extend(in_child("c++"));
        rust.extend(in_child("rust"));
    }
    if cpp.is_empty() || rust.is_empty() {
        println!("no samples");
        std::process::exit(1);
    }
    println!("first use in a process, asyncAPI's calls on the legacy stream: CPU time, {reps} processes each side");
    println!("  {:<20} {:>22} {:>22} {:>8}", "call", "C++ (us)", "cuda-stream (us)", "ratio");
    let mut json = Vec::new();
    let total = |samples: &[[f64; 5]]| -> Vec<f64> { samples.iter().map(|times| times.iter().sum()).collect() };
    let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = (0..5)
        .map(|step| {
            let pick = |samples: &[[f64; 5]]| samples.iter().map(|times| times[step]).collect::<Vec<f64>>();
            (NAMES[step].to_string(), pick(&cpp), pick(&rust))
        })
        .collect();
    rows.push(("all five".to_string(), total(&cpp), total(&rust)));
    for (name, cpp, rust) in rows {
        let (cpp, rust) =
            (Stats::of(cpp.iter().map(|ns| ns / 1e3).collect()), Stats::of(rust.iter().map(|ns| ns / 1e3).collect()));
        let ratio = rust.median / cpp.median;
        println!(
            "  {name:<20} {:>9.1} ({:>5.0}..{:>5.0}) {:>9.1} ({:>5.0}..{:>5.0}) {ratio:>8.2}",
            cpp.median, cpp.min, cpp.max, rust.median, rust.min, rust.max
        );
        json.push(format!(
            "{{\"name\":\"{name}\",\"unit\":\"us\",\"cpp_median\":{:.3},\"rust_median\":{:.3},\"rust_min\":{:.3},\"rust_max\":{:.3},\"ratio\":{ratio:.3}}}",
            cpp.median, rust.median, rust.min, rust.max
        ));
    }
    let path = cuda_stream_tests::bench::write_json("bench-first_use.json", &format!("[\n{}\n]\n", json.join(",\n")));
    println!("json: {}", path.display());
    Ok(())
}
