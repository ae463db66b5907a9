//! Concurrency stress: 16 threads of mixed operations on shared streams and events, then the
//! live-handle counts and device memory are back where they started.
//! `CUDA_STREAM_STRESS_OPS` sets the operations per thread (default 100,000).

use cuda_stream::{Device, Event, EventFlags, Stream, StreamOptions, StreamPool, StreamRef, sys};
use cuda_stream_tests::{Rng, gpu_or_skip};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const THREADS: usize = 16;

static SERIAL: Mutex<()> = Mutex::new(());

fn ops_per_thread() -> usize {
    std::env::var("CUDA_STREAM_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cuda_stream_tests::scaled(100_000, 100))
}

fn free_device_memory(device: Device) -> usize {
    let _current = device.make_current().unwrap();
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers.
    cuda_stream::check(unsafe { sys::cudaMemGetInfo(&mut free, &mut total) }, "cudaMemGetInfo").unwrap();
    free
}

#[test]
fn sixteen_threads_of_mixed_operations_leave_nothing_behind() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = (cuda_stream::live_streams(), cuda_stream::live_events(), cuda_stream::live_host_fns());
    let ops = ops_per_thread();
    {
        let streams: Vec<Stream> =
            (0..THREADS).map(|_| Stream::new(device, StreamOptions::non_blocking()).unwrap()).collect();
        let events: Vec<Event> = (0..THREADS).map(|_| Event::new(device, EventFlags::default()).unwrap()).collect();
        let pool = StreamPool::new(device, StreamOptions::non_blocking(), THREADS).unwrap();
        let (host_fns_run, host_fns_sent) = (Arc::new(AtomicUsize::new(0)), AtomicUsize::new(0));
        let failures = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for me in 0..THREADS {
                let (streams, events, pool, failures) = (&streams, &events, &pool, &failures);
                let (host_fns_run, host_fns_sent) = (&host_fns_run, &host_fns_sent);
                scope.spawn(move || {
                    let mut rng = Rng::new(me as u64 + 1);
                    let mine = &streams[me];
                    for i in 0..ops {
                        let other = (rng.next_u64() as usize) % THREADS;
                        let result = match rng.next_u64() % 8 {
                            0 => Stream::new(device, StreamOptions::non_blocking()).map(drop),
                            1 => pool.acquire().and_then(|lease| cuda_stream_tests::empty(&*lease)),
                            2 => mine.record(&events[me]).and_then(|()| streams[other].wait_event(&events[me])),
                            3 => mine.wait_stream(&streams[other]),
                            4 => {
                                let run = Arc::clone(host_fns_run);
                                host_fns_sent.fetch_add(1, Ordering::Relaxed);
                                mine.launch_host_fn(move || {
                                    run.fetch_add(1, Ordering::Relaxed);
                                })
                            }
                            5 => mine.as_current(|| StreamRef::with_current(device, |s| s.query().map(drop))),
                            6 => events[other].query().map(drop),
                            _ => cuda_stream_tests::empty(mine),
                        };
                        if let Err(error) = result {
                            failures.lock().unwrap().push(format!("thread {me} op {i}: {error}"));
                        }
                        if i % 1024 == 0 {
                            mine.synchronize().unwrap();
                        }
                    }
                });
            }
        });
        device.synchronize().unwrap();
        let failures = failures.into_inner().unwrap();
        assert!(failures.is_empty(), "{} failures, first: {:?}", failures.len(), failures.first());
        let settled = cuda_stream_tests::poll_until(std::time::Duration::from_secs(5), || {
            host_fns_run.load(Ordering::Relaxed) == host_fns_sent.load(Ordering::Relaxed)
        });
        assert!(settled.is_some(), "every host function ran");
        eprintln!("{THREADS} threads x {ops} operations: 0 failures, {} host functions", host_fns_sent.into_inner());
    }
    let after = (cuda_stream::live_streams(), cuda_stream::live_events(), cuda_stream::live_host_fns());
    assert_eq!(after, before, "(streams, events, closures) are back where they started");
}

#[test]
fn a_million_create_destroy_cycles_keep_device_memory() {
    let device = gpu_or_skip!();
    if cuda_stream_tests::skipped_under_sanitizer(
        "a_million_create_destroy_cycles_keep_device_memory",
        "the sanitizer allocates device memory of its own while it tracks the streams",
    ) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cycles = ops_per_thread() * 10;
    // Warm up the allocator's steady state, then measure.
    for _ in 0..1_000 {
        drop(Stream::new(device, StreamOptions::non_blocking()).unwrap());
    }
    device.synchronize().unwrap();
    let streams_before = cuda_stream::live_streams();
    // The free memory is the device's: other processes on the GPU move it. A leak loses memory
    // in every attempt; their noise seldom three times.
    let mut losses = Vec::new();
    for _attempt in 0..3 {
        let free_before = free_device_memory(device);
        for i in 0..cycles {
            let options = if i % 2 == 0 { StreamOptions::non_blocking() } else { StreamOptions::default() };
            drop(Stream::new(device, options).unwrap());
        }
        device.synchronize().unwrap();
        let lost = free_before.saturating_sub(free_device_memory(device));
        eprintln!("{cycles} create/destroy cycles: device memory {lost} bytes lower");
        losses.push(lost);
        if lost <= 1 << 20 {
            break;
        }
    }
    assert!(losses.iter().any(|lost| *lost <= 1 << 20), "each {cycles} cycles lost bytes of device memory: {losses:?}");
    assert_eq!(cuda_stream::live_streams(), streams_before);
}
