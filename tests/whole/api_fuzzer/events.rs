//! Events recorded in captures, and what is known of every event.

use super::*;

/// What the program knows of an event, for the checks of the calls on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Known {
    pub(crate) timing: bool,
    /// Recorded successfully at least once (the crate's own rule for `elapsed`).
    pub(crate) recorded: bool,
    /// Whether its last record went into a capture (`Some(false)` also when never recorded);
    /// `None` when unknown: another thread may record it meanwhile, or a record failed in a way
    /// that may have come after the record was made.
    pub(crate) captured: Option<bool>,
}

/// An event and what the program knows of it.
#[derive(Clone, Copy)]
pub(crate) struct Seen<'a> {
    pub(crate) event: &'a Arc<Event>,
    pub(crate) known: Known,
}

/// What is in progress while calls on events are made, and so what they may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum During {
    /// No capture at all: an event last recorded outside one works normally.
    Nothing,
    /// A capture this crate counts (or a Relaxed raw one), here or on another thread: the crate
    /// refuses what would break it, and queries that reach CUDA are harmless.
    Capture,
    /// A raw Global or ThreadLocal capture of this thread, which the crate does not count: a
    /// query that reached CUDA would invalidate it, so only calls on captured events (refused
    /// before CUDA sees them) are made.
    StrictRawCapture,
}

/// Whether a record on `stream` now goes into a capture, as the crate decides it: the stream
/// reports a capture (active or invalidated); never the legacy stream (whose status is not
/// read: during a Global capture the read itself would fail). `None` when unreadable.
pub(crate) fn records_into_capture(stream: &StreamRef) -> Option<bool> {
    if is_legacy(stream) {
        return Some(false);
    }
    let status = stream.capture_status();
    note("StreamRef::capture_status", &status);
    status.ok().map(|status| status != CaptureStatus::None)
}

/// Whether `stream` is still in the active capture `id` (not invalidated, not ended).
pub(crate) fn capture_intact(stream: &StreamRef, id: u64) -> bool {
    let info = stream.capture_info();
    note("StreamRef::capture_info", &info);
    matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == id)
}

/// Checks a query, synchronize or completion of an event whose last record the program knows as
/// `captured`: refused with `CaptureMisuse` while that record is a captured one; never
/// `CaptureMisuse` once recorded outside, while no capture is in progress (`during`); `Ok` or
/// `CaptureMisuse` when unknown (another thread may record it meanwhile).
pub(crate) fn expect_event_call<T: std::fmt::Debug>(
    what: &str,
    captured: Option<bool>,
    during: During,
    result: &Result<T>,
) {
    let refused = matches!(result, Err(Error::CaptureMisuse(_)));
    match captured {
        Some(true) => {
            assert!(
                refused,
                "{what}: an event last recorded in a capture must be refused with CaptureMisuse: {result:?}"
            )
        }
        Some(false) if during == During::Nothing => {
            assert!(!refused, "{what}: an event last recorded outside any capture works normally: {result:?}")
        }
        Some(false) => {}
        None => assert!(
            result.is_ok() || refused,
            "{what}: an event recorded in a capture, perhaps recorded again meanwhile, gives Ok or CaptureMisuse: \
             {result:?}"
        ),
    }
}

/// Checks `end.elapsed(start)` against what the program knows of the two events.
pub(crate) fn expect_elapsed(what: &str, end: Known, start: Known, during: During, result: &Result<Option<Duration>>) {
    if !end.timing || !start.timing {
        assert!(
            matches!(result, Err(Error::TimingDisabled | Error::EventNotRecorded)),
            "{what}: elapsed with an event made without timing must be refused: {result:?}"
        );
    } else if end.captured.is_none() || start.captured.is_none() {
        assert!(
            !matches!(result, Err(Error::Cuda { .. })),
            "{what}: elapsed with an event perhaps recorded again meanwhile gives a typed outcome: {result:?}"
        );
    } else if !end.recorded || !start.recorded {
        assert!(
            matches!(result, Err(Error::EventNotRecorded)),
            "{what}: elapsed with an event never recorded must be EventNotRecorded: {result:?}"
        );
    } else if end.captured == Some(true) || start.captured == Some(true) {
        assert!(
            matches!(result, Err(Error::CaptureMisuse(_))),
            "{what}: elapsed with an event last recorded in a capture (end {:?}, start {:?}) must be refused with \
             CaptureMisuse: {result:?}",
            end.captured,
            start.captured,
        );
    } else if during == During::Nothing {
        assert!(
            !matches!(result, Err(Error::CaptureMisuse(_))),
            "{what}: elapsed between events last recorded outside any capture works normally: {result:?}"
        );
    }
}

/// `count` calls picked by `rng` on `event`, with `other` as the other end of `elapsed`:
/// `query`, `synchronize`, `elapsed` both ways, `completion` blocked on or kept pending, each
/// checked against what the program knows. Every call is safe to block on: an event is either
/// captured (refused at once) or marks real work. Returns the completions kept pending.
pub(crate) fn event_calls(
    what: &str,
    rng: &mut Rng,
    count: usize,
    event: Seen<'_>,
    other: Seen<'_>,
    during: During,
) -> Vec<Completion> {
    // Inside a raw Global or ThreadLocal capture of this thread only a captured event is used,
    // and only as the end of `elapsed` (whose end is queried first: refused).
    let real_queries = during != During::StrictRawCapture;
    let captured = event.known.captured;
    let mut kept = Vec::new();
    for _ in 0..count {
        match rng.below(6) {
            0 => {
                let result = event.event.query();
                note(what, &result);
                expect_event_call(&format!("{what}: Event::query"), captured, during, &result);
            }
            1 => {
                let result = event.event.synchronize();
                note(what, &result);
                expect_event_call(&format!("{what}: Event::synchronize"), captured, during, &result);
            }
            2 => {
                let result = event.event.elapsed(other.event);
                note(what, &result);
                expect_elapsed(&format!("{what}: Event::elapsed"), event.known, other.known, during, &result);
            }
            3 if real_queries => {
                let result = other.event.elapsed(event.event);
                note(what, &result);
                expect_elapsed(
                    &format!("{what}: Event::elapsed (as start)"),
                    other.known,
                    event.known,
                    during,
                    &result,
                );
            }
            3 | 4 => {
                let result = block_on(event.event.completion());
                note(what, &result);
                expect_event_call(&format!("{what}: Event::completion"), captured, during, &result);
            }
            _ => {
                let completion = event.event.completion();
                note_infallible();
                if captured == Some(true) {
                    assert!(completion.is_complete(), "{what}: a captured event's completion resolves at once");
                }
                kept.push(completion);
            }
        }
    }
    kept
}

/// Runs `f` here, or on a spawned thread when `spawn` (a failed check there fails the program).
pub(crate) fn here_or_spawned<T: Send>(spawn: bool, f: impl FnOnce() -> T + Send) -> T {
    if !spawn {
        return f();
    }
    std::thread::scope(|scope| scope.spawn(f).join())
        .unwrap_or_else(|payload| panic!("a spawned thread failed: {}", panic_message(payload.as_ref())))
}

/// A thread that calls an event recorded in the capture while the capture ends.
pub(crate) struct Racer {
    pub(crate) event: Arc<Event>,
    /// The other end of its `elapsed` calls.
    pub(crate) other: Arc<Event>,
    /// Whether it records the event once, outside the capture, meanwhile.
    pub(crate) rerecord: bool,
    pub(crate) seed: u64,
}

/// A racer's thread: waits until the capture's end is about to be made, then makes 2 to 7
/// calls on its event, one of them perhaps a record outside the capture on `rerecord_on`.
/// Returns the completions it kept and the record's result.
pub(crate) fn race(
    racer: &Racer,
    mine: Known,
    other: Known,
    rerecord_on: Option<&StreamRef>,
    barrier: &Barrier,
) -> (Vec<Completion>, Option<Result<()>>) {
    barrier.wait();
    let mut rng = Rng::new(racer.seed);
    let steps = 2 + rng.below(6);
    let rerecord_at = rerecord_on.map(|_| rng.below(steps));
    let mut kept = Vec::new();
    let mut rerecorded = None;
    for step in 0..steps {
        match rerecord_on {
            Some(stream) if rerecord_at == Some(step) => {
                let result = stream.record(&racer.event);
                note("racer: StreamRef::record (outside the capture)", &result);
                rerecorded = Some(result);
            }
            _ => {
                let (event, other) =
                    (Seen { event: &racer.event, known: mine }, Seen { event: &racer.other, known: other });
                kept.extend(event_calls("racer", &mut rng, 1, event, other, During::Capture));
            }
        }
    }
    (kept, rerecorded)
}

impl<'p> World<'p> {
    /// An event recorded in a capture: inside one, recorded on the capturing stream, then
    /// queried, synchronized, timed and awaited, here or on a spawned thread, perhaps again by
    /// a thread racing the capture's end; outside one, an event last recorded in a capture
    /// checked, recorded outside again, and used normally.
    pub(crate) fn captured_event(&mut self, e: u32, action: u8, seed: u64, active: Option<&mut Active<'_>>) {
        let mut rng = Rng::new(seed);
        match active {
            Some(active) => self.record_in_capture(e, action, &mut rng, active),
            None => self.record_outside_again(e, action, &mut rng),
        }
    }

    /// [`World::captured_event`] inside a capture: an event of the program (or a new one)
    /// recorded on the capturing stream, its refused calls here or on a spawned thread, perhaps a
    /// completion of its last real record pending across that record, perhaps a racer for the
    /// capture's end.
    pub(crate) fn record_in_capture(&mut self, e: u32, action: u8, rng: &mut Rng, active: &mut Active<'_>) {
        let origin = active.origin;
        let index = match self.event_index(e) {
            Some(index) if action & 0x80 == 0 || self.events.len() >= MAX_EVENTS => Some(index),
            _ => self.push_event(action & 1 != 0),
        };
        let Some(index) = index else { return skip() };
        // Awaiting its last real record while it is recorded into the capture: the future
        // resolves, Ok or (seen captured at the reactor's next pass) CaptureMisuse.
        let before = (action & 2 != 0 && self.events[index].captured == Some(false)).then(|| {
            note_infallible();
            self.events[index].event.completion()
        });
        let id = active.capture.id();
        // A pending completion may have the reactor query its event as the record goes into the
        // capture, which CUDA answers by invalidating the capture (a limit the crate documents):
        // the capture is checked only while no completion of the program is pending.
        let intact = before.is_none() && self.quiet() && capture_intact(origin, id);
        let event = Arc::clone(&self.events[index].event);
        let result = origin.record(&event);
        note("StreamRef::record (in the capture)", &result);
        let into = records_into_capture(origin);
        self.recorded(index, &result, Some(active.generation), into);
        let known = self.events[index].known();
        let other = self.event_index(pick(rng)).unwrap_or(index);
        let other_known = self.events[other].known();
        let other = Arc::clone(&self.events[other].event);
        let count = 1 + rng.below(4);
        let mut thread_rng = Rng::new(rng.next_u64());
        let kept = here_or_spawned(action & 4 != 0, || {
            let (mine, other) = (Seen { event: &event, known }, Seen { event: &other, known: other_known });
            event_calls("event recorded in the capture", &mut thread_rng, count, mine, other, During::Capture)
        });
        self.completions.extend(kept);
        if let Some(before) = before {
            if action & 8 != 0 {
                let result = block_on(before);
                note("Event::completion (pending across a record into a capture)", &result);
                // Or CUDA's capture error, when the reactor's query met the record (see above).
                assert!(
                    matches!(&result, Ok(()) | Err(Error::CaptureMisuse(_)))
                        || result
                            .as_ref()
                            .is_err_and(|error| error.cuda_code().is_some_and(CudaCode::is_capture_error)),
                    "a completion pending while its event is recorded into a capture gives Ok or CaptureMisuse: \
                     {result:?}"
                );
            } else {
                self.completions.push(before);
            }
        }
        if intact {
            assert!(capture_intact(origin, id), "refused calls on an event recorded in a capture leave it active");
            active.checked = true;
        }
        if action & 16 != 0 {
            active.racers.push(Racer { event, other, rerecord: action & 32 != 0, seed: rng.next_u64() });
        }
    }

    /// [`World::captured_event`] outside a capture: an event last recorded in one (if any)
    /// refused, recorded outside on a slot, then working normally, here or on spawned threads.
    pub(crate) fn record_outside_again(&mut self, e: u32, action: u8, rng: &mut Rng) {
        let Some(first) = self.event_index(e) else { return skip() };
        // An event last recorded in a capture, if there is one.
        let count = self.events.len();
        let index = (0..count)
            .map(|offset| (first + offset) % count)
            .find(|&index| self.events[index].captured == Some(true))
            .unwrap_or(first);
        let other = self.event_index(pick(rng)).unwrap_or(index);
        let calls = 1 + rng.below(3);
        let mut thread_rng = Rng::new(rng.next_u64());
        let (mine, theirs) = (self.events[index].seen(), self.events[other].seen());
        let kept = here_or_spawned(action & 4 != 0, || {
            event_calls("event before its record outside", &mut thread_rng, calls, mine, theirs, During::Nothing)
        });
        self.completions.extend(kept);
        let Some((stream, _)) = self.pick(pick(rng), None) else { return };
        let event = Arc::clone(&self.events[index].event);
        let result = stream.record(&event);
        note("StreamRef::record (outside any capture)", &result);
        let into = records_into_capture(stream);
        self.recorded(index, &result, None, into);
        let (mine, theirs) = (self.events[index].seen(), self.events[other].seen());
        let kept = here_or_spawned(action & 8 != 0, || {
            event_calls("event recorded outside again", &mut thread_rng, calls, mine, theirs, During::Nothing)
        });
        self.completions.extend(kept);
    }
}

impl<'p> World<'p> {
    /// Runs one of the operations on events ([`World::exec`]).
    pub(crate) fn event_op(&mut self, op: Op, active: Option<&mut Active<'_>>) {
        let origin: Option<&Stream> = active.as_ref().map(|active| active.origin);
        let generation = active.as_ref().map(|active| active.generation);
        let capturing = active.is_some();
        let device = self.device;
        match op {
            Op::NewEvent { flags } => {
                if self.events.len() >= MAX_EVENTS {
                    return skip();
                }
                let timing = flags & 1 != 0;
                let flags = EventFlags { timing, blocking_sync: flags & 2 != 0, interprocess: false };
                let event = Event::new(device, flags);
                note("Event::new", &event);
                if let Ok(event) = event {
                    self.events.push(Ev {
                        event: Arc::new(event),
                        timing,
                        recorded: false,
                        taint: None,
                        captured: Some(false),
                    });
                }
            }
            Op::DropEvent { e } => match self.event_index(e) {
                Some(index) => drop(self.events.remove(index)),
                None => skip(),
            },
            Op::Record { s, e } => {
                let (Some((stream, _)), Some(index)) = (self.pick(s, origin), self.event_index(e)) else {
                    return skip();
                };
                let result = stream.record(&self.events[index].event);
                note("StreamRef::record", &result);
                let into = records_into_capture(stream);
                self.recorded(index, &result, generation, into);
            }
            Op::RecordEvent { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let event = stream.record_event();
                note("StreamRef::record_event", &event);
                if let Ok(event) = event {
                    let captured = records_into_capture(stream);
                    if self.events.len() < MAX_EVENTS {
                        self.events.push(Ev {
                            event: Arc::new(event),
                            timing: false,
                            recorded: true,
                            taint: generation,
                            captured,
                        });
                    }
                }
            }
            Op::WaitEvent { s, e } => {
                let (Some((stream, _)), Some(index)) = (self.pick(s, origin), self.event_index(e)) else {
                    return skip();
                };
                let event = &self.events[index];
                if !waitable(event.taint, generation) {
                    return skip();
                }
                note("StreamRef::wait_event", &stream.wait_event(&event.event));
            }
            Op::EventUse { e, action } => {
                let Some(index) = self.event_index(e) else { return skip() };
                let event = &self.events[index];
                let settled = event.taint.is_none();
                // A captured event is refused at once: safe to synchronize and await.
                let captured = event.captured;
                let during = if capturing { During::Capture } else { During::Nothing };
                match action % 4 {
                    1 if settled || captured == Some(true) => {
                        let result = event.event.synchronize();
                        note("Event::synchronize", &result);
                        expect_event_call("Event::synchronize", captured, during, &result);
                    }
                    2 => {
                        let handle = event.event.ipc_handle();
                        note("Event::ipc_handle", &handle);
                        assert!(
                            matches!(handle, Err(Error::NotInterprocess)),
                            "ipc_handle of an event made without the interprocess flag must be NotInterprocess"
                        );
                    }
                    3 if settled || captured == Some(true) => {
                        let completion = event.event.completion();
                        note_infallible();
                        if captured == Some(true) {
                            assert!(completion.is_complete(), "a captured event's completion resolves at once");
                            let result = block_on(completion);
                            note("Event::completion (block_on)", &result);
                            expect_event_call("Event::completion", captured, during, &result);
                        } else {
                            self.completions.push(completion);
                        }
                    }
                    _ => {
                        let result = event.event.query();
                        note("Event::query", &result);
                        expect_event_call("Event::query", captured, during, &result);
                    }
                }
            }
            Op::Elapsed { end, start } => {
                let (Some(end), Some(start)) = (self.event_index(end), self.event_index(start)) else {
                    return skip();
                };
                let (end, start) = (&self.events[end], &self.events[start]);
                let elapsed = end.event.elapsed(&start.event);
                note("Event::elapsed", &elapsed);
                let during = if capturing { During::Capture } else { During::Nothing };
                expect_elapsed("Event::elapsed", end.known(), start.known(), during, &elapsed);
            }
            _ => unreachable!("not one of the operations on events: {op:?}"),
        }
    }
}
