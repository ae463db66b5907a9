//! Joins and forks from other threads while captures begin and end: a spawned thread makes a
//! stream wait on the stream the main thread captures (or on an event recorded in its
//! capture), then records, launches, allocates, copies and awaits completions on it, racing the
//! captures' begins, joins back and ends (the storm of `tests/whole/capture_membership.rs`,
//! inside programs).

use super::*;
use cuda_stream::DeviceBuffer;

/// CUDA's stream-capture errors (`cudaErrorStreamCaptureUnsupported` to
/// `cudaErrorStreamCaptureWrongThread`): what a wait, and a capture's end, racing a join from
/// another thread may earn (a capture left with a stream that another thread forked into it
/// after its owner joined back ends unjoined, and a wait in such a capture is CUDA's to answer).
const CAPTURE_ERRORS: std::ops::RangeInclusive<i32> = 900..=908;

/// The oracle of the storm: `Ok`, a refusal of this crate, or one of CUDA's capture errors.
pub(crate) fn expect_storm<T>(what: &str, result: &Result<T>) {
    note(what, result);
    match result {
        Ok(_) | Err(Error::CaptureMisuse(_)) => {}
        Err(Error::Cuda { code, .. }) if CAPTURE_ERRORS.contains(&code.0) => {}
        Err(other) => panic!("{what}: racing a capture's join from another thread: {other:?}"),
    }
}

/// What the capturing thread hands the joining thread: the events recorded in its captures.
type Published = Mutex<Vec<Arc<Event>>>;

/// The joining thread: operations on `x` (made to join `origin`'s captures), until `stop`.
fn joiner(x: &Stream, origin: &Stream, published: &Published, stop: &AtomicBool, log: &TagLog, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut steps = 0;
    while !stop.load(Ordering::SeqCst) && steps < 400 {
        steps += 1;
        match rng.below(8) {
            0 | 1 => expect_storm("x.wait_stream(capturing)", &x.wait_stream(origin)),
            2 => {
                let event = published.lock().unwrap_or_else(PoisonError::into_inner).last().cloned();
                match event {
                    Some(event) => {
                        // Once that capture has ended, CUDA refuses a wait on the event it
                        // recorded there with cudaErrorInvalidValue (a typed error; the crate
                        // cannot tell an ended capture from one in progress without a query).
                        let waited = x.wait_event(&event);
                        match &waited {
                            Err(Error::Cuda { code, .. }) if code.0 == 1 => {
                                let _ = note("x.wait_event (ended capture)", &waited);
                            }
                            _ => expect_storm("x.wait_event(recorded in a capture)", &waited),
                        }
                    }
                    None => skip(),
                }
            }
            3 => expect_storm("x.record_event", &x.record_event()),
            4 => expect_storm("kernel launch (x)", &kernel(x, log, byte(&mut rng), byte(&mut rng) % 8)),
            5 => {
                let done = block_on(x.completion());
                expect_storm("Completion (x, block_on)", &done);
            }
            6 => {
                let buffer = DeviceBuffer::<u32, _>::new(x, 64);
                expect_storm("DeviceBuffer::new (x)", &buffer);
                if let Ok(mut buffer) = buffer {
                    let mut back = vec![0u32; 64];
                    let filled = buffer.fill_bytes(x, 0x5a).and_then(|()| buffer.copy_to_slice(x, &mut back));
                    expect_storm("DeviceBuffer::fill_bytes, copy_to_slice (x)", &filled);
                    if filled.is_ok() {
                        assert!(back.iter().all(|&word| word == 0x5a5a_5a5a), "real memory, filled");
                    }
                }
            }
            _ => expect_storm("capturing.wait_stream(x)", &origin.wait_stream(x)),
        }
        std::thread::yield_now();
    }
}

impl<'p> World<'p> {
    /// The main thread captures a stream of its own 1 to 3 times (ThreadLocal or Relaxed: a
    /// host function and a record in each), joining back whatever joined, while a spawned
    /// thread makes another stream join and leave. Every result is `Ok`, a refusal of this
    /// crate or one of CUDA's capture errors; every graph that ended is kept; the closures are
    /// freed; the streams are dropped (counted as stranded if still capturing). Never during a
    /// capture of the program.
    pub(crate) fn join_race(&mut self, seed: u64) {
        let mut rng = Rng::new(seed);
        let device = self.device;
        let made =
            (Stream::new(device, StreamOptions::non_blocking()), Stream::new(device, StreamOptions::non_blocking()));
        note("Stream::new", &made.0);
        note("Stream::new", &made.1);
        let (Ok(origin), Ok(x)) = made else { return };
        let published: Published = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let log = self.log;
        let rounds = 1 + rng.below(3);
        let thread_seed = rng.next_u64();
        let mut graph_tokens = Vec::new();
        let mut graphs = Vec::new();
        std::thread::scope(|scope| {
            let _stop = cuda_stream_tests::StopOnDrop(&stop);
            let (x, origin_ref, published_ref, stop_ref) = (&x, &origin, &published, &stop);
            let joining = scope.spawn(move || joiner(x, origin_ref, published_ref, stop_ref, log, thread_seed));
            for round in 0..rounds {
                let mode = 1 + byte(&mut rng) % 2;
                let begun = AnyCapture::begin(&origin, mode);
                note("StreamRef::begin_capture (join race)", &begun);
                let mut capture = match begun {
                    Ok(capture) => capture,
                    Err(error) => {
                        // The joiner's `capturing.wait_stream(x)` may have made the origin join
                        // a capture that `x` was left in: CUDA refuses to begin one on it (any
                        // of its errors, as in the storm).
                        assert!(
                            matches!(error, Error::Cuda { .. } | Error::CaptureMisuse(_)),
                            "a begin racing a join failed: {error:?}"
                        );
                        continue;
                    }
                };
                let (token, state) = Token::new();
                let added = capture.launch_host_fn(&origin, move || token.run());
                note("Capture::launch_host_fn (join race)", &added);
                graph_tokens.push(state);
                let recorded = origin.record_event();
                expect_storm("StreamRef::record_event (in a capture)", &recorded);
                if let Ok(event) = recorded {
                    published.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::new(event));
                }
                std::thread::sleep(Duration::from_micros(50 + 100 * rng.below(4) as u64));
                let id = capture.id();
                if x.capture_info().is_ok_and(|info| info.status == CaptureStatus::Active && info.id == id) {
                    expect_storm("wait_stream (join back x)", &origin.wait_stream(x));
                }
                let ended = capture.end();
                expect_storm("Capture::end (join race)", &ended);
                if let Ok(graph) = ended {
                    graphs.push(graph);
                }
                trace(format_args!("join race round {round} ended"));
            }
            stop.store(true, Ordering::SeqCst);
            if let Err(payload) = joining.join() {
                panic!("the joining thread failed: {}", panic_message(payload.as_ref()));
            }
        });
        for graph in graphs {
            if self.graphs.len() < MAX_GRAPHS {
                self.graphs.push(graph);
            }
        }
        self.graph_tokens.extend(graph_tokens);
        drop(published);
        for stream in [&origin, &x] {
            let status = stream.capture_status();
            note("StreamRef::capture_status", &status);
            match status {
                Ok(CaptureStatus::None) => {
                    note("StreamRef::synchronize", &stream.synchronize());
                }
                _ => self.stranded += 1,
            }
        }
    }
}
