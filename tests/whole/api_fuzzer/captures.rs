//! The crate's captures: begun, host functions added, joined back, ended or dropped, racing
//! threads that call the events recorded in them.

use super::*;

/// A capture of any mode.
pub(crate) enum AnyCapture<'a> {
    Global(Capture<'a, capture::Global>),
    ThreadLocal(Capture<'a, capture::ThreadLocal>),
    Relaxed(Capture<'a, capture::Relaxed>),
}

impl AnyCapture<'_> {
    pub(crate) fn begin(stream: &StreamRef, mode: u8) -> Result<AnyCapture<'_>> {
        match mode % 3 {
            0 => stream.begin_capture(capture::Global).map(AnyCapture::Global),
            1 => stream.begin_capture(capture::ThreadLocal).map(AnyCapture::ThreadLocal),
            _ => stream.begin_capture(capture::Relaxed).map(AnyCapture::Relaxed),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        match self {
            AnyCapture::Global(capture) => capture.id(),
            AnyCapture::ThreadLocal(capture) => capture.id(),
            AnyCapture::Relaxed(capture) => capture.id(),
        }
    }

    pub(crate) fn launch_host_fn<F: Fn() + Send + Sync + 'static>(&mut self, stream: &StreamRef, f: F) -> Result<()> {
        match self {
            AnyCapture::Global(capture) => capture.launch_host_fn(stream, f),
            AnyCapture::ThreadLocal(capture) => capture.launch_host_fn(stream, f),
            AnyCapture::Relaxed(capture) => capture.launch_host_fn(stream, f),
        }
    }

    pub(crate) fn end(self) -> Result<Graph> {
        match self {
            AnyCapture::Global(capture) => capture.end(),
            AnyCapture::ThreadLocal(capture) => capture.end(),
            AnyCapture::Relaxed(capture) => capture.end(),
        }
    }
}

/// The capture in progress: at most one at a time, of an owned non-blocking stream, always on
/// the program's main thread.
pub(crate) struct Active<'a> {
    pub(crate) capture: AnyCapture<'a>,
    pub(crate) origin: &'a Stream,
    /// Which capture of the program this is (for the events recorded during it).
    pub(crate) generation: u64,
    /// Refused calls on events recorded in it were made: if it is still active when it ends, it
    /// must end `Ok`.
    pub(crate) checked: bool,
    /// Threads that call events recorded in it while it ends.
    pub(crate) racers: Vec<Racer>,
}

/// Adds a repeatable host function to the capture on `target`, and checks what must hold.
pub(crate) fn capture_host_fn(capture: &mut AnyCapture<'_>, target: &StreamRef, probe: bool) -> Arc<AtomicU8> {
    // Certainly outside the capture: the legacy stream, or a stream that reports no capture.
    let outside = is_legacy(target) || {
        let info = target.capture_info();
        note("StreamRef::capture_info", &info);
        matches!(info, Ok(info) if info.status == CaptureStatus::None)
    };
    let (token, state) = Token::new();
    let result = capture.launch_host_fn(target, move || {
        token.run();
        if probe {
            probe_refusal();
        }
    });
    let what = "Capture::launch_host_fn";
    note(what, &result);
    if outside {
        assert!(
            matches!(result, Err(Error::CaptureMisuse(_))),
            "{what} on a stream outside the capture must be refused with CaptureMisuse: {result:?}"
        );
    }
    if matches!(result, Err(Error::CaptureMisuse(_))) {
        expect_dropped_unrun(&state, what);
    }
    assert_eq!(state.load(Ordering::SeqCst) & RAN, 0, "{what}: a captured host function ran during the capture");
    state
}

/// Ends `capture`, or drops it when `discard`; the end's result.
pub(crate) fn finish_capture(capture: AnyCapture<'_>, discard: bool) -> Option<Result<Graph>> {
    if discard {
        drop(capture);
        note_infallible();
        None
    } else {
        let graph = capture.end();
        note("Capture::end", &graph);
        Some(graph)
    }
}

impl<'p> World<'p> {
    /// Begins a capture (`run.ops[start]` is a `BeginCapture`), runs the operations after it
    /// with the capture active until an `EndCapture` or the end of the program, and ends it.
    /// Returns the index of the next operation.
    pub(crate) fn capture_block(&mut self, run: &Run, start: usize) -> usize {
        let Op::BeginCapture { mode, fresh, s } = run.ops[start] else {
            unreachable!("capture_block starts at a BeginCapture")
        };
        // The stream to capture: an owned non-blocking slot, moved out for the capture, or a
        // new one. It goes back to the slots afterwards.
        let mut origin: Option<Stream> = None;
        guarded(run, start, || {
            let candidates: Vec<usize> = (0..self.slots.len())
                .filter(|&index| {
                    let slot = &self.slots[index];
                    slot.non_blocking && matches!(slot.stream, HeldStream::Owned(_))
                })
                .collect();
            if !fresh && !candidates.is_empty() {
                let index = candidates[s as usize % candidates.len()];
                if let HeldStream::Owned(stream) = self.slots.remove(index).stream {
                    origin = Some(stream);
                }
            } else {
                let stream = Stream::new(self.device, StreamOptions::non_blocking());
                note("Stream::new", &stream);
                origin = stream.ok();
            }
        });
        let Some(origin) = origin else { return start + 1 };
        self.generation += 1;
        let generation = self.generation;
        // A block, so that `active` (which borrows `origin`) is gone before `origin` moves.
        let next = {
            let mut active = None;
            guarded(run, start, || {
                let begun = AnyCapture::begin(&origin, mode);
                note("StreamRef::begin_capture", &begun);
                if let Ok(capture) = begun {
                    let info = origin.capture_info();
                    note("StreamRef::capture_info", &info);
                    assert!(
                        matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == capture.id()),
                        "a capture just begun is active, with its id: {info:?}"
                    );
                    active = Some(Active { capture, origin: &origin, generation, checked: false, racers: Vec::new() });
                }
            });
            let mut next = start + 1;
            if let Some(mut active) = active {
                let mut discard = false;
                let mut end_at = run.ops.len();
                while next < run.ops.len() {
                    let op = run.ops[next];
                    next += 1;
                    if let Op::EndCapture { discard: how } = op {
                        (discard, end_at) = (how, next - 1);
                        break;
                    }
                    guarded(run, next - 1, || self.exec(op, Some(&mut active)));
                }
                guarded(run, end_at, || self.end_capture(active, discard));
            }
            next
        };
        self.slots.push(Slot { stream: HeldStream::Owned(origin), non_blocking: true });
        next
    }

    /// Joins back every stream that joined the capture, then ends it (or drops the guard),
    /// while its racers (if any) call the events recorded in it.
    pub(crate) fn end_capture(&mut self, active: Active<'_>, discard: bool) {
        let Active { mut capture, origin, generation, checked, racers } = active;
        let id = capture.id();
        // Its capture buffers still allocated are freed before the joins (`graph_memory.rs`).
        free_before_end(self, &mut capture, origin, generation);
        for slot in &self.slots {
            if is_legacy(&slot.stream) {
                continue;
            }
            let info = slot.stream.capture_info();
            note("StreamRef::capture_info", &info);
            if matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == id) {
                note("StreamRef::wait_stream (join)", &origin.wait_stream(&slot.stream));
            }
        }
        // Refused calls on its events were made: still active now, it must end Ok. (Checked only
        // while no completion is pending: see `record_in_capture`. None is made before the end
        // but the racers', on events no longer recorded into it.)
        let intact = checked && self.quiet() && capture_intact(origin, id);
        let (ended, rerecorded) = if racers.is_empty() {
            (finish_capture(capture, discard), false)
        } else {
            self.race_capture_end(capture, discard, &racers, generation)
        };
        if intact && !rerecorded {
            if let Some(graph) = &ended {
                assert!(
                    graph.is_ok(),
                    "a capture still active after only refused calls on its captured events (racing its end or \
                     not) must end Ok: {graph:?}"
                );
            }
        }
        // A capture that did memory work of `graph_memory.rs`: its graph goes there, with what
        // it holds.
        let memory = self.graph_mem.capture_ended(generation);
        if let Some(Ok(graph)) = ended {
            match memory {
                Some(holds) => self.graph_mem.keep_captured(graph, holds),
                None if self.graphs.len() < MAX_GRAPHS => self.graphs.push(graph),
                None => {}
            }
        }
        let status = origin.capture_status();
        note("StreamRef::capture_status", &status);
        assert!(
            matches!(status, Ok(CaptureStatus::None)),
            "the captured stream is out of capture once the capture ended: {status:?}"
        );
    }

    /// Ends `capture` (or drops it) while `racers` call events recorded in it, on threads of
    /// their own; some of them record their event again, outside the capture, on a slot that is
    /// certainly outside it. Returns the end's result, and whether an event was recorded again
    /// (then the calls on it are only known to give `Ok` or `CaptureMisuse`, and the end `Ok`
    /// or a typed error).
    pub(crate) fn race_capture_end(
        &mut self,
        capture: AnyCapture<'_>,
        discard: bool,
        racers: &[Racer],
        generation: u64,
    ) -> (Option<Result<Graph>>, bool) {
        let outside = (0..self.slots.len()).find(|&index| {
            let stream = &self.slots[index].stream;
            !is_legacy(stream) && !is_thread_bound(stream) && records_into_capture(stream) == Some(false)
        });
        let rerecorded: Vec<&Arc<Event>> =
            racers.iter().filter(|racer| racer.rerecord && outside.is_some()).map(|racer| &racer.event).collect();
        // What is known of an event now: a racer's record makes it unknown; one the program
        // dropped meanwhile may have been recorded since the racer was made.
        let known = |event: &Arc<Event>| -> Known {
            let timing = event.flags().timing == Some(true);
            let found = self.events.iter().find(|ev| Arc::ptr_eq(&ev.event, event)).map(Ev::known);
            let known = found.unwrap_or(Known { timing, recorded: false, captured: None });
            if rerecorded.iter().any(|racing| Arc::ptr_eq(racing, event)) {
                Known { captured: None, ..known }
            } else {
                known
            }
        };
        let plans: Vec<(Known, Known)> =
            racers.iter().map(|racer| (known(&racer.event), known(&racer.other))).collect();
        let outside = outside.map(|index| &*self.slots[index].stream);
        trace(format_args!("{} racers, {} recording outside, on {outside:?}", racers.len(), rerecorded.len()));
        let barrier = Barrier::new(racers.len() + 1);
        let (ended, outcomes) = std::thread::scope(|scope| {
            let barrier = &barrier;
            let handles: Vec<_> = racers
                .iter()
                .zip(&plans)
                .map(|(racer, &(mine, other))| {
                    let rerecord_on = outside.filter(|_| racer.rerecord);
                    scope.spawn(move || race(racer, mine, other, rerecord_on, barrier))
                })
                .collect();
            barrier.wait();
            let ended = finish_capture(capture, discard);
            (ended, handles.into_iter().map(|handle| handle.join()).collect::<Vec<_>>())
        });
        let rerecorded = !rerecorded.is_empty();
        let mut failed = Vec::new();
        for (racer, outcome) in racers.iter().zip(outcomes) {
            let (kept, record) = outcome.unwrap_or_else(|payload| {
                panic!("a thread racing a capture's end failed: {}", panic_message(payload.as_ref()))
            });
            self.completions.extend(kept);
            let index = self.events.iter().position(|ev| Arc::ptr_eq(&ev.event, &racer.event));
            if let (Some(result), Some(index)) = (record, index) {
                // Recorded outside the capture, on a stream outside it.
                self.recorded(index, &result, Some(generation), Some(false));
                if result.is_err() {
                    failed.push(index);
                }
            }
        }
        // A failed record restores the event's earlier state, perhaps over another's record.
        for index in failed {
            self.events[index].captured = None;
        }
        (ended, rerecorded)
    }
}

impl<'p> World<'p> {
    /// Runs one of the operations on captures in progress, graphs and executables ([`World::exec`]).
    pub(crate) fn graph_op(&mut self, op: Op, active: Option<&mut Active<'_>>) {
        let origin: Option<&Stream> = active.as_ref().map(|active| active.origin);
        match op {
            Op::BeginCapture { mode, .. } => match active {
                // One capture at a time: beginning another on the captured stream is refused by
                // CUDA. Should it ever succeed, dropping the guard ends it (and so the capture).
                Some(active) => {
                    let nested = AnyCapture::begin(active.origin, mode);
                    note("StreamRef::begin_capture (nested)", &nested);
                    drop(nested);
                }
                None => skip(),
            },
            Op::CaptureHostFn { s, on_origin, probe } => match active {
                Some(active) => {
                    let origin = active.origin;
                    let target = if on_origin { Some(&**origin) } else { self.pick(s, None).map(|(s, _)| s) };
                    match target {
                        Some(target) => {
                            let state = capture_host_fn(&mut active.capture, target, probe);
                            self.graph_tokens.push(state);
                        }
                        None => skip(),
                    }
                }
                None => skip(),
            },
            Op::EndCapture { .. } => skip(),
            Op::Instantiate { g } => {
                if self.graphs.is_empty() || self.execs.len() >= MAX_EXECS {
                    return skip();
                }
                let exec = self.graphs[g as usize % self.graphs.len()].instantiate();
                note("Graph::instantiate", &exec);
                if let Ok(exec) = exec {
                    self.execs.push(exec);
                }
            }
            Op::Launch { x, s, times, upload } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                if self.execs.is_empty() {
                    return skip();
                }
                let exec = &self.execs[x as usize % self.execs.len()];
                if upload {
                    note("GraphExec::upload", &exec.upload(stream));
                }
                for _ in 0..1 + times % 3 {
                    note("GraphExec::launch", &exec.launch(stream));
                }
            }
            Op::DropGraph { g } => {
                if self.graphs.is_empty() {
                    return skip();
                }
                let index = g as usize % self.graphs.len();
                drop(self.graphs.remove(index));
            }
            Op::DropExec { x } => {
                if self.execs.is_empty() {
                    return skip();
                }
                let index = x as usize % self.execs.len();
                drop(self.execs.remove(index));
            }
            _ => unreachable!("not one of the operations on captures in progress, graphs and executables: {op:?}"),
        }
    }
}
