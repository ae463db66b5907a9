//! Actors the crate does not control: raw captures of a borrowed stream, a non-primary cudarc
//! context.

use super::*;

/// The raw FFI value of a capture mode picked by `mode`.
pub(crate) fn raw_mode(mode: u8) -> sys::cudaStreamCaptureMode {
    match mode % 3 {
        0 => sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal,
        1 => sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
        _ => sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed,
    }
}

/// A stream of a non-primary context must be refused with `ForeignContext`.
pub(crate) fn expect_foreign_context<T>(what: &str, device: Device, result: &Result<T>) {
    assert!(
        matches!(result, Err(Error::ForeignContext { device: found }) if *found == device.ordinal()),
        "{what} of a stream of a non-primary context must be ForeignContext: {:?}",
        result.as_ref().err()
    );
}

/// Anything, boxed only to be dropped in a random order among other things.
pub(crate) trait Held {}

impl<T> Held for T {}

/// What the non-primary context's actor made while that context was current.
#[derive(Default)]
pub(crate) struct Made<'p> {
    pub(crate) streams: Vec<Stream>,
    pub(crate) events: Vec<Arc<Event>>,
    pub(crate) leases: Vec<StreamLease<'p>>,
    pub(crate) graphs: Vec<Graph>,
    pub(crate) execs: Vec<GraphExec>,
    pub(crate) completions: Vec<Completion>,
}

impl Made<'_> {
    /// The streams and leases made, for operations on them.
    pub(crate) fn targets(&self) -> Vec<&StreamRef> {
        self.streams.iter().map(|stream| &**stream).chain(self.leases.iter().map(|lease| &**lease)).collect()
    }
}

impl<'p> World<'p> {
    /// A raw capture, as foreign code (`torch.cuda.graph`) makes one: an owned slot (moved out
    /// for it) or a new stream, wrapped with `BorrowedStream::borrow_raw`, captured through raw
    /// FFI, used through the crate from this thread only, and ended through raw FFI. A spawned
    /// thread that checks the events recorded in it while it ends makes it Relaxed: a Global
    /// capture would forbid that thread's queries.
    pub(crate) fn raw_capture(&mut self, s: u32, mode: u8, fresh: bool, seed: u64) {
        let mut rng = Rng::new(seed);
        let owned: Vec<usize> =
            (0..self.slots.len()).filter(|&index| matches!(self.slots[index].stream, HeldStream::Owned(_))).collect();
        let (origin, non_blocking) = if !fresh && !owned.is_empty() {
            let slot = self.slots.remove(owned[s as usize % owned.len()]);
            let HeldStream::Owned(stream) = slot.stream else { unreachable!("the slot holds an owned stream") };
            (stream, slot.non_blocking)
        } else {
            let non_blocking = coin(&mut rng);
            let options = if non_blocking { StreamOptions::non_blocking() } else { StreamOptions::default() };
            let stream = Stream::new(self.device, options);
            note("Stream::new", &stream);
            let Ok(stream) = stream else { return };
            (stream, non_blocking)
        };
        let spawn = rng.below(3) == 0;
        let mode = raw_mode(if spawn { 2 } else { mode });
        trace(format_args!("raw capture: mode {mode:?}, a thread beside its end: {spawn}"));
        let forks = self.raw_capture_on(&origin, non_blocking, mode, spawn, &mut rng);
        self.slots.push(Slot { stream: HeldStream::Owned(origin), non_blocking });
        self.slots.extend(forks.into_iter().map(|fork| Slot { stream: HeldStream::Owned(fork), non_blocking: true }));
    }

    /// The raw capture of `origin` (see [`World::raw_capture`]); returns the streams forked
    /// from it, joined back and out of the capture.
    pub(crate) fn raw_capture_on(
        &mut self,
        origin: &Stream,
        non_blocking: bool,
        mode: sys::cudaStreamCaptureMode,
        spawn: bool,
        rng: &mut Rng,
    ) -> Vec<Stream> {
        self.generation += 1;
        let generation = self.generation;
        let device = self.device;
        let during = if mode == sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed {
            During::Capture
        } else {
            During::StrictRawCapture
        };
        let handle = origin.as_raw();
        // SAFETY: `origin` is a live stream this program owns; it outlives `borrowed` (the caller
        // keeps it until this returns). Its raw capture begins and ends on this thread, and no
        // other thread makes a call of this crate on it meanwhile.
        let borrowed = unsafe { BorrowedStream::borrow_raw(handle) };
        note("BorrowedStream::borrow_raw", &borrowed);
        let borrowed = borrowed.unwrap_or_else(|error| panic!("a stream of the primary context is borrowed: {error}"));
        assert_eq!(borrowed.ownership(), Ownership::Borrowed, "a borrowed ordinary handle is Borrowed");
        assert!(*borrowed == **origin, "a borrowed view compares equal to the stream it borrows");
        // SAFETY: a live stream that is not capturing; a valid mode.
        let begun = check(unsafe { sys::cudaStreamBeginCapture(handle, mode) }, "cudaStreamBeginCapture");
        note("cudaStreamBeginCapture (raw)", &begun);
        if begun.is_err() {
            return Vec::new();
        }
        let info = borrowed.capture_info();
        note("BorrowedStream capture_info", &info);
        let id = match info {
            Ok(info) if info.status == CaptureStatus::Active => info.id,
            other => panic!("a raw capture just begun is active, seen through the borrowed view: {other:?}"),
        };
        let mut forks: Vec<Stream> = Vec::new();
        // Slots that joined the capture, joined back before it ends.
        let mut joined: Vec<usize> = Vec::new();
        // The events recorded in it, for the thread beside its end.
        let mut captured: Vec<Arc<Event>> = Vec::new();
        for step in 0..2 + rng.below(9) {
            let what = format!("raw capture step {step}");
            'step: {
                match rng.below(11) {
                    0 => {
                        let result = borrowed.is_non_blocking();
                        note(&what, &result);
                        assert!(
                            matches!(result, Err(Error::CaptureMisuse(_))),
                            "{what}: is_non_blocking of a foreign stream in a raw capture must be refused: {result:?}"
                        );
                    }
                    1 => {
                        let priority = borrowed.priority();
                        note(&what, &priority);
                        assert!(priority.is_ok(), "{what}: priority is read during a raw capture: {priority:?}");
                        assert_eq!(priority, origin.priority(), "{what}: the borrowed view reads its owner's priority");
                        assert_eq!(borrowed.device(), device, "{what}: a borrowed stream knows its device");
                        let status = borrowed.capture_status();
                        note(&what, &status);
                        assert_eq!(status, Ok(CaptureStatus::Active), "{what}: capture_status during a raw capture");
                        let info = borrowed.capture_info();
                        note(&what, &info);
                        assert!(
                            matches!(info, Ok(info) if info.status == CaptureStatus::Active && info.id == id),
                            "{what}: capture_info during a raw capture: {info:?}"
                        );
                        let read = borrowed.id();
                        note(&what, &read);
                        assert!(
                            matches!(read, Err(Error::CaptureMisuse(_))),
                            "{what}: the id of a foreign stream in a raw capture must be refused: {read:?}"
                        );
                    }
                    2 => {
                        // Refused on the capture's streams (`once_host_fn` checks it), run elsewhere.
                        let slot = self.slot_beside_raw_capture(pick(rng));
                        let target: &StreamRef = match (rng.below(3), slot) {
                            (0, _) => &borrowed,
                            (1, _) | (_, None) => origin,
                            (_, Some(index)) => &self.slots[index].stream,
                        };
                        let (result, state) = once_host_fn(target, rng.below(4) == 0, coin(rng));
                        if *target == **origin {
                            assert!(
                                matches!(result, Err(Error::CaptureMisuse(_))),
                                "{what}: a FnOnce host function on a stream in a raw capture must be refused: {result:?}"
                            );
                        }
                        self.tokens.push(state);
                    }
                    3 => {
                        let slot = self.slot_beside_raw_capture(pick(rng));
                        let target: &StreamRef = match (rng.below(4), slot, forks.first()) {
                            (0, _, _) => &borrowed,
                            (1, _, Some(fork)) => fork,
                            (2, Some(index), _) => &self.slots[index].stream,
                            _ => origin,
                        };
                        note(&what, &kernel(target, self.log, byte(rng), byte(rng)));
                    }
                    action @ (4 | 5) => {
                        // A record on the capturing stream, through the view or its owner, of an
                        // event of the program or (5) of a new one.
                        let target: &StreamRef = if coin(rng) { &borrowed } else { origin };
                        let (index, result) = if action == 4 {
                            // An event of the program only while none of its completions is
                            // pending: the reactor's query of one meeting the record would
                            // invalidate the capture (see `record_in_capture`).
                            let index = match self.event_index(pick(rng)).filter(|_| self.quiet()) {
                                Some(index) => Some(index),
                                None => self.push_event(coin(rng)),
                            };
                            let Some(index) = index else { break 'step };
                            let result = target.record(&self.events[index].event);
                            note(&what, &result);
                            (index, result)
                        } else {
                            let made = target.record_event();
                            note(&what, &made);
                            let Ok(made) = made else { break 'step };
                            if self.events.len() >= MAX_EVENTS {
                                break 'step;
                            }
                            let event = Arc::new(made);
                            self.events.push(Ev {
                                event,
                                timing: false,
                                recorded: false,
                                taint: None,
                                captured: Some(false),
                            });
                            (self.events.len() - 1, Ok(()))
                        };
                        let into = records_into_capture(target);
                        self.recorded(index, &result, Some(generation), into);
                        let mine = self.events[index].seen();
                        // Only a captured event's calls are refused before CUDA sees them.
                        if mine.known.captured == Some(true) {
                            let other = self.event_index(pick(rng)).map_or(mine, |other| self.events[other].seen());
                            let count = 1 + rng.below(3);
                            let kept = event_calls(&what, rng, count, mine, other, during);
                            self.completions.extend(kept);
                            captured.push(Arc::clone(mine.event));
                        }
                    }
                    6 => {
                        let Some(index) = self.slot_beside_raw_capture(pick(rng)) else { break 'step };
                        let slot = &self.slots[index].stream;
                        if coin(rng) {
                            // An external wait (or an ordinary one on a slot that joined).
                            note(&what, &borrowed.wait_stream(slot));
                        } else {
                            // The slot joins the capture.
                            note(&what, &slot.wait_stream(&borrowed));
                            if !joined.contains(&index) && records_into_capture(slot) == Some(true) {
                                joined.push(index);
                            }
                        }
                    }
                    7 => {
                        let fork = borrowed.fork();
                        note(&what, &fork);
                        forks.extend(fork.ok());
                    }
                    8 => {
                        let slot = self.slot_beside_raw_capture(pick(rng));
                        match slot.filter(|_| coin(rng)) {
                            Some(index) => {
                                let completion = self.slots[index].stream.completion();
                                note_infallible();
                                if joined.contains(&index) {
                                    let result = block_on(completion);
                                    note(&what, &result);
                                    assert!(
                                        matches!(result, Err(Error::CaptureMisuse(_))),
                                        "{what}: a completion of a stream that joined a raw capture must be refused: \
                                     {result:?}"
                                    );
                                } else {
                                    self.completions.push(completion);
                                }
                            }
                            None => {
                                let completion = borrowed.completion();
                                note_infallible();
                                assert!(
                                    completion.is_complete(),
                                    "{what}: a capturing stream's completion resolves at once"
                                );
                                let result = block_on(completion);
                                note(&what, &result);
                                assert!(
                                    matches!(result, Err(Error::CaptureMisuse(_))),
                                    "{what}: a completion of a stream in a raw capture must be refused: {result:?}"
                                );
                            }
                        }
                    }
                    9 => {
                        let lease = self.pool.acquire();
                        note(&what, &lease);
                        if let Ok(lease) = lease {
                            note(&what, &kernel(&lease, self.log, byte(rng), byte(rng)));
                            // An external wait: the lease stays out of the capture.
                            note(&what, &borrowed.wait_stream(&lease));
                        }
                    }
                    _ => {
                        // The owner knows its flags, priority and id without asking CUDA.
                        let flags = origin.is_non_blocking();
                        note(&what, &flags);
                        assert_eq!(
                            flags,
                            Ok(non_blocking),
                            "{what}: an owned stream knows its flags during a raw capture"
                        );
                        let priority = origin.priority();
                        note(&what, &priority);
                        assert!(priority.is_ok(), "{what}: an owned stream knows its priority: {priority:?}");
                        let read = origin.id();
                        note(&what, &read);
                        assert!(read.is_ok(), "{what}: an owned stream knows its id: {read:?}");
                    }
                }
            }
            assert!(capture_intact(&borrowed, id), "{what}: the raw capture is still active");
        }
        for &index in &joined {
            note("BorrowedStream wait_stream (join)", &borrowed.wait_stream(&self.slots[index].stream));
        }
        for fork in &forks {
            note("BorrowedStream wait_stream (join a fork)", &borrowed.wait_stream(fork));
        }
        let end = || {
            let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
            // SAFETY: the raw capture begun above on this thread; a valid out-pointer.
            let code = unsafe { sys::cudaStreamEndCapture(handle, &mut graph) };
            (code, graph)
        };
        let ((code, graph), kept) = if spawn && !captured.is_empty() {
            // Captured events, checked by another thread while the capture ends.
            let (barrier, mut thread_rng) = (Barrier::new(2), Rng::new(rng.next_u64()));
            let seen: Vec<Seen<'_>> = captured
                .iter()
                .map(|event| Seen {
                    event,
                    known: Known { timing: event.flags().timing == Some(true), recorded: true, captured: Some(true) },
                })
                .collect();
            std::thread::scope(|scope| {
                let checker = scope.spawn(|| {
                    barrier.wait();
                    let mut kept = Vec::new();
                    for (index, &mine) in seen.iter().enumerate() {
                        let other = seen[(index + 1) % seen.len()];
                        let count = 1 + thread_rng.below(3);
                        kept.extend(event_calls(
                            "beside a raw end",
                            &mut thread_rng,
                            count,
                            mine,
                            other,
                            During::Capture,
                        ));
                    }
                    kept
                });
                barrier.wait();
                let ended = end();
                let kept = checker.join().unwrap_or_else(|payload| {
                    panic!("a thread beside a raw capture's end failed: {}", panic_message(payload.as_ref()))
                });
                (ended, kept)
            })
        } else {
            (end(), Vec::new())
        };
        self.completions.extend(kept);
        note("cudaStreamEndCapture (raw)", &check(code, "cudaStreamEndCapture"));
        assert_eq!(
            code,
            sys::cudaError::cudaSuccess,
            "a raw capture that saw only operations that keep a capture valid ends with cudaSuccess"
        );
        if !graph.is_null() {
            // SAFETY: the graph the raw end returned, ours, destroyed once.
            let destroyed = check(unsafe { sys::cudaGraphDestroy(graph) }, "cudaGraphDestroy");
            note("cudaGraphDestroy (raw)", &destroyed);
            assert!(destroyed.is_ok(), "the graph of a raw capture is destroyed: {destroyed:?}");
        }
        let status = borrowed.capture_status();
        note("BorrowedStream capture_status", &status);
        assert_eq!(status, Ok(CaptureStatus::None), "the stream is out of capture once the raw end returned");
        forks
    }

    /// A non-primary context of cudarc's made current on this thread, crate operations while it
    /// is, the context destroyed, then everything made meanwhile used (it must all work: what
    /// the crate makes is in the primary context) and dropped in a random order.
    pub(crate) fn non_primary(&mut self, seed: u64) {
        let mut rng = Rng::new(seed);
        let ordinal = usize::try_from(self.device.ordinal()).unwrap_or_default();
        let context = match CudaContext::new_non_primary(ordinal, 0) {
            Ok(context) => context,
            Err(error) => {
                trace(format_args!("CudaContext::new_non_primary: {error:?}: skipped for the rest of the program"));
                self.no_non_primary = true;
                return skip();
            }
        };
        self.foreign_context_refused(&context, &mut rng);
        let mut made = Made::default();
        for step in 0..3 + rng.below(8) {
            self.while_non_primary(&format!("non-primary context current, step {step}"), &mut rng, &mut made);
        }
        // Destroyed here: cudarc streams of the context (which hold it) are gone already.
        drop(context);
        note_infallible();
        self.after_non_primary(&mut rng, made);
    }

    /// Streams of a non-primary context are refused (`borrow_raw`, `borrow_raw_on`,
    /// `from_cudarc`, its default stream too), and no stream is lent to it (`to_cudarc`).
    pub(crate) fn foreign_context_refused(&self, context: &Arc<CudaContext>, rng: &mut Rng) {
        let device = self.device;
        match context.new_stream() {
            Ok(foreign) => {
                let handle: sys::cudaStream_t = foreign.cu_stream().cast();
                // SAFETY: cudarc keeps the stream alive while `foreign` lives, past this call;
                // nobody captures it.
                let borrowed = unsafe { BorrowedStream::borrow_raw(handle) };
                note("BorrowedStream::borrow_raw (non-primary)", &borrowed);
                expect_foreign_context("borrow_raw", device, &borrowed);
                // SAFETY: as above.
                let borrowed = unsafe { BorrowedStream::borrow_raw_on(handle, device) };
                note("BorrowedStream::borrow_raw_on (non-primary)", &borrowed);
                expect_foreign_context("borrow_raw_on", device, &borrowed);
                // SAFETY: as above.
                let lent = unsafe { BorrowedStream::from_cudarc(&foreign) };
                note("BorrowedStream::from_cudarc (non-primary)", &lent);
                expect_foreign_context("from_cudarc", device, &lent);
            }
            Err(error) => trace(format_args!("CudaContext::new_stream: {error:?}")),
        }
        if coin(rng) {
            let default = context.default_stream();
            // SAFETY: the context's default stream, which cudarc keeps; nobody captures it.
            let lent = unsafe { BorrowedStream::from_cudarc(&default) };
            note("BorrowedStream::from_cudarc (non-primary default stream)", &lent);
            expect_foreign_context("from_cudarc of the default stream", device, &lent);
        }
        if let Some((stream, _)) = self.pick(pick(rng), None).filter(|_| coin(rng)) {
            // SAFETY: refused before anything is lent; were it lent, the `CudaStream` would drop
            // at once, before the program's stream, and carry no work.
            let lent = unsafe { stream.to_cudarc(context) };
            note("StreamRef::to_cudarc (non-primary)", &lent);
            expect_foreign_context("to_cudarc", device, &lent);
        }
    }

    /// One random operation while the non-primary context is current. What is made is kept in
    /// `made`, and must be made: an error here is a failure (nothing else uses it).
    pub(crate) fn while_non_primary(&mut self, what: &str, rng: &mut Rng, made: &mut Made<'p>) {
        let device = self.device;
        let must = |result: Result<()>| {
            note(what, &result);
            assert!(result.is_ok(), "{what}: while a non-primary context is current: {result:?}");
        };
        match rng.below(9) {
            0 => {
                let options = if coin(rng) { StreamOptions::non_blocking() } else { StreamOptions::default() };
                let range = self.range;
                let options = if coin(rng) {
                    options.with_priority(Priority(range.most_urgent().value() + (pick(rng) % range.levels()) as i32))
                } else {
                    options
                };
                let stream = Stream::new(device, options);
                note(what, &stream);
                made.streams.push(stream.unwrap_or_else(|error| panic!("{what}: Stream::new: {error}")));
            }
            1 => {
                let event = Event::new(device, EventFlags { timing: coin(rng), ..EventFlags::default() });
                note(what, &event);
                made.events.push(Arc::new(event.unwrap_or_else(|error| panic!("{what}: Event::new: {error}"))));
            }
            2 => {
                let targets = made.targets();
                if let (Some(event), false) = (made.events.get(rng.below(made.events.len().max(1))), targets.is_empty())
                {
                    must(targets[rng.below(targets.len())].record(event));
                }
            }
            3 => {
                let lease = self.pool.acquire();
                note(what, &lease);
                if let Ok(lease) = lease {
                    must(kernel(&lease, self.log, byte(rng), byte(rng)));
                    if coin(rng) {
                        made.leases.push(lease);
                    }
                }
            }
            4 => {
                let Some(stream) = made.streams.get(rng.below(made.streams.len().max(1))) else { return };
                let completion = stream.completion();
                note_infallible();
                if coin(rng) {
                    must(block_on(completion));
                } else {
                    made.completions.push(completion);
                }
            }
            5 => {
                let targets = made.targets();
                let slot = self.pick(pick(rng), None).map(|(slot, _)| slot);
                if targets.is_empty() {
                    return;
                }
                let waiter = targets[rng.below(targets.len())];
                match slot.filter(|_| coin(rng)) {
                    // A slot may be any stream, of any state: only noted.
                    Some(slot) => {
                        note(what, &waiter.wait_stream(slot));
                    }
                    None => must(waiter.wait_stream(targets[rng.below(targets.len())])),
                }
            }
            6 => self.capture_while_non_primary(what, rng, made),
            7 => {
                let targets = made.targets();
                match targets.get(rng.below(targets.len().max(1))) {
                    Some(target) => must(kernel(target, self.log, byte(rng), byte(rng))),
                    None => must(kernel(&BuiltinStream::per_thread(device), self.log, byte(rng), byte(rng))),
                }
            }
            _ => {
                let Some(stream) = made.streams.get(rng.below(made.streams.len().max(1))) else { return };
                let (result, state) = once_host_fn(stream, rng.below(4) == 0, coin(rng));
                must(result);
                self.tokens.push(state);
            }
        }
    }

    /// A capture while the non-primary context is current: a new stream captured in any mode,
    /// with kernels, a fork joined back, an event recorded in it (then refused), and ended; the
    /// graph (perhaps instantiated) kept.
    pub(crate) fn capture_while_non_primary(&mut self, what: &str, rng: &mut Rng, made: &mut Made<'p>) {
        let device = self.device;
        let origin = Stream::new(device, StreamOptions::non_blocking());
        note(what, &origin);
        let origin = origin.unwrap_or_else(|error| panic!("{what}: Stream::new: {error}"));
        let must = |result: Result<()>| {
            note(what, &result);
            assert!(result.is_ok(), "{what}: in a capture while a non-primary context is current: {result:?}");
        };
        let capture = AnyCapture::begin(&origin, byte(rng));
        note(what, &capture);
        let capture = capture.unwrap_or_else(|error| panic!("{what}: begin_capture: {error}"));
        let mut forks = Vec::new();
        for _ in 0..1 + rng.below(4) {
            match rng.below(3) {
                0 => must(kernel(&origin, self.log, byte(rng), byte(rng))),
                1 => {
                    let fork = origin.fork();
                    note(what, &fork);
                    let fork = fork.unwrap_or_else(|error| panic!("{what}: fork in a capture: {error}"));
                    must(kernel(&fork, self.log, byte(rng), byte(rng)));
                    forks.push(fork);
                }
                _ => {
                    let Some(event) = made.events.get(rng.below(made.events.len().max(1))) else { continue };
                    must(origin.record(event));
                    let known =
                        Known { timing: event.flags().timing == Some(true), recorded: true, captured: Some(true) };
                    let mine = Seen { event, known };
                    let count = 1 + rng.below(2);
                    // Resolved already (CaptureMisuse): not among those that must resolve Ok.
                    self.completions.extend(event_calls(what, rng, count, mine, mine, During::Capture));
                }
            }
        }
        for fork in &forks {
            must(origin.wait_stream(fork));
        }
        let graph = capture.end();
        note(what, &graph);
        let graph = graph.unwrap_or_else(|error| panic!("{what}: Capture::end: {error}"));
        if coin(rng) {
            let exec = graph.instantiate();
            note(what, &exec);
            made.execs.push(exec.unwrap_or_else(|error| panic!("{what}: Graph::instantiate: {error}")));
        }
        made.graphs.push(graph);
        made.streams.push(origin);
        made.streams.extend(forks);
    }

    /// After the non-primary context was destroyed: everything made while it was current works,
    /// without an error, then drops in a random order (launches perhaps pending).
    pub(crate) fn after_non_primary(&mut self, rng: &mut Rng, made: Made<'p>) {
        let what = "after the non-primary context was destroyed";
        let must = |result: Result<()>| {
            note(what, &result);
            assert!(result.is_ok(), "{what}: {result:?}");
        };
        let mut new_execs = Vec::new();
        must(kernel(&BuiltinStream::per_thread(self.device), self.log, byte(rng), byte(rng)));
        let targets = made.targets();
        for target in &targets {
            must(kernel(target, self.log, byte(rng), byte(rng)));
            let queried = target.query();
            note(what, &queried);
            assert!(queried.is_ok(), "{what}: StreamRef::query: {queried:?}");
        }
        if !targets.is_empty() {
            for (index, event) in made.events.iter().enumerate() {
                // Recorded outside any capture (again, for one recorded in a capture): usable.
                let target = targets[index % targets.len()];
                must(target.record(event));
                must(event.synchronize());
                let queried = event.query();
                note(what, &queried);
                assert_eq!(queried, Ok(true), "{what}: an event synchronized has completed");
                if coin(rng) {
                    must(block_on(event.completion()));
                }
            }
            let timed: Vec<&Arc<Event>> =
                made.events.iter().filter(|event| event.flags().timing == Some(true)).collect();
            if let [start, end, ..] = timed[..] {
                let target = targets[rng.below(targets.len())];
                must(target.record(start));
                must(kernel(target, self.log, byte(rng), byte(rng)));
                must(target.record(end));
                must(end.synchronize());
                let elapsed = end.elapsed(start);
                note(what, &elapsed);
                assert!(matches!(elapsed, Ok(Some(_))), "{what}: elapsed between completed events: {elapsed:?}");
            }
            for graph in &made.graphs {
                if coin(rng) {
                    let exec = graph.instantiate();
                    note(what, &exec);
                    new_execs.push(exec.unwrap_or_else(|error| panic!("{what}: Graph::instantiate: {error}")));
                }
            }
            for exec in made.execs.iter().chain(&new_execs) {
                must(exec.launch(targets[rng.below(targets.len())]));
            }
            if targets.len() > 1 {
                must(targets[0].wait_stream(targets[targets.len() - 1]));
            }
        }
        if coin(rng) {
            for target in &targets {
                must(target.synchronize());
            }
        }
        drop(targets);
        let Made { streams, events, leases, graphs, execs, completions } = made;
        for completion in completions {
            if coin(rng) {
                must(block_on(completion));
            } else {
                self.completions.push(completion);
            }
        }
        let mut held: Vec<Box<dyn Held + 'p>> = Vec::new();
        held.extend(streams.into_iter().map(|stream| Box::new(stream) as Box<dyn Held>));
        held.extend(events.into_iter().map(|event| Box::new(event) as Box<dyn Held>));
        held.extend(leases.into_iter().map(|lease| Box::new(lease) as Box<dyn Held + 'p>));
        held.extend(graphs.into_iter().map(|graph| Box::new(graph) as Box<dyn Held>));
        held.extend(execs.into_iter().chain(new_execs).map(|exec| Box::new(exec) as Box<dyn Held>));
        while !held.is_empty() {
            drop(held.swap_remove(rng.below(held.len())));
        }
    }
}
