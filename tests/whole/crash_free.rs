//! No safe program can crash the driver: one test per route that once could (captured events
//! queried, reads that broke a foreign capture, handles created in a non-primary context that
//! another library destroyed, cudarc lending, a pool lease returned capturing, graph objects
//! mutated from two threads), each observing on the GPU what now happens instead. The routes
//! that cannot be closed in code are `unsafe` (their compile-fail tests are in
//! `cuda-stream/tests/compile_fail/`). Tests whose old failure was a crash run in a child
//! process, so that a crash fails the test instead of the whole binary. The tests take turns
//! through `gpu_or_skip!` (a capture in progress makes the crate refuse other tests' calls).

use cuda_stream::sys;
use cuda_stream::{
    BorrowedStream, CaptureStatus, Device, Error, Event, EventFlags, Stream, StreamOptions, StreamPool, capture,
    live_streams,
};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::probe::Token;
use cuda_stream_tests::{MappedFlag, TagLog, block_on, child_test_prints, gpu_or_skip};
use cudarc::driver::{CudaContext, result};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn is_capture_misuse<T: std::fmt::Debug>(result: &cuda_stream::Result<T>) -> bool {
    matches!(result, Err(Error::CaptureMisuse(_)))
}

// 2. An event recorded inside a capture is a graph node: every call that would query it is
//    refused, and the capture survives.

#[test]
fn an_event_recorded_in_a_relaxed_capture_is_refused_until_recorded_outside() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let (event, start) =
        (Event::new(device, EventFlags::timing()).unwrap(), Event::new(device, EventFlags::timing()).unwrap());
    start.record(&*stream).unwrap();
    let capture = stream.begin_capture(capture::Relaxed).unwrap();
    cuda_stream_tests::empty(&stream).unwrap();
    event.record(&*stream).unwrap();
    assert!(is_capture_misuse(&event.query()), "query of a captured event");
    assert!(is_capture_misuse(&event.synchronize()), "synchronize of a captured event");
    assert!(is_capture_misuse(&event.elapsed(&start)), "elapsed to a captured event");
    // From another thread too: a Relaxed capture forbids nobody's queries, the event does.
    std::thread::scope(|scope| scope.spawn(|| assert!(is_capture_misuse(&event.query()))).join().unwrap());
    assert_eq!(stream.capture_status(), Ok(CaptureStatus::Active), "no query reached CUDA");
    let graph = capture.end().expect("the capture was not invalidated");
    graph.instantiate().unwrap().launch(&*stream).unwrap();
    assert!(is_capture_misuse(&event.query()), "still a graph node after the capture ended");
    event.record(&*stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true), "recorded outside a capture, it is a marker again");
    assert!(event.elapsed(&start).unwrap().is_some());
}

/// A query or `elapsed` that passed its check just before another thread marked the event and
/// recorded it into a capture would reach CUDA with a captured event, which invalidates the
/// capture (and crashed libcuda when it met the capture's end). A record into a capture waits
/// for the calls in flight on its event: every capture below ends cleanly.
#[test]
fn queries_racing_records_into_a_capture_never_invalidate_it() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let (event, start) =
        (Event::new(device, EventFlags::timing()).unwrap(), Event::new(device, EventFlags::timing()).unwrap());
    start.record(&*stream).unwrap();
    event.record(&*stream).unwrap();
    stream.synchronize().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut answered, mut refused) = (0u64, 0u64);
    std::thread::scope(|scope| {
        let stopping = cuda_stream_tests::StopOnDrop(&stop);
        let racers: Vec<_> = (0..2)
            .map(|racer| {
                let (event, start, stop) = (&event, &start, &stop);
                scope.spawn(move || {
                    let mut counts = (0u64, 0u64);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let outcome = if racer == 0 { event.query().map(drop) } else { event.elapsed(start).map(drop) };
                        match outcome {
                            Ok(()) => counts.0 += 1,
                            Err(Error::CaptureMisuse(_)) => counts.1 += 1,
                            Err(other) => panic!("a racing call gives Ok or CaptureMisuse: {other:?}"),
                        }
                    }
                    counts
                })
            })
            .collect();
        for round in 0..cuda_stream_tests::scaled(3000, 300) {
            let capture = stream.begin_capture(capture::Relaxed).unwrap();
            event.record(&*stream).unwrap();
            let graph = capture.end();
            assert!(graph.is_ok(), "round {round}: a call racing the record invalidated the capture: {graph:?}");
            event.record(&*stream).unwrap();
        }
        drop(stopping);
        for racer in racers {
            let (ok, misuse) = racer.join().unwrap();
            answered += ok;
            refused += misuse;
        }
    });
    assert!(answered > 0 && refused > 0, "the racers met both states: {answered} answered, {refused} refused");
}

/// `Event::synchronize` once waited inside CUDA, uncounted: a record of its event into a
/// capture on another thread could reach CUDA while the wait was in it (a captured event
/// synchronized). Now a wait in CUDA is counted, and a record into a capture that sees it is
/// refused (while captures are in progress, the wait polls counted queries instead). Two
/// threads synchronize the events while each round records them after a short kernel (so the
/// waits are in progress) and then into a capture: every capture ends cleanly, every wait ends
/// with `Ok` or `CaptureMisuse`, and every record into the capture is made or refused.
#[test]
fn synchronizes_racing_records_into_a_capture_never_invalidate_it() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let device = gpu_or_skip!();
    let stream = stream(device);
    let blocking = Event::new(device, EventFlags { blocking_sync: true, ..EventFlags::default() }).unwrap();
    let spinning = Event::new(device, EventFlags::default()).unwrap();
    let stop = AtomicBool::new(false);
    let (waited, refused, records_refused) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|scope| {
        let stopping = cuda_stream_tests::StopOnDrop(&stop);
        for event in [&blocking, &spinning] {
            let (stop, waited, refused) = (&stop, &waited, &refused);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match event.synchronize() {
                        Ok(()) => waited.fetch_add(1, Ordering::Relaxed),
                        Err(Error::CaptureMisuse(_)) => refused.fetch_add(1, Ordering::Relaxed),
                        Err(other) => panic!("a racing synchronize gives Ok or CaptureMisuse: {other:?}"),
                    };
                }
            });
        }
        for round in 0..cuda_stream_tests::scaled(2000, 200) {
            cuda_stream_tests::spin(&*stream, Duration::from_micros(20)).unwrap();
            blocking.record(&*stream).unwrap();
            spinning.record(&*stream).unwrap();
            std::thread::sleep(Duration::from_micros(5));
            let capture = stream.begin_capture(capture::Relaxed).unwrap();
            for event in [&blocking, &spinning] {
                match event.record(&*stream) {
                    Ok(()) => {}
                    Err(Error::CaptureMisuse(why)) if why.contains("being waited for") => {
                        records_refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(other) => panic!("round {round}: a record into the capture: {other:?}"),
                }
            }
            let graph = capture.end();
            assert!(graph.is_ok(), "round {round}: a wait reached CUDA with the captured event: {graph:?}");
        }
        drop(stopping);
    });
    stream.synchronize().unwrap();
    let (waited, refused) = (waited.into_inner(), refused.into_inner());
    // Under compute-sanitizer the races are not met (memcheck, H200: 24,659 waits, none refused;
    // its instrumentation serializes the calls).
    let both = waited > 0 && (refused > 0 || cuda_stream_tests::under_sanitizer());
    assert!(both, "the waits met both states: {waited} waited, {refused} refused");
    println!(
        "{waited} waits, {refused} refused; {} records into a capture refused beside a wait",
        records_refused.into_inner()
    );
}

/// One event recorded from two threads at once, one record into a capture and one outside
/// any: which one CUDA takes last cannot be known, so the event must stay refused rather than
/// count as recorded outside (its queries would then reach CUDA with a captured event and
/// invalidate the capture). A third thread queries it all along: every capture ends cleanly.
#[test]
fn an_event_recorded_from_two_threads_never_counts_as_recorded_outside_while_captured() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let device = gpu_or_skip!();
    let (capturing, outside) = (stream(device), stream(device));
    let event = Event::new(device, EventFlags::default()).unwrap();
    event.record(&*outside).unwrap();
    outside.synchronize().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let stopping = cuda_stream_tests::StopOnDrop(&stop);
        let recorder = scope.spawn(|| {
            let mut records = 0u64;
            while !stop.load(Ordering::Relaxed) {
                outside.record(&event).unwrap();
                records += 1;
            }
            records
        });
        let querier = scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let answer = event.query();
                assert!(answer.is_ok() || is_capture_misuse(&answer), "a query gives Ok or CaptureMisuse: {answer:?}");
            }
        });
        for round in 0..cuda_stream_tests::scaled(3000, 300) {
            let capture = capturing.begin_capture(capture::Relaxed).unwrap();
            capturing.record(&event).unwrap();
            let graph = capture.end();
            assert!(graph.is_ok(), "round {round}: a query reached CUDA with the captured event: {graph:?}");
        }
        drop(stopping);
        assert!(recorder.join().unwrap() > 0, "the other thread recorded meanwhile");
        querier.join().unwrap();
    });
    outside.synchronize().unwrap();
}

#[test]
fn a_completion_of_an_event_recorded_in_a_global_capture_resolves_with_capture_misuse() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let event = Arc::new(Event::new(device, EventFlags::default()).unwrap());
    let capture = stream.begin_capture(capture::Global).unwrap();
    event.record(&*stream).unwrap();
    let refused = event.completion();
    assert!(refused.is_complete(), "refused at once, never handed to the reactor");
    assert!(is_capture_misuse(&block_on(refused)));
    assert_eq!(stream.capture_status(), Ok(CaptureStatus::Active));
    capture.end().expect("the reactor never queried the captured event");
}

#[test]
fn a_pending_completion_whose_event_is_recorded_into_a_capture_resolves_without_querying_it() {
    let device = gpu_or_skip!();
    let (parked, capturing) = (stream(device), stream(device));
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&parked, &flag, Duration::from_secs(20)).unwrap();
    let event = Arc::new(parked.record_event().unwrap());
    let pending = event.completion();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!pending.is_complete(), "the flag holds the work");
    // The event moves into a capture while the reactor polls it: the reactor must stop
    // querying it (a query would invalidate the capture; racing the end, crash libcuda).
    let capture = capturing.begin_capture(capture::Global).unwrap();
    event.record(&*capturing).unwrap();
    let outcome = block_on(pending);
    assert!(is_capture_misuse(&outcome), "{outcome:?}");
    assert_eq!(capturing.capture_status(), Ok(CaptureStatus::Active));
    capture.end().expect("the capture was not invalidated");
    flag.set();
    parked.synchronize().unwrap();
}

/// The fuzzer's crash, as a loop: completions and queries of an event race the end of the
/// capture it was recorded into. Run in a child: the old failure killed the process.
#[test]
fn queries_and_completions_racing_capture_ends_never_crash() {
    let _device = gpu_or_skip!();
    child_test_prints("child_queries_race_capture_ends", &["raced"]);
}

#[test]
#[ignore = "run by queries_and_completions_racing_capture_ends_never_crash in a child process"]
fn child_queries_race_capture_ends() {
    let device = Device::new(0).unwrap();
    let stream = stream(device);
    let event = Arc::new(Event::new(device, EventFlags::default()).unwrap());
    let rounds = cuda_stream_tests::scaled(300, 30);
    let (start, done) = (Barrier::new(2), std::sync::atomic::AtomicBool::new(false));
    let mut invalidated = 0;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            start.wait();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = event.query();
                let _ = block_on(event.completion());
            }
        });
        start.wait();
        for _ in 0..rounds {
            let capture = stream.begin_capture(capture::Relaxed).unwrap();
            cuda_stream_tests::empty(&stream).unwrap();
            event.record(&*stream).unwrap();
            if capture.end().is_err() {
                invalidated += 1;
            }
            event.record(&*stream).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    stream.synchronize().unwrap();
    // A query that checked the event just before another thread marked it captured may still
    // reach CUDA and invalidate that capture (a typed error at `end`), never crash.
    println!("raced {rounds} captures, {invalidated} invalidated");
}

// 3. Reads of a stream leave a foreign capture intact.

#[test]
fn reads_of_a_borrowed_stream_leave_a_foreign_global_capture_intact() {
    let device = gpu_or_skip!();
    let owner = stream(device);
    let handle = owner.as_raw();
    // SAFETY: `owner` outlives the borrow; this thread alone begins and ends the capture.
    let borrowed = unsafe { BorrowedStream::borrow_raw(handle) }.unwrap();
    // What `torch.cuda.graph` does: a raw Global capture of a stream it hands us.
    begin_foreign_global_capture(&owner);
    assert!(is_capture_misuse(&borrowed.is_non_blocking()), "CUDA would invalidate the capture to answer");
    assert_eq!(owner.is_non_blocking(), Ok(true), "known since creation: no CUDA call");
    assert_eq!(borrowed.priority(), owner.priority(), "read by a call CUDA allows during capture");
    assert_eq!(borrowed.device(), device);
    assert_eq!(borrowed.capture_status(), Ok(CaptureStatus::Active));
    assert_eq!(borrowed.capture_info().map(|info| info.status), Ok(CaptureStatus::Active));
    assert!(is_capture_misuse(&borrowed.id()));
    let (token, probe) = Token::new();
    assert!(is_capture_misuse(&borrowed.launch_host_fn(move || token.run())));
    assert!(probe.dropped() && probe.runs() == 0);
    assert!(end_foreign_capture(&owner), "the foreign capture survived every read");
    owner.synchronize().unwrap();
}

/// Begins a raw Global capture of `stream` with one kernel in it, as code outside this crate
/// does (`torch.cuda.graph`, cudarc's safe `begin_capture`): this crate does not count it.
fn begin_foreign_global_capture(stream: &Stream) {
    let global = sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal;
    // SAFETY: a live stream; a valid mode.
    assert_eq!(unsafe { sys::cudaStreamBeginCapture(stream.as_raw(), global) }, sys::cudaError::cudaSuccess);
    cuda_stream_tests::empty(stream).unwrap();
}

/// Ends the capture `begin_foreign_global_capture` began, and says whether it was intact.
fn end_foreign_capture(stream: &Stream) -> bool {
    let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
    // SAFETY: the stream's capture, begun on this thread; a valid out-pointer.
    let ended = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut graph) };
    if !graph.is_null() {
        // SAFETY: the graph the end returned, ours to destroy.
        assert_eq!(unsafe { sys::cudaGraphDestroy(graph) }, sys::cudaError::cudaSuccess);
    }
    ended == sys::cudaError::cudaSuccess
}

/// CUDA forbids "potentially unsafe" calls on every thread while any thread has a Global
/// capture, and invalidates the capture to refuse one. This crate's queries and synchronizes
/// run on a thread whose mode ignores other threads' captures: they answer, and a foreign
/// capture survives them. Inside `with_thread_mode(Global, ..)` the caller's choice holds.
#[test]
fn queries_on_other_threads_leave_a_foreign_global_capture_intact() {
    let device = gpu_or_skip!();
    let (captured, other) = (stream(device), stream(device));
    let timed = EventFlags { timing: true, ..EventFlags::default() };
    let (start, end) = (Event::new(device, timed).unwrap(), Event::new(device, timed).unwrap());
    start.record(&*other).unwrap();
    cuda_stream_tests::empty(&other).unwrap();
    end.record(&*other).unwrap();
    other.synchronize().unwrap();
    begin_foreign_global_capture(&captured);
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // A fresh thread: CUDA's default mode, Global.
                assert_eq!(end.query(), Ok(true));
                assert_eq!(end.synchronize(), Ok(()));
                assert_eq!(other.query(), Ok(true));
                assert_eq!(other.synchronize(), Ok(()));
                assert!(matches!(end.elapsed(&start), Ok(Some(_))));
            })
            .join()
            .unwrap();
    });
    assert!(end_foreign_capture(&captured), "the foreign Global capture survived the other thread's calls");

    // The caller's own choice of Global mode is kept: CUDA refuses the query and invalidates
    // the capture, as it documents.
    begin_foreign_global_capture(&captured);
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let refused = capture::with_thread_mode(capture::Global, || end.query()).unwrap();
                assert!(refused.is_err(), "in Global mode CUDA forbids the query: {refused:?}");
                // Outside it, the crate's mode again.
                assert_eq!(end.query(), Ok(true));
            })
            .join()
            .unwrap();
    });
    assert!(!end_foreign_capture(&captured), "the query made in Global mode invalidated the capture");
    captured.synchronize().unwrap();
}

/// A query racing the end of a foreign Global capture crashed libcuda (CUDA 13.0; 4 of 4 C++
/// probe runs of 4 s). Run in a child: the old failure killed the process.
#[test]
fn queries_racing_a_foreign_global_capture_never_crash_nor_invalidate_it() {
    let _device = gpu_or_skip!();
    child_test_prints("child_queries_race_foreign_global_captures", &["foreign captures"]);
}

#[test]
#[ignore = "run by queries_racing_a_foreign_global_capture_never_crash_nor_invalidate_it in a child"]
fn child_queries_race_foreign_global_captures() {
    let device = Device::new(0).unwrap();
    let (captured, other) = (stream(device), stream(device));
    let event = other.record_event().unwrap();
    other.synchronize().unwrap();
    let rounds = cuda_stream_tests::scaled(50_000, 2_000);
    let done = std::sync::atomic::AtomicBool::new(false);
    let start = Barrier::new(2);
    let mut broken = 0;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            start.wait();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(event.query(), Ok(true));
                assert_eq!(other.query(), Ok(true));
            }
        });
        let _stop = cuda_stream_tests::StopOnDrop(&done);
        start.wait();
        for _ in 0..rounds {
            begin_foreign_global_capture(&captured);
            if !end_foreign_capture(&captured) {
                broken += 1;
            }
        }
    });
    assert_eq!(broken, 0, "queries on another thread invalidated foreign Global captures");
    println!("{rounds} foreign captures raced by queries, none broken");
}

// 4. Non-primary contexts: what the crate creates lives in the primary context.

#[test]
fn handles_made_while_a_non_primary_context_is_current_survive_its_destruction() {
    let _device = gpu_or_skip!();
    child_test_prints("child_non_primary_context_destroyed", &["survived"]);
}

#[test]
#[ignore = "run by handles_made_while_a_non_primary_context_is_current_survive_its_destruction in a child"]
fn child_non_primary_context_destroyed() {
    let device = Device::new(0).unwrap();
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 2).unwrap();
    let before = live_streams();
    let context = CudaContext::new_non_primary(0, 0).expect("a non-primary context");
    let theirs = result::ctx::get_current().unwrap().expect("cudarc made its context current");
    assert_eq!(theirs, context.cu_ctx());
    // Everything made now: a stream, an event, a pool slot, a completion's internal event,
    // the thread's wait_stream marker.
    let created = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let event = Event::new(device, EventFlags::timing()).unwrap();
    let lease = pool.acquire().unwrap();
    block_on(created.completion()).unwrap();
    lease.wait_stream(&*created).unwrap();
    {
        let guard = device.make_current().unwrap();
        assert!(guard.switched(), "the primary context was pushed over cudarc's");
    }
    assert_eq!(result::ctx::get_current().unwrap(), Some(theirs), "the guard popped back to cudarc's context");
    // A stream of the non-primary context is refused, not lent as device 0's.
    let foreign = context.new_stream().unwrap();
    // SAFETY: cudarc keeps `foreign` alive while borrowed.
    let borrowed = unsafe { BorrowedStream::borrow_raw(foreign.cu_stream().cast()) };
    assert!(matches!(borrowed, Err(Error::ForeignContext { device: 0 })), "{borrowed:?}");
    // SAFETY: as above.
    let lent = unsafe { BorrowedStream::from_cudarc(&foreign) };
    assert!(matches!(lent, Err(Error::ForeignContext { device: 0 })), "{lent:?}");
    // SAFETY: never reached: the context is refused before anything is wrapped.
    let to_theirs = unsafe { created.to_cudarc(&context) };
    assert!(matches!(to_theirs, Err(Error::ForeignContext { device: 0 })), "{to_theirs:?}");
    // Its default stream (handle 0) is that context's legacy stream, not device 0's: refused.
    let default = context.default_stream();
    // SAFETY: as above.
    let lent = unsafe { BorrowedStream::from_cudarc(&default) };
    assert!(matches!(lent, Err(Error::ForeignContext { device: 0 })), "{lent:?}");
    drop((foreign, default));
    drop(context); // cudarc destroys its context
    // All of it still works, on the primary context, and drops cleanly.
    let log = TagLog::new(8).unwrap();
    cuda_stream_tests::tag(&created, &log, 1, Duration::ZERO).unwrap();
    created.record(&event).unwrap();
    lease.wait_event(&event).unwrap();
    cuda_stream_tests::tag(&lease, &log, 2, Duration::ZERO).unwrap();
    block_on(lease.completion()).unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
    drop(lease);
    let again = pool.acquire().unwrap();
    again.synchronize().unwrap();
    drop(again);
    drop((created, event, pool));
    assert_eq!(live_streams(), before, "every stream made meanwhile was destroyed");
    println!("survived the destruction of the non-primary context");
}

// 6. Captures begun by foreign code (cudarc's safe API) on a stream we borrow.

#[test]
fn a_stream_captured_by_cudarc_refuses_fn_once_host_fns_and_keeps_its_capture() {
    let device = gpu_or_skip!();
    let context = CudaContext::new(0).unwrap();
    let theirs = context.new_stream().unwrap();
    // SAFETY: cudarc keeps its stream alive; this thread alone begins and ends its capture.
    let ours = unsafe { BorrowedStream::from_cudarc(&theirs) }.unwrap();
    assert_eq!(ours.device(), device);
    theirs.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).unwrap();
    let (token, probe) = Token::new();
    assert!(is_capture_misuse(&ours.launch_host_fn(move || token.run())));
    assert!(probe.dropped() && probe.runs() == 0, "refused before CUDA: dropped, never run");
    let marker = ours.record_event_with(EventFlags::default(), cuda_stream::RecordFlags::external()).unwrap();
    cuda_stream_tests::empty(&ours).unwrap();
    let graph = theirs
        .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
        .expect("cudarc's capture survived")
        .expect("a graph");
    graph.launch().unwrap();
    theirs.synchronize().unwrap();
    assert_eq!(marker.query(), Ok(true), "the graph keeps the event alive; an external record leaves it queryable");
}

/// What a capture's graph owns (host functions, the events of external records and of waits
/// on work outside the capture) goes into the graph as nodes added by hand, never enqueued
/// stream-ordered, so a capture that foreign code ends in between cannot turn one into a real
/// run. The nodes keep the stream's order: each comes after the work captured before it, and
/// the work captured after it waits for it (the stream's dependencies were updated).
#[test]
fn nodes_a_capture_owns_are_added_to_its_graph_in_the_streams_order() {
    let device = gpu_or_skip!();
    let (captured, outside) = (stream(device), stream(device));
    let log = Arc::new(TagLog::new(16).unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::new(Event::new(device, EventFlags::default()).unwrap());
    let (hold, outside_spin) = (Duration::from_millis(30), Duration::from_millis(300));
    let seeing = |seen: &Arc<std::sync::Mutex<Vec<u32>>>| {
        let (log, seen) = (Arc::clone(&log), Arc::clone(seen));
        move || {
            seen.lock().unwrap().push(log.count());
            std::thread::sleep(hold);
        }
    };
    // Real work outside the capture, which the graph's wait node waits for.
    cuda_stream_tests::tag(&outside, &log, 100, outside_spin).unwrap();
    let mut capture = captured.begin_capture(capture::ThreadLocal).unwrap();
    cuda_stream_tests::tag(&captured, &log, 1, Duration::ZERO).unwrap();
    capture.launch_host_fn(&*captured, seeing(&seen)).unwrap();
    cuda_stream_tests::tag(&captured, &log, 2, Duration::ZERO).unwrap();
    captured.wait_stream(&*outside).unwrap();
    captured.record_with(&recorded, cuda_stream::RecordFlags::external()).unwrap();
    capture.launch_host_fn(&*captured, seeing(&seen)).unwrap();
    cuda_stream_tests::tag(&captured, &log, 3, Duration::ZERO).unwrap();
    let graph = capture.end().expect("the capture ended intact");
    assert_eq!(log.count(), 0, "nothing captured ran, and no host function ran for real");
    assert!(seen.lock().unwrap().is_empty());
    let kinds = node_kinds(graph.as_raw());
    for (kind, count) in [
        (sys::cudaGraphNodeType::cudaGraphNodeTypeHost, 2),
        (sys::cudaGraphNodeType::cudaGraphNodeTypeEventRecord, 1),
        (sys::cudaGraphNodeType::cudaGraphNodeTypeWaitEvent, 1),
        (sys::cudaGraphNodeType::cudaGraphNodeTypeKernel, 3),
    ] {
        assert_eq!(kinds.iter().filter(|&&k| k == kind).count(), count, "{kind:?} nodes in {kinds:?}");
    }
    assert_eq!(Arc::strong_count(&recorded), 2, "the graph holds the recorded event");
    let exec = graph.instantiate().unwrap();
    drop(graph);
    exec.launch(&*captured).unwrap();
    captured.synchronize().unwrap();
    let entries = log.entries();
    let tags: Vec<u32> = entries.iter().map(|entry| entry.tag).collect();
    assert_eq!(tags, [1, 2, 100, 3], "the wait node held tag 2's successors until the outside work");
    assert_eq!(*seen.lock().unwrap(), [1, 3], "each host node ran after the work before it");
    let gap = |from: usize, to: usize| Duration::from_nanos(entries[to].start_ns.saturating_sub(entries[from].end_ns));
    assert!(gap(0, 1) >= hold * 9 / 10, "tag 2 waited for the first host node: {:?}", gap(0, 1));
    assert!(gap(2, 3) >= hold * 9 / 10, "tag 3 waited for the second host node: {:?}", gap(2, 3));
    assert_eq!(recorded.query(), Ok(true), "the event-record node recorded the event");
    // The host nodes' closures hold the log, whose drop frees CUDA memory: it must not drop on
    // the thread where CUDA releases the graph's user objects.
    drop(exec);
    let released = cuda_stream_tests::poll_until(Duration::from_secs(5), || Arc::strong_count(&log) == 1);
    assert!(released.is_some(), "the executable's drop released its host functions");
}

/// The kind of every node of `graph`.
fn node_kinds(graph: sys::cudaGraph_t) -> Vec<sys::cudaGraphNodeType> {
    let mut count = 0;
    // SAFETY: a live graph of this thread; a null array asks for the count.
    assert_eq!(unsafe { sys::cudaGraphGetNodes(graph, std::ptr::null_mut(), &mut count) }, sys::cudaError::cudaSuccess);
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: room for `count` nodes.
    assert_eq!(unsafe { sys::cudaGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) }, sys::cudaError::cudaSuccess);
    nodes
        .into_iter()
        .map(|node| {
            let mut kind = sys::cudaGraphNodeType::cudaGraphNodeTypeEmpty;
            // SAFETY: a node of the live graph; a valid out-pointer.
            assert_eq!(unsafe { sys::cudaGraphNodeGetType(node, &mut kind) }, sys::cudaError::cudaSuccess);
            kind
        })
        .collect()
}

// 7. A pool never hands on a stream that came back capturing.

#[test]
fn a_lease_returned_with_a_leaked_capture_is_quarantined() {
    let _device = gpu_or_skip!();
    // In a child: the leaked capture stays counted (and refuses the legacy stream) for good.
    child_test_prints("child_lease_with_leaked_capture", &["quarantined"]);
}

#[test]
#[ignore = "run by a_lease_returned_with_a_leaked_capture_is_quarantined in a child process"]
fn child_lease_with_leaked_capture() {
    let device = Device::new(0).unwrap();
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 2).unwrap();
    let leaked_raw = {
        let lease = pool.acquire().unwrap();
        std::mem::forget(lease.begin_capture(capture::Relaxed).unwrap());
        lease.as_raw()
    };
    assert_eq!(pool.quarantined(), 1);
    let next = pool.acquire().unwrap();
    assert_ne!(next.as_raw(), leaked_raw, "the capturing stream is never leased again");
    assert_eq!(next.capture_status(), Ok(CaptureStatus::None));
    assert!(matches!(pool.acquire(), Err(Error::PoolExhausted { capacity: 2 })), "the quarantined slot is gone");
    println!("quarantined the stream of the leaked capture");
}

// 8. Two threads attach objects to the graph of one capture at once.

#[test]
fn external_records_from_two_threads_into_one_capture_are_serialized() {
    let device = gpu_or_skip!();
    let (origin, joined) = (stream(device), stream(device));
    let capture = origin.begin_capture(capture::Relaxed).unwrap();
    joined.wait_stream(&*origin).unwrap();
    let rounds = cuda_stream_tests::scaled(2_000, 200);
    let events: Vec<Arc<Event>> = std::thread::scope(|scope| {
        let workers: Vec<_> = [&origin, &joined]
            .into_iter()
            .map(|stream| {
                scope.spawn(move || {
                    (0..rounds)
                        .map(|_| {
                            stream
                                .record_event_with(EventFlags::default(), cuda_stream::RecordFlags::external())
                                .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|worker| worker.join().unwrap()).collect()
    });
    origin.wait_stream(&*joined).unwrap();
    let graph = capture.end().expect("the capture survived concurrent attachments");
    let exec = graph.instantiate().unwrap();
    drop((graph, events)); // the graph keeps every event alive
    exec.launch(&*origin).unwrap();
    origin.synchronize().unwrap();
}
