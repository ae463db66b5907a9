//! The effects streams exist for, measured on the GPU: overlap of independent streams, priority
//! under a saturating backlog, the stream pool in a fork/join pipeline, and where overlap stops
//! for lack of hardware queues (at this process's `CUDA_DEVICE_MAX_CONNECTIONS`, then in a
//! child process of this benchmark started with 32), and what waiting for an event costs:
//! `Event::synchronize` beside C++'s `cudaEventSynchronize`, on the wall and in CPU time, for
//! each device schedule flag (a child process each: the flag is set before the context
//! exists). Prints tables (medians and min..max of 7 repetitions) and writes
//! `$BENCH_OUT/bench-effects.json`. `--quick` runs fewer repetitions.

use cuda_stream::{BuiltinStream, Device, Event, EventFlags, Stream, StreamOptions, StreamPool, StreamRef, sys};
use cuda_stream_tests::bench::thread_cpu;
use cuda_stream_tests::{Stats, TagLog, poll_until};
use std::time::{Duration, Instant};

/// Runs only the hardware-queue section, and prints its JSON rows behind this prefix for the
/// parent process to collect.
const QUEUES_CHILD: &str = "--queues-child";
/// Runs only the event-synchronize section, under the device schedule flag that follows.
const SYNC_CHILD: &str = "--sync-child";
const JSON_ROW: &str = "json-row ";

fn repeat(reps: usize, mut sample: impl FnMut() -> f64) -> Stats {
    sample(); // warm-up
    Stats::of((0..reps).map(|_| sample()).collect())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Prints one table row and keeps it as a JSON object.
fn row(json: &mut Vec<String>, name: &str, unit: &str, s: &Stats) {
    println!("  {name:<58} {:>9.3} {unit}  ({:.3}..{:.3})", s.median, s.min, s.max);
    json.push(format!(
        "{{\"name\":\"{name}\",\"unit\":\"{unit}\",\"median\":{:.4},\"min\":{:.4},\"max\":{:.4}}}",
        s.median, s.min, s.max
    ));
}

/// Where overlap stops: N streams, each given 4 one-block kernels of 1 ms one stream after
/// another, against the same kernels on one stream. Streams share the context's hardware
/// queues, and a stream's second kernel, waiting for its first, holds its queue: expect an
/// overlap factor of about min(N, queues).
fn queue_overlap(device: Device, reps: usize, json: &mut Vec<String>) -> cuda_stream::Result<()> {
    let (kernels, spin) = (4, Duration::from_millis(1));
    let queues = Device::hardware_queues();
    println!("hardware queues: {queues} (CUDA_DEVICE_MAX_CONNECTIONS); N streams x {kernels} kernels of {spin:?}");
    for count in [8, 32, 128] {
        let streams: Vec<Stream> =
            (0..count).map(|_| Stream::new(device, StreamOptions::non_blocking())).collect::<Result<_, _>>()?;
        let time_ms = |spread: bool| -> f64 {
            device.synchronize().unwrap();
            let start = Instant::now();
            for stream in 0..count {
                for _ in 0..kernels {
                    cuda_stream_tests::spin(&streams[if spread { stream } else { 0 }], spin).unwrap();
                }
            }
            device.synchronize().unwrap();
            ms(start.elapsed())
        };
        let serial = repeat(reps, || time_ms(false));
        let spread = repeat(reps, || time_ms(true));
        row(json, &format!("{queues} queues, {count} streams: one stream (ms)"), "ms", &serial);
        row(json, &format!("{queues} queues, {count} streams: a stream each (ms)"), "ms", &spread);
        row(json, &format!("{queues} queues, {count} streams: overlap factor"), "x", &serial.ratio(&spread));
    }
    Ok(())
}

/// [`queue_overlap`] in a child process of this benchmark with `CUDA_DEVICE_MAX_CONNECTIONS=32`
/// (the driver reads it when it creates the context): prints its rows, keeps its JSON.
fn queue_overlap_at_32(json: &mut Vec<String>) {
    in_child(
        json,
        &[QUEUES_CHILD],
        &[("CUDA_DEVICE_MAX_CONNECTIONS", "32")],
        "the CUDA_DEVICE_MAX_CONNECTIONS=32 child",
    );
}

/// Runs this benchmark again as a child process with `args` (and `--quick` if given here) and
/// `env`: prints its lines, keeps the JSON rows it prints behind [`JSON_ROW`].
fn in_child(json: &mut Vec<String>, args: &[&str], env: &[(&str, &str)], what: &str) {
    let exe = std::env::current_exe().expect("the benchmark knows its path");
    let mut all: Vec<String> = std::env::args().skip(1).filter(|arg| arg == "--quick").collect();
    all.extend(args.iter().map(|arg| arg.to_string()));
    let child = std::process::Command::new(exe)
        .args(&all)
        .envs(env.iter().copied())
        .output()
        .expect("the benchmark can start itself");
    let stdout = String::from_utf8_lossy(&child.stdout);
    for line in stdout.lines() {
        match line.strip_prefix(JSON_ROW) {
            Some(object) => json.push(object.to_string()),
            None => println!("{line}"),
        }
    }
    if !child.status.success() {
        println!("{what} failed: {}", String::from_utf8_lossy(&child.stderr));
    }
}

/// The device schedule flags (`cudaSetDeviceFlags`), by name.
const SCHEDULES: [(&str, u32); 4] = [("auto", 0), ("spin", 1), ("yield", 2), ("blocking sync", 4)];

unsafe extern "C" {
    /// `kernels/bench_floor.cu`: cudaEventSynchronize on `event`, timed on the wall and in
    /// this thread's CPU time (ns); returns the CUDA result.
    fn cs_floor_event_synchronize(event: sys::cudaEvent_t, wall_ns: *mut f64, cpu_ns: *mut f64) -> i32;
}

/// In a child process whose device 0 was given `schedule` before its context existed: for a
/// default event and a blocking-sync one, the wall time and the CPU time of waiting for a
/// 2 ms kernel, through `Event::synchronize` and through C++'s `cudaEventSynchronize`
/// (alternately, on the same stream and the same event).
fn event_synchronize_costs(
    device: Device,
    schedule: &str,
    reps: usize,
    json: &mut Vec<String>,
) -> cuda_stream::Result<()> {
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let spin = Duration::from_millis(2);
    for (kind, flags) in [
        ("default event", EventFlags::default()),
        ("blocking-sync event", EventFlags { blocking_sync: true, ..EventFlags::default() }),
    ] {
        let event = Event::new(device, flags)?;
        // (wall, cpu) in µs of one wait: through the crate, or through C++.
        let wait = |cpp: bool| -> (f64, f64) {
            cuda_stream_tests::spin(&stream, spin).unwrap();
            stream.record(&event).unwrap();
            if cpp {
                let (mut wall, mut cpu) = (0.0, 0.0);
                // SAFETY: a live event of this device, recorded above; valid out-pointers.
                let code = unsafe { cs_floor_event_synchronize(event.as_raw(), &mut wall, &mut cpu) };
                assert_eq!(code, 0, "cudaEventSynchronize");
                (wall / 1e3, cpu / 1e3)
            } else {
                let (start, cpu) = (Instant::now(), thread_cpu());
                event.synchronize().unwrap();
                (start.elapsed().as_secs_f64() * 1e6, (thread_cpu() - cpu).as_secs_f64() * 1e6)
            }
        };
        let (mut rust, mut cpp) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            rust.push(wait(false));
            cpp.push(wait(true));
        }
        let stats =
            |samples: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| Stats::of(samples.iter().map(pick).collect());
        for (side, samples) in [("C++ cudaEventSynchronize", &cpp), ("Event::synchronize", &rust)] {
            row(json, &format!("{schedule}, {kind}: {side}, wall (us)"), "us", &stats(samples, |s| s.0));
            row(json, &format!("{schedule}, {kind}: {side}, CPU (us)"), "us", &stats(samples, |s| s.1));
        }
    }
    Ok(())
}

fn main() -> cuda_stream::Result<()> {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let reps = if quick { 3 } else { 7 };
    let args: Vec<String> = std::env::args().collect();
    let sync_child = args.iter().position(|arg| arg == SYNC_CHILD).and_then(|at| args.get(at + 1)).cloned();
    if let Some(schedule) = &sync_child {
        let flags = SCHEDULES.iter().find(|(name, _)| name == schedule).map_or(0, |(_, flags)| *flags);
        // Before the gate makes device 0's context: the flag is read when it is made.
        // SAFETY: a flag CUDA defines, for the current device (0), whose context does not exist yet.
        let code = unsafe { sys::cudaSetDeviceFlags(flags) };
        if code != sys::cudaError::cudaSuccess {
            // Without a GPU the gate below says so; with one the rows would not be this flag's.
            eprintln!("cudaSetDeviceFlags({flags}) failed: {code:?}");
            return Ok(());
        }
    }
    let Some(device) = cuda_stream_tests::gpu::example_device("effects benchmark") else { return Ok(()) };
    let mut json = Vec::new();
    if let Some(schedule) = sync_child {
        event_synchronize_costs(device, &schedule, reps, &mut json)?;
        json.iter().for_each(|object| println!("{JSON_ROW}{object}"));
        return Ok(());
    }
    if std::env::args().any(|arg| arg == QUEUES_CHILD) {
        queue_overlap(device, reps, &mut json)?;
        json.iter().for_each(|object| println!("{JSON_ROW}{object}"));
        return Ok(());
    }
    let sms = cuda_stream_tests::sm_count(device)?;
    let range = device.priority_range()?;
    println!("effects benchmark on {} ({sms} SMs), {reps} repetitions", device.name()?);
    let mut row = |name: &str, unit: &str, s: &Stats| row(&mut json, name, unit, s);

    // Overlap: 8 kernels, each 1/8 of the GPU's thread slots (1024-thread blocks, 2 per SM),
    // spinning 2 ms.
    let spin = Duration::from_millis(2);
    let blocks = (sms * 2).div_ceil(8);
    let streams: Vec<Stream> =
        (0..8).map(|_| Stream::new(device, StreamOptions::non_blocking())).collect::<Result<_, _>>()?;
    let legacy = BuiltinStream::legacy(device);
    let time_ms = |launch: &dyn Fn() -> cuda_stream::Result<()>| -> f64 {
        device.synchronize().unwrap();
        let start = Instant::now();
        launch().unwrap();
        device.synchronize().unwrap();
        ms(start.elapsed())
    };
    println!("overlap: 8 kernels of {blocks} blocks x 1024 threads, {spin:?} each");
    let one = repeat(reps, || time_ms(&|| cuda_stream_tests::spin_grid(&streams[0], spin, blocks, 1024)));
    let one_stream = repeat(reps, || {
        time_ms(&|| (0..8).try_for_each(|_| cuda_stream_tests::spin_grid(&streams[0], spin, blocks, 1024)))
    });
    let eight = repeat(reps, || {
        time_ms(&|| streams.iter().try_for_each(|s| cuda_stream_tests::spin_grid(s, spin, blocks, 1024)))
    });
    let serial = repeat(reps, || {
        time_ms(&|| (0..8).try_for_each(|_| cuda_stream_tests::spin_grid(&legacy, spin, blocks, 1024)))
    });
    row("1 kernel on 1 stream (ms)", "ms", &one);
    row("8 kernels on 1 non-blocking stream (ms)", "ms", &one_stream);
    row("8 kernels on 8 non-blocking streams (ms)", "ms", &eight);
    row("8 kernels on the legacy stream (ms)", "ms", &serial);
    row("overlap factor (legacy / 8 streams)", "x", &serial.ratio(&eight));
    row("overlap factor (1 stream / 8 streams)", "x", &one_stream.ratio(&eight));

    // Priority: a 1-thread kernel's latency while the lowest-priority stream holds a backlog that
    // fills every thread slot for 20 waves of 1 ms.
    let low = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent()))?;
    let equal = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent()))?;
    let high = Stream::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent()))?;
    let log = TagLog::new(4)?;
    let latency_ms = |stream: &Stream, backlog: bool| -> f64 {
        device.synchronize().unwrap();
        log.clear();
        if backlog {
            cuda_stream_tests::spin_grid(&low, Duration::from_millis(1), sms * 2 * 20, 1024).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let start = Instant::now();
        cuda_stream_tests::tag(stream, &log, 1, Duration::ZERO).unwrap();
        poll_until(Duration::from_secs(10), || log.count() == 1).expect("the short kernel ran");
        let latency = ms(start.elapsed());
        device.synchronize().unwrap();
        latency
    };
    println!("priority: range {range}; backlog {} blocks x 1024 threads x 1 ms on the lowest priority", sms * 2 * 20);
    row("short kernel, idle GPU (ms)", "ms", &repeat(reps, || latency_ms(&high, false)));
    row("short kernel, equal priority behind the backlog (ms)", "ms", &repeat(reps, || latency_ms(&equal, true)));
    row("short kernel, highest priority beside the backlog (ms)", "ms", &repeat(reps, || latency_ms(&high, true)));

    // Pool: 1,000 fork/join steps, each child stream created and destroyed, or leased.
    let parent = Stream::new(device, StreamOptions::non_blocking())?;
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 4)?;
    let step = |child: &StreamRef| -> cuda_stream::Result<()> {
        child.wait_stream(&parent)?;
        cuda_stream_tests::empty(child)?;
        parent.wait_stream(child)
    };
    let steps = 1_000;
    let per_step_us = |leased: bool| -> f64 {
        parent.synchronize().unwrap();
        let start = Instant::now();
        for _ in 0..steps {
            if leased {
                step(&pool.acquire().unwrap()).unwrap();
            } else {
                step(&Stream::new(device, StreamOptions::non_blocking()).unwrap()).unwrap();
            }
        }
        parent.synchronize().unwrap();
        start.elapsed().as_secs_f64() * 1e6 / steps as f64
    };
    println!("pool: {steps} fork/join steps (wait, empty kernel, join)");
    let created = repeat(reps, || per_step_us(false));
    let leased = repeat(reps, || per_step_us(true));
    row("per step, child stream created + destroyed (us)", "us", &created);
    row("per step, child stream leased from the pool (us)", "us", &leased);

    queue_overlap(device, reps, &mut json)?;
    queue_overlap_at_32(&mut json);

    println!("waiting for an event after a 2 ms kernel: wall and CPU time, per device schedule flag (a child each)");
    for (schedule, _) in SCHEDULES {
        in_child(&mut json, &[SYNC_CHILD, schedule], &[], &format!("the {schedule} child"));
    }

    let path = cuda_stream_tests::bench::write_json("bench-effects.json", &format!("[\n{}\n]\n", json.join(",\n")));
    println!("json: {}", path.display());
    Ok(())
}
