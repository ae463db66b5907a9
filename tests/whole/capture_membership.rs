//! Who is in a capture, and what its graph keeps: the findings of issue 36, each observed on the
//! GPU. Every scenario whose old failure killed the process runs in a child process, so that a
//! crash fails its test instead of the whole binary.
//!
//! 1. A stream joins a capture (CUDA's fork: a wait on captured work) only as a capture
//!    transition: another thread's check of the stream and the call it made on the strength of
//!    that check never have a join between them (records, completions, allocations and copies
//!    through the stream, and buffers' own copies and fills that the capture holds, while a
//!    second thread makes it join captures and leave them); and a
//!    storm of forks and joins from other threads while two threads capture never crashes.
//! 2. A graph that captured a kernel of an SM partition's stream keeps the partition's green
//!    context alive, with its executables: the stream and the partition dropped before the
//!    instantiation or before the launch, the replay still runs the kernel.
//! 3. A call on a handle of GPU 1 from a thread with no current context makes no context of GPU
//!    0 and does not crash.
//! 4. A call CUDA forbids during this thread's own Global or ThreadLocal capture is made legal
//!    (host and pool allocations and frees, instantiations, in CUDA's Relaxed mode) or refused
//!    before CUDA (a graph launched or uploaded onto a capturing stream): the capture ends and
//!    its graph replays.
//! 5. Two wrappers of one stream hash alike.

use cuda_stream::{
    BorrowedStream, CaptureStatus, Device, DeviceBuffer, Error, Event, EventFlags, Graph, InstantiateOptions, MemPool,
    PinnedBuffer, RecordFlags, Stream, StreamRef, capture,
};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{TagLog, block_on, child_test_prints, gpu_or_skip, gpus_or_skip};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

fn is_capture_misuse<T>(result: &cuda_stream::Result<T>) -> bool {
    matches!(result, Err(Error::CaptureMisuse(_)))
}

/// Stops a scope's actor threads however its main thread ends (a failed assertion too, or the
/// scope would wait for them forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One capture that `joined` joins and leaves: a host node on `origin`, `joined` waits on it (a
/// join), `origin` waits on `joined` (back into the origin), a second host node, then the end.
/// The graph is instantiated and replayed (both host nodes run). Returns how the end went; a
/// graph that ended must instantiate and replay (a node naming a dead event did not). Only safe
/// calls: nothing is launched by raw FFI into the capture while other threads use `joined`.
fn capture_with_a_join(origin: &Stream, joined: &StreamRef) -> cuda_stream::Result<()> {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut capture = origin.begin_capture(capture::ThreadLocal)?;
    let counter = Arc::clone(&runs);
    capture.launch_host_fn(origin, move || {
        counter.fetch_add(1, Ordering::Relaxed);
    })?;
    joined.wait_stream(origin)?;
    assert_eq!(joined.capture_status(), Ok(CaptureStatus::Active), "the wait made the stream join the capture");
    origin.wait_stream(joined)?;
    let counter = Arc::clone(&runs);
    capture.launch_host_fn(origin, move || {
        counter.fetch_add(1, Ordering::Relaxed);
    })?;
    let graph = capture.end()?;
    let exec = graph.instantiate().expect("a graph that ended instantiates");
    exec.launch(origin).expect("and replays");
    origin.synchronize().expect("its replay completes");
    assert_eq!(runs.load(Ordering::Relaxed), 2, "the replay ran both host nodes");
    Ok(())
}

/// Runs `actor` on `x` on three threads while this thread makes `x` join `rounds` captures and
/// leave them; returns how many captures ended and how many failed, with each failure's error.
fn joins_racing(rounds: usize, x: &StreamRef, actor: impl Fn(&StreamRef) + Sync) -> (usize, Vec<Error>) {
    let device = x.device();
    let origin = stream(device);
    let stop = AtomicBool::new(false);
    let acted = AtomicUsize::new(0);
    let mut failures = Vec::new();
    let mut ended = 0;
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        for _ in 0..3 {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    actor(x);
                    acted.fetch_add(1, Ordering::Relaxed);
                    // Lets the joining thread take its turns at the capture-transition lock.
                    std::thread::yield_now();
                }
            });
        }
        for _ in 0..rounds {
            match capture_with_a_join(&origin, x) {
                Ok(()) => ended += 1,
                Err(error) => failures.push(error),
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(acted.load(Ordering::Relaxed) > 0, "the actors ran");
    x.synchronize().unwrap();
    (ended, failures)
}

#[test]
fn joins_never_land_between_a_check_and_its_call() {
    let _device = gpu_or_skip!();
    if cuda_stream_tests::skipped_under_sanitizer(
        "joins_never_land_between_a_check_and_its_call",
        "memcheck deadlocks inside libcuda here (thread dumps, H200, 2026-11-27: launches wait in the \
         sanitizer's instrumentation holding a lock of libcuda's that another thread's \
         cuGraphExecDestroy and cuGraphInstantiate wait for; no thread waits on a lock of this crate)",
    ) {
        return;
    }
    child_test_prints(
        "child_joins_racing_checked_calls",
        &["external records", "completions", "allocations", "copies", "buffer copies", "launches"],
    );
}

#[test]
#[ignore = "run by joins_never_land_between_a_check_and_its_call in a child process"]
fn child_joins_racing_checked_calls() {
    let device = Device::new(0).unwrap();
    let rounds = cuda_stream_tests::scaled(200, 20);
    let x = stream(device);

    // An external record: an event-record node the graph keeps, or a real record; never a node
    // of a graph that does not keep its event (whose handle is then reused: error 999 at the
    // instantiation, or a crash).
    let (ended, failures) = joins_racing(rounds, &x, |x| {
        let event = Arc::new(Event::new(x.device(), EventFlags::default()).unwrap());
        let _ = x.record_with(&event, RecordFlags::external());
    });
    // A node added to a stream that already rejoined the origin leaves it unjoined: CUDA's
    // typed refusal at the end, the caller's race. Anything else is a defect.
    for failure in &failures {
        assert!(
            matches!(failure, Error::Cuda { api: "cudaStreamEndCapture", code } if code.0 == 904),
            "only an unjoined end (904) may fail: {failure:?}"
        );
    }
    println!("external records: {ended} captures ended, {} unjoined", failures.len());

    // A completion: refused while the stream is in a capture, else a real record; never an
    // event of the capture that the reactor then queries (the capture's end failed with
    // cudaErrorCapturedEvent).
    let refused = AtomicUsize::new(0);
    let (ended, failures) = joins_racing(rounds, &x, |x| match block_on(x.completion()) {
        Ok(()) => {}
        Err(Error::CaptureMisuse(_)) => {
            refused.fetch_add(1, Ordering::Relaxed);
        }
        Err(other) => panic!("a completion failed: {other:?}"),
    });
    assert!(failures.is_empty(), "every capture ended: {failures:?}");
    println!("completions: {ended} captures ended, {} completions refused", refused.into_inner());

    // An allocation: refused while the stream is in a capture, else real memory (usable: a
    // fill read back), never a graph's allocation handed out as a buffer.
    let (ended, failures) = joins_racing(rounds, &x, |x| match DeviceBuffer::<u32, _>::new(x, 256) {
        Ok(mut buffer) => {
            let mut back = vec![0u32; 256];
            let filled = buffer.fill_bytes(x, 0x5a).and_then(|()| buffer.copy_to_slice(x, &mut back));
            match filled {
                Ok(()) => assert!(back.iter().all(|&word| word == 0x5a5a_5a5a), "real memory, filled"),
                Err(error) => assert!(matches!(error, Error::CaptureMisuse(_)), "{error:?}"),
            }
        }
        Err(error) => assert!(matches!(error, Error::CaptureMisuse(_)), "{error:?}"),
    });
    assert!(failures.is_empty(), "every capture ended: {failures:?}");
    println!("allocations: {ended} captures ended");

    // A copy to a host slice: done before it returns, or refused with nothing enqueued; never a
    // copy into a capture that writes the slice at a replay after the call returned.
    let source = DeviceBuffer::from_slice(&*x, &[7u32; 1024]).unwrap();
    let late = AtomicUsize::new(0);
    let (ended, failures) = joins_racing(rounds, &x, |x| {
        let mut host = vec![0u32; 1024];
        match source.copy_to_slice(x, &mut host) {
            Ok(()) => assert!(host.iter().all(|&word| word == 7), "a copy that returned is complete"),
            Err(Error::CaptureMisuse(_)) => {
                std::thread::sleep(Duration::from_micros(500));
                if host.iter().any(|&word| word != 0) {
                    late.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(other) => panic!("a copy failed: {other:?}"),
        }
    });
    assert_eq!(late.into_inner(), 0, "a refused copy never writes the slice later");
    assert!(failures.is_empty(), "every capture ended: {failures:?}");
    println!("copies: {ended} captures ended");

    // A buffer's own copy from another buffer and its fill: real work, or nodes of the capture
    // that `x` joined, whose graph holds both buffers (the target's owner drops it at once: the
    // replay writes memory the graph keeps); never beside the capture's end or the join. A copy
    // onto `x` after it rejoined leaves it unjoined (CUDA's typed refusal at the end); a capture
    // holds at most 12 buffers (the 13th is refused with `Size`).
    let home = stream(device);
    let source = DeviceBuffer::from_slice(&*home, &[7u32; 256]).unwrap();
    let copies = Tally::default();
    let (ended, failures) = joins_racing(rounds, &x, |x| {
        let mut target = DeviceBuffer::<u32, _>::zeroed(&*home, 256).unwrap();
        let copied = target.copy_from(x, &source).and_then(|()| target.fill_bytes(x, 0x5a));
        match copied {
            Err(Error::Size(_)) => {
                copies.refused.fetch_add(1, Ordering::Relaxed);
            }
            other => copies.count("a buffer's copy or fill", &other),
        }
    });
    for failure in &failures {
        assert!(
            matches!(failure, Error::Cuda { api: "cudaStreamEndCapture", code } if code.0 == 904),
            "only an unjoined end (904) may fail: {failure:?}"
        );
    }
    let late = home.synchronize().and_then(|()| x.synchronize());
    assert!(late.is_ok(), "the buffers' streams complete: {late:?}");
    println!(
        "buffer copies: {ended} captures ended, {} unjoined, {} copied or captured, {} refused, {} CUDA capture errors",
        failures.len(),
        copies.ok.into_inner(),
        copies.refused.into_inner(),
        copies.cuda_capture_errors.into_inner()
    );

    // A kernel launch through the crate (`StreamRef::launch`, the test kernels' launchers):
    // into the capture or real work, never beside the capture's end or another thread's join
    // (the API fuzzer's launches on `as_raw()`, which bypassed the crate, crashed libcuda in
    // 22 of 32 processes). A launch onto `x` after it rejoined leaves it unjoined: CUDA's
    // typed refusal at the end.
    // The launchers pause between launches: three threads launching on one stream as fast as
    // they can keep libcuda's launch lock taken as readers, and the joining thread's graph
    // calls (instantiate, launch, destroy: the writer) wait for seconds, in raw CUDA too (a
    // C++ program, 2026-11-27, H100, CUDA 13.0: three threads launching an empty kernel on
    // `x` while the main thread captures two host functions on another stream, instantiates,
    // launches, synchronizes and destroys the graph, never touching `x`: one round in 20 s, in
    // 3 of 3 runs).
    let launched = AtomicUsize::new(0);
    let (ended, failures) = joins_racing(rounds, &x, |x| {
        cuda_stream_tests::empty(x).expect("a launch is captured or runs, never refused");
        launched.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(20));
    });
    for failure in &failures {
        assert!(
            matches!(failure, Error::Cuda { api: "cudaStreamEndCapture", code } if code.0 == 904),
            "only an unjoined end (904) may fail: {failure:?}"
        );
    }
    println!("launches: {ended} captures ended, {} unjoined, {} launches", failures.len(), launched.into_inner());
}

/// CUDA's stream-capture errors (`cudaErrorStreamCaptureUnsupported` to
/// `cudaErrorStreamCaptureWrongThread`).
const CAPTURE_ERRORS: std::ops::RangeInclusive<i32> = 900..=908;

/// What a storm counted: operations by outcome, and captures by how they ended.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    refused: AtomicUsize,
    cuda_capture_errors: AtomicUsize,
    ended: AtomicUsize,
    unjoined: AtomicUsize,
}

impl Tally {
    /// Counts `result`: fine, a refusal of this crate, or one of CUDA's stream-capture errors
    /// (900 to 908) that a program racing forks against its own captures can earn (a capture
    /// left with a stream that another thread forked into it after its owner joined back ends
    /// unjoined, and a wait in such a capture is CUDA's to answer). Anything else fails the test.
    fn count<T>(&self, what: &str, result: &cuda_stream::Result<T>) {
        match result {
            Ok(_) => self.ok.fetch_add(1, Ordering::Relaxed),
            Err(Error::CaptureMisuse(_)) => self.refused.fetch_add(1, Ordering::Relaxed),
            Err(Error::Cuda { code, .. }) if CAPTURE_ERRORS.contains(&code.0) => {
                self.cuda_capture_errors.fetch_add(1, Ordering::Relaxed)
            }
            Err(other) => panic!("{what}: {other:?}"),
        };
    }
}

#[test]
fn joins_and_forks_from_other_threads_while_captures_begin_and_end_never_crash() {
    let _device = gpu_or_skip!();
    child_test_prints("child_join_storm", &["join storm"]);
}

/// Two threads capture on their own origin streams (a host node, a pause, their streams joined
/// back, the end, a replay on a stream of their own that must run the host node); three threads
/// meanwhile make random
/// streams wait on each other (forks into those captures, joins, waits across captures), record
/// completions, allocate and launch a prepared graph on random streams. Every result must be
/// fine, refused by this crate, or one of CUDA's errors for a capture that another thread forked
/// into after its owner joined back; nothing may crash or hang, every completion that was not
/// refused resolves, and every graph that ended replays.
#[test]
#[ignore = "run by joins_and_forks_from_other_threads_while_captures_begin_and_end_never_crash in a child process"]
fn child_join_storm() {
    let device = Device::new(0).unwrap();
    let rounds = cuda_stream_tests::scaled(150, 15);
    let streams: Vec<Stream> = (0..4).map(|_| stream(device)).collect();
    let origins: Vec<Stream> = (0..2).map(|_| stream(device)).collect();
    let every: Vec<&StreamRef> = streams.iter().chain(&origins).map(|s| &**s).collect();
    let Prepared { graph: _prepared_graph, exec } = prepare(device);
    // One actor at a time launches it (an executable is used by one thread at a time).
    let exec = std::sync::Mutex::new(exec);
    let tally = Tally::default();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        for actor in 0..3u64 {
            let (every, tally, stop, exec) = (&every, &tally, &stop, &exec);
            scope.spawn(move || {
                let mut rng = cuda_stream_tests::Rng::new(0x5eed + actor);
                while !stop.load(Ordering::Relaxed) {
                    let (a, b) = (every[rng.below(every.len())], every[rng.below(every.len())]);
                    match rng.below(5) {
                        0 | 1 => tally.count("wait_stream", &a.wait_stream(b)),
                        2 => {
                            let done = block_on(a.completion());
                            assert!(
                                matches!(done, Ok(()) | Err(Error::CaptureMisuse(_))),
                                "a completion resolves, or is refused on a capturing stream: {done:?}"
                            );
                            tally.count("completion", &done);
                        }
                        3 => tally.count("DeviceBuffer::new", &DeviceBuffer::<u32, _>::new(a, 64).map(drop)),
                        _ => {
                            let exec = exec.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                            tally.count("GraphExec::launch", &exec.launch(a));
                        }
                    }
                    std::thread::yield_now();
                }
            });
        }
        let capturers: Vec<_> = origins
            .iter()
            .enumerate()
            .map(|(index, origin)| {
                let (every, tally) = (&every, &tally);
                scope.spawn(move || {
                    // Replays go to a stream no actor touches: the origin itself may be made to
                    // join another thread's capture at any time, and is then refused.
                    let replay = stream(device);
                    for _ in 0..rounds {
                        let runs = Arc::new(AtomicUsize::new(0));
                        let mut capture = match origin.begin_capture(capture::ThreadLocal) {
                            Ok(capture) => capture,
                            Err(error) => {
                                // The origin was made to join another thread's capture: CUDA
                                // refuses to begin one on it.
                                assert!(
                                    matches!(error, Error::Cuda { .. } | Error::CaptureMisuse(_)),
                                    "a begin failed: {error:?}"
                                );
                                tally.cuda_capture_errors.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_micros(200));
                                continue;
                            }
                        };
                        let counter = Arc::clone(&runs);
                        let added = capture.launch_host_fn(&**origin, move || {
                            counter.fetch_add(1, Ordering::Relaxed);
                        });
                        tally.count("Capture::launch_host_fn", &added);
                        std::thread::sleep(Duration::from_micros(100 + 50 * index as u64));
                        // Join back every stream of this capture.
                        for other in every.iter() {
                            if other.capture_info().is_ok_and(|info| info.id == capture.id()) && *other != &**origin {
                                tally.count("join back", &origin.wait_stream(*other));
                            }
                        }
                        match capture.end() {
                            Ok(graph) => {
                                tally.ended.fetch_add(1, Ordering::Relaxed);
                                let exec = graph.instantiate().expect("a graph that ended instantiates");
                                exec.launch(&replay).expect("and replays");
                                replay.synchronize().expect("its replay completes");
                                if added.is_ok() {
                                    assert_eq!(runs.load(Ordering::Relaxed), 1, "the replay ran the host node");
                                }
                            }
                            Err(Error::Cuda { code, .. }) if CAPTURE_ERRORS.contains(&code.0) => {
                                tally.unjoined.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(other) => panic!("a capture ended with {other:?}"),
                        }
                    }
                })
            })
            .collect();
        for capturer in capturers {
            capturer.join().unwrap();
        }
    });
    for stream in &every {
        let _ = stream.synchronize();
    }
    println!(
        "join storm: {} captures ended, {} left unjoined by a fork; operations: {} fine, {} refused, {} CUDA capture errors",
        tally.ended.into_inner(),
        tally.unjoined.into_inner(),
        tally.ok.into_inner(),
        tally.refused.into_inner(),
        tally.cuda_capture_errors.into_inner()
    );
}

#[test]
fn a_graph_keeps_the_green_context_of_its_partition_streams() {
    let _device = gpu_or_skip!();
    child_test_prints(
        "child_green_context_outlives_its_streams",
        &["begun on the partition", "joined by the partition"],
    );
}

#[test]
#[ignore = "run by a_graph_keeps_the_green_context_of_its_partition_streams in a child process"]
fn child_green_context_outlives_its_streams() {
    let device = Device::new(0).unwrap();
    let log = TagLog::new(64).unwrap();
    let replay = stream(device);
    for instantiate_first in [false, true] {
        // Begun on the partition's stream.
        let partition = device.split_sms(8, 1).unwrap().remove(0);
        let green = partition.stream(None).unwrap();
        let capture = green.begin_capture(capture::ThreadLocal).unwrap();
        cuda_stream_tests::tag(&green, &log, 1, Duration::ZERO).unwrap();
        let graph = capture.end().unwrap();
        let early = instantiate_first.then(|| graph.instantiate().unwrap());
        drop(green);
        drop(partition);
        let exec = early.unwrap_or_else(|| graph.instantiate().unwrap());
        drop(graph);
        log.clear();
        exec.launch(&*replay).unwrap();
        replay.synchronize().unwrap();
        assert_eq!(log.tags(), [1], "the replay ran the partition's kernel");
        drop(exec);
    }
    println!("begun on the partition: replayed after the partition was dropped");

    // Joined by the partition's stream (a fork from an ordinary stream's capture).
    let partition = device.split_sms(8, 1).unwrap().remove(0);
    let green = partition.stream(None).unwrap();
    let origin = stream(device);
    let capture = origin.begin_capture(capture::ThreadLocal).unwrap();
    cuda_stream_tests::tag(&origin, &log, 1, Duration::ZERO).unwrap();
    green.wait_stream(&*origin).unwrap();
    cuda_stream_tests::tag(&green, &log, 2, Duration::ZERO).unwrap();
    origin.wait_stream(&*green).unwrap();
    let graph = capture.end().unwrap();
    drop(green);
    drop(partition);
    let exec = graph.instantiate().unwrap();
    let copy = graph.instantiate_with(InstantiateOptions::new());
    drop(graph);
    log.clear();
    exec.launch(&*replay).unwrap();
    replay.synchronize().unwrap();
    assert_eq!(log.tags(), [1, 2], "the replay ran both kernels in order");
    drop((exec, copy));
    println!("joined by the partition: replayed after the partition was dropped");
}

#[test]
fn calls_on_gpu_1_from_a_fresh_thread_bind_no_other_gpu() {
    let _devices = gpus_or_skip!(2);
    child_test_prints("child_fresh_thread_gpu1", &["gpu0 primary context: false"]);
}

#[test]
#[ignore = "run by calls_on_gpu_1_from_a_fresh_thread_bind_no_other_gpu in a child process"]
fn child_fresh_thread_gpu1() {
    let (gpu0, gpu1) = (Device::new(0).unwrap(), Device::new(1).unwrap());
    assert!(!gpu0.has_primary_context().unwrap(), "a fresh process");
    let shared = Event::new(gpu1, EventFlags { interprocess: true, ..EventFlags::default() }).unwrap();
    let work = stream(gpu1);
    let capture = work.begin_capture(capture::ThreadLocal).unwrap();
    let graph = capture.end().unwrap();
    let exec = graph.instantiate().unwrap();
    // Each on a thread of its own, where no context is current.
    std::thread::scope(|scope| {
        scope.spawn(|| shared.ipc_handle().expect("the handle of GPU 1's event")).join().unwrap();
        scope.spawn(|| capture::with_thread_mode(capture::Relaxed, || 1).expect("the mode is set")).join().unwrap();
    });
    let exec = std::thread::spawn(move || {
        exec.flags().expect("the executable's flags");
        exec
    })
    .join()
    .unwrap();
    std::thread::spawn(move || drop(graph)).join().unwrap();
    std::thread::spawn(move || drop(exec)).join().unwrap();
    println!("gpu0 primary context: {}", gpu0.has_primary_context().unwrap());
}

/// What [`calls_during_own_capture`] uses, made before the capture begins.
struct Prepared {
    graph: Graph,
    exec: cuda_stream::GraphExec,
}

fn prepare(device: Device) -> Prepared {
    let other = stream(device);
    let capture = other.begin_capture(capture::ThreadLocal).unwrap();
    cuda_stream_tests::empty(&other).unwrap();
    let graph = capture.end().unwrap();
    let exec = graph.instantiate().unwrap();
    Prepared { graph, exec }
}

/// Each call CUDA forbids during a Global or ThreadLocal capture of the calling thread, made as
/// this crate makes it, with its result and whether it must be allowed (made legal) or refused
/// before CUDA. The capture must survive every one.
fn calls_during_own_capture(
    capturing: &Stream,
    device: Device,
    prepared: Prepared,
) -> Vec<(&'static str, cuda_stream::Result<()>, bool)> {
    let Prepared { graph, exec } = prepared;
    let pinned = PinnedBuffer::<u32>::zeroed(16);
    let pool = MemPool::new(device);
    let upload = InstantiateOptions::new().upload_to(capturing);
    vec![
        ("PinnedBuffer::zeroed", pinned.as_ref().map(|_| ()).map_err(Error::clone), true),
        (
            "PinnedBuffer drop",
            {
                drop(pinned);
                Ok(())
            },
            true,
        ),
        ("MemPool::new", pool.as_ref().map(|_| ()).map_err(Error::clone), true),
        ("MemPool::trim_to", pool.as_ref().map_err(Error::clone).and_then(|pool| pool.trim_to(0)), true),
        (
            "MemPool drop",
            {
                drop(pool);
                Ok(())
            },
            true,
        ),
        ("Graph::instantiate", graph.instantiate().map(drop), true),
        ("Graph::instantiate_with", graph.instantiate_with(InstantiateOptions::new()).map(drop), true),
        ("Graph::instantiate_with, uploaded to the capturing stream", graph.instantiate_with(upload).map(drop), false),
        ("GraphExec::launch onto the capturing stream", exec.launch(&**capturing), false),
        ("GraphExec::upload onto the capturing stream", exec.upload(&**capturing), false),
        (
            "Graph drop",
            {
                drop(graph);
                Ok(())
            },
            true,
        ),
        (
            "GraphExec drop",
            {
                drop(exec);
                Ok(())
            },
            true,
        ),
    ]
}

#[test]
fn calls_forbidden_during_this_threads_capture_leave_it_intact() {
    let device = gpu_or_skip!();
    for global in [true, false] {
        let capturing = stream(device);
        let log = TagLog::new(8).unwrap();
        let prepared = prepare(device);
        let mode_name = if global { "Global" } else { "ThreadLocal" };
        let (calls, graph) = if global {
            let capture = capturing.begin_capture(capture::Global).unwrap();
            cuda_stream_tests::tag(&capturing, &log, 1, Duration::ZERO).unwrap();
            let calls = calls_during_own_capture(&capturing, device, prepared);
            cuda_stream_tests::tag(&capturing, &log, 2, Duration::ZERO).unwrap();
            (calls, capture.end())
        } else {
            let capture = capturing.begin_capture(capture::ThreadLocal).unwrap();
            cuda_stream_tests::tag(&capturing, &log, 1, Duration::ZERO).unwrap();
            let calls = calls_during_own_capture(&capturing, device, prepared);
            cuda_stream_tests::tag(&capturing, &log, 2, Duration::ZERO).unwrap();
            (calls, capture.end())
        };
        for (name, result, allowed) in &calls {
            if *allowed {
                assert!(result.is_ok(), "{mode_name}: {name} is made legal: {result:?}");
            } else {
                assert!(is_capture_misuse(result), "{mode_name}: {name} is refused before CUDA: {result:?}");
            }
        }
        let graph = graph.unwrap_or_else(|error| panic!("{mode_name}: the capture survived every call: {error:?}"));
        let exec = graph.instantiate().unwrap();
        exec.launch(&*capturing).unwrap();
        capturing.synchronize().unwrap();
        assert_eq!(log.tags(), [1, 2], "{mode_name}: the graph replays the capture's kernels");
    }
}

/// An event whose last record went into a capture, dropped on one thread while another thread
/// ends that capture: the destroy and the end never overlap in CUDA (`cuEventDestroy` racing
/// the capture's end crashed libcuda in the API fuzzer's join race). The captures' graphs
/// replay their host functions, so each capture stayed valid.
#[test]
fn captured_events_dropped_while_their_captures_end_never_crash() {
    let device = gpu_or_skip!();
    let origin = stream(device);
    let rounds = cuda_stream_tests::scaled(2000, 100);
    let (send, receive) = std::sync::mpsc::channel::<Event>();
    let runs = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for event in receive {
                drop(event);
            }
        });
        for _ in 0..rounds {
            let mut capture = origin.begin_capture(capture::ThreadLocal).unwrap();
            let counter = Arc::clone(&runs);
            capture
                .launch_host_fn(&origin, move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                })
                .unwrap();
            let event = origin.record_event().expect("a record into the capture");
            send.send(event).expect("the dropping thread lives");
            let graph = capture.end().expect("the capture survived the drop");
            let exec = graph.instantiate().unwrap();
            exec.launch(&*origin).unwrap();
            origin.synchronize().unwrap();
        }
        drop(send);
    });
    origin.synchronize().unwrap();
    assert_eq!(runs.load(Ordering::Relaxed), rounds, "every graph replayed its host function");
}

#[test]
fn two_wrappers_of_one_stream_hash_alike() {
    let device = gpu_or_skip!();
    let owned = stream(device);
    // SAFETY: `owned` outlives the borrow; nobody captures it.
    let borrowed = unsafe { BorrowedStream::borrow_raw_on(owned.as_raw(), device) }.unwrap();
    let hash = |value: &dyn Fn(&mut DefaultHasher)| {
        let mut hasher = DefaultHasher::new();
        value(&mut hasher);
        hasher.finish()
    };
    assert_eq!(*owned, *borrowed, "equal through StreamRef");
    assert_eq!(hash(&|h| owned.hash(h)), hash(&|h| borrowed.hash(h)), "Stream and BorrowedStream");
    assert_eq!(hash(&|h| owned.hash(h)), hash(&|h| (*owned).hash(h)), "Stream and its StreamRef");
    let partition = device.split_sms(8, 1).unwrap().remove(0);
    let green = partition.stream(None).unwrap();
    assert_eq!(hash(&|h| green.hash(h)), hash(&|h| (*green).hash(h)), "a partition's stream and its StreamRef");
}

#[test]
fn calls_inside_a_callers_closure_work_and_never_deadlock() {
    let _device = gpu_or_skip!();
    child_test_prints("child_calls_inside_closures", &["closures:"]);
}

/// A `use_on` closure is your code, run outside the enqueue path's hold: calls of the crate
/// inside it work, a capture's begin and end included, also while another thread's capture
/// begins (its begin waits for the crate's fast calls and takes the write side: a closure
/// under either would wait for it forever, the closure's thread waiting for that thread). A raw
/// launcher runs under the hold (a capture must not end or be joined between the crate's
/// checks and your launch): the crate's enqueues and reads work inside it, and a capture
/// transition there (a begin; a wait, which may join a capture) is refused, not a hang. Without a capture in progress, and with one: both
/// are tried.
#[test]
#[ignore = "run by calls_inside_a_callers_closure_work_and_never_deadlock in a child process"]
fn child_calls_inside_closures() {
    let device = Device::new(0).unwrap();
    let (x, y, capturing) = (stream(device), stream(device), stream(device));
    let log = TagLog::new(16).unwrap();
    let event = Event::new(device, EventFlags::default()).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&*x, 64).unwrap();
    let mut inner_captures = 0;
    for during_capture in [false, true] {
        let capture = during_capture.then(|| capturing.begin_capture(capture::ThreadLocal).unwrap());
        if during_capture {
            cuda_stream_tests::tag(&*capturing, &log, 100, Duration::ZERO).unwrap();
        }
        let inside = |on: &StreamRef| -> usize {
            std::thread::scope(|scope| {
                // Another thread begins and ends a capture meanwhile; this one waits for it.
                let other = scope.spawn(|| {
                    let other = stream(device);
                    other.begin_capture(capture::Relaxed).and_then(|capture| capture.end()).map(drop)
                });
                std::thread::sleep(Duration::from_millis(50));
                assert_eq!(on.capture_status(), Ok(CaptureStatus::None), "a status read");
                y.record(&event).expect("a record");
                y.wait_stream(on).expect("a wait on uncaptured work");
                let inner = y.begin_capture(capture::ThreadLocal).and_then(|capture| capture.end());
                inner.expect("a capture begins and ends inside the closure");
                other.join().unwrap().expect("the other thread's capture begins and ends");
                1
            })
        };
        let in_launcher = |on: &StreamRef| {
            assert_eq!(on.capture_status(), Ok(CaptureStatus::None), "a status read");
            y.record(&event).expect("a record");
            match y.begin_capture(capture::ThreadLocal) {
                Err(Error::CaptureMisuse(_)) => {}
                other => panic!("a capture's begin inside a launcher: {other:?}"),
            }
        };
        x.launch("cs_launch_tag", |raw| {
            in_launcher(&x);
            // SAFETY: the launcher takes a live stream of the current device and a live log.
            unsafe { cuda_stream_tests::ffi::cs_launch_tag(raw, log.device_ptr(), 1, 0) }
        })
        .unwrap();
        buffer.use_on(&*x, |on, _| inner_captures += inside(on)).unwrap();
        if let Some(capture) = capture {
            let graph = capture.end().expect("the capture is intact");
            graph.instantiate().unwrap().launch(&*x).unwrap();
        }
        x.synchronize().unwrap();
    }
    let tags: Vec<u32> = log.entries().iter().map(|entry| entry.tag).collect();
    assert_eq!(tags.iter().filter(|&&tag| tag == 1).count(), 2, "both launches ran: {tags:?}");
    assert!(tags.contains(&100), "the replay ran the captured kernel: {tags:?}");
    println!("closures: {inner_captures} captures begun and ended inside them");
}
