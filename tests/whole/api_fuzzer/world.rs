//! The state of one program, and the dispatch of its operations.

use super::*;

pub(crate) struct Slot {
    pub(crate) stream: HeldStream,
    /// Created non-blocking (the only kind a capture begins on).
    pub(crate) non_blocking: bool,
}

pub(crate) struct Ev {
    /// Shared, as [`Event::completion`] needs: a pending completion keeps it alive.
    pub(crate) event: Arc<Event>,
    pub(crate) timing: bool,
    /// Recorded successfully at least once (the crate's own rule for `elapsed`).
    pub(crate) recorded: bool,
    /// The capture generation it was last recorded during. Such an event is waited on only
    /// inside that same capture, and never synchronized: it may stand for captured work.
    pub(crate) taint: Option<u64>,
    /// Whether its last record went into a capture, as [`Known::captured`].
    pub(crate) captured: Option<bool>,
}

impl Ev {
    /// What the program knows of it.
    pub(crate) fn known(&self) -> Known {
        Known { timing: self.timing, recorded: self.recorded, captured: self.captured }
    }

    /// The event with what the program knows of it.
    pub(crate) fn seen(&self) -> Seen<'_> {
        Seen { event: &self.event, known: self.known() }
    }
}

/// Whether waiting on an event tainted by `taint` is safe now, during capture `generation`.
pub(crate) fn waitable(taint: Option<u64>, generation: Option<u64>) -> bool {
    taint.is_none() || taint == generation
}

/// Where a picked stream lives.
pub(crate) enum Target {
    Slot(usize),
    Origin,
}

/// What a finished program leaves to be checked once its work is done.
pub(crate) struct Leftovers {
    pub(crate) tokens: Vec<Arc<AtomicU8>>,
    /// Those of graph host functions (freed by CUDA, on a thread of its own).
    pub(crate) graph_tokens: Vec<Arc<AtomicU8>>,
    pub(crate) completions: Vec<Completion>,
    /// Streams still reporting a capture after every capture ended (not expected).
    pub(crate) stranded: usize,
}

/// The state of one program.
pub(crate) struct World<'p> {
    pub(crate) device: Device,
    pub(crate) range: PriorityRange,
    pub(crate) pool: &'p StreamPool,
    pub(crate) log: &'p TagLog,
    pub(crate) slots: Vec<Slot>,
    pub(crate) events: Vec<Ev>,
    pub(crate) graphs: Vec<Graph>,
    pub(crate) execs: Vec<GraphExec>,
    pub(crate) tokens: Vec<Arc<AtomicU8>>,
    pub(crate) graph_tokens: Vec<Arc<AtomicU8>>,
    pub(crate) completions: Vec<Completion>,
    /// Captures of the program so far, this crate's and raw ones.
    pub(crate) generation: u64,
    /// No non-primary context could be made: that actor is skipped for the rest of the program.
    pub(crate) no_non_primary: bool,
    /// Device buffers, pinned buffers and memory pools.
    pub(crate) mem: Mem,
    /// Streams of SM partitions (not slots: a raw borrow of one is refused).
    pub(crate) partition_streams: Vec<Stream>,
    /// No SM partition could be made: that family is skipped for the rest of the program.
    pub(crate) no_partitions: bool,
    /// Streams of the join race left capturing (not expected; as [`Leftovers::stranded`]).
    pub(crate) stranded: usize,
    /// The program runs under the race detector: the raw work the crate orders declares its
    /// accesses (`use_on`'s fill, the typed launch, the conditional graph's kernel nodes).
    pub(crate) race_checked: bool,
    /// Shared buffers and page-locked buffers, and the graphs and executables that hold them.
    pub(crate) graph_mem: GraphMem,
}

impl<'p> World<'p> {
    pub(crate) fn new(device: Device, range: PriorityRange, pool: &'p StreamPool, log: &'p TagLog) -> World<'p> {
        let mut world = World {
            device,
            range,
            pool,
            log,
            slots: Vec::new(),
            events: Vec::new(),
            graphs: Vec::new(),
            execs: Vec::new(),
            tokens: Vec::new(),
            graph_tokens: Vec::new(),
            completions: Vec::new(),
            generation: 0,
            no_non_primary: false,
            mem: Mem::default(),
            partition_streams: Vec::new(),
            no_partitions: false,
            stranded: 0,
            race_checked: false,
            graph_mem: GraphMem::default(),
        };
        for non_blocking in [true, false] {
            let options = if non_blocking { StreamOptions::non_blocking() } else { StreamOptions::default() };
            let stream = Stream::new(device, options);
            note("Stream::new", &stream);
            if let Ok(stream) = stream {
                world.slots.push(Slot { stream: HeldStream::Owned(stream), non_blocking });
            }
        }
        world
    }

    /// A stream for an operation: a slot, or (a third of the time) the stream being captured.
    pub(crate) fn pick<'a>(&'a self, pick: u32, origin: Option<&'a Stream>) -> Option<(&'a StreamRef, Target)> {
        if let Some(origin) = origin {
            if pick % 3 == 0 || self.slots.is_empty() {
                return Some((origin, Target::Origin));
            }
        }
        if self.slots.is_empty() {
            return None;
        }
        let index = pick as usize % self.slots.len();
        Some((&self.slots[index].stream, Target::Slot(index)))
    }

    /// An owned stream: a slot, or the stream being captured.
    pub(crate) fn pick_owned<'a>(&'a self, pick: u32, origin: Option<&'a Stream>) -> Option<&'a Stream> {
        if let Some(origin) = origin {
            if pick % 3 == 0 {
                return Some(origin);
            }
        }
        let owned: Vec<&Stream> = self
            .slots
            .iter()
            .filter_map(|slot| match &slot.stream {
                HeldStream::Owned(stream) => Some(stream),
                HeldStream::Builtin(_) => None,
            })
            .collect();
        if owned.is_empty() { origin } else { Some(owned[pick as usize % owned.len()]) }
    }

    /// A slot that may be dropped now: during a capture, only one that is certainly not part
    /// of it (a stream is never destroyed mid-capture; forks that joined are joined back first).
    pub(crate) fn removable(&self, pick: u32, capturing: bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let index = pick as usize % self.slots.len();
        let stream = &self.slots[index].stream;
        // (A built-in stream is checked too: the per-thread stream can join a capture, and
        // must stay where the join before the capture's end finds it.)
        if capturing && !is_legacy(stream) {
            let status = stream.capture_status();
            note("StreamRef::capture_status", &status);
            if !matches!(status, Ok(CaptureStatus::None)) {
                return None;
            }
        }
        Some(index)
    }

    pub(crate) fn event_index(&self, pick: u32) -> Option<usize> {
        (!self.events.is_empty()).then(|| pick as usize % self.events.len())
    }

    /// Updates what is known of event `index` after a record with `result` during capture
    /// `generation`, on a stream that [`records_into_capture`] said `into_capture` of.
    pub(crate) fn recorded(
        &mut self,
        index: usize,
        result: &Result<()>,
        generation: Option<u64>,
        into_capture: Option<bool>,
    ) {
        let event = &mut self.events[index];
        match result {
            Ok(()) => {
                event.recorded = true;
                event.captured = into_capture;
            }
            // CUDA's error: a record made while captures may be in progress marked the event as
            // captured ahead and keeps that mark (another thread's record may have gone into a
            // capture meanwhile); otherwise the event is as it was.
            Err(Error::Cuda { .. }) => event.captured = None,
            Err(_) => {}
        }
        match generation {
            // During a capture the record may be a captured one, whatever the stream.
            Some(generation) => event.taint = Some(generation),
            None if result.is_ok() => event.taint = None,
            None => {}
        }
    }

    /// Whether every completion of the program has resolved: then the reactor queries none of
    /// their events (it releases an event before it resolves its future).
    pub(crate) fn quiet(&self) -> bool {
        self.completions.iter().all(Completion::is_complete)
    }

    /// A new event, kept; its index, or `None` when the program holds all it may or none was
    /// made.
    pub(crate) fn push_event(&mut self, timing: bool) -> Option<usize> {
        if self.events.len() >= MAX_EVENTS {
            return None;
        }
        let event = Event::new(self.device, EventFlags { timing, ..EventFlags::default() });
        note("Event::new", &event);
        let event = Arc::new(event.ok()?);
        self.events.push(Ev { event, timing, recorded: false, taint: None, captured: Some(false) });
        Some(self.events.len() - 1)
    }

    /// A slot other than the legacy stream (a raw capture must not meet it), by `pick`.
    pub(crate) fn slot_beside_raw_capture(&self, pick: u32) -> Option<usize> {
        let candidates: Vec<usize> =
            (0..self.slots.len()).filter(|&index| !is_legacy(&self.slots[index].stream)).collect();
        (!candidates.is_empty()).then(|| candidates[pick as usize % candidates.len()])
    }

    /// Runs one operation; `active` is the capture in progress, if any.
    pub(crate) fn exec(&mut self, op: Op, active: Option<&mut Active<'_>>) {
        let origin: Option<&Stream> = active.as_ref().map(|active| active.origin);
        let capturing = active.is_some();
        match op {
            Op::NewStream { .. }
            | Op::DropStream { .. }
            | Op::DestroyStream { .. }
            | Op::TakeBuiltin { .. }
            | Op::StreamInfo { .. }
            | Op::WaitStream { .. }
            | Op::Fork { .. }
            | Op::Query { .. }
            | Op::Synchronize { .. }
            | Op::HostFn { .. }
            | Op::HostCallback { .. }
            | Op::Completion { .. }
            | Op::Kernel { .. }
            | Op::Current { .. }
            | Op::DeviceSync => self.stream_op(op, active),
            Op::NewEvent { .. }
            | Op::DropEvent { .. }
            | Op::Record { .. }
            | Op::RecordEvent { .. }
            | Op::WaitEvent { .. }
            | Op::EventUse { .. }
            | Op::Elapsed { .. } => self.event_op(op, active),
            Op::BeginCapture { .. }
            | Op::CaptureHostFn { .. }
            | Op::EndCapture { .. }
            | Op::Instantiate { .. }
            | Op::Launch { .. }
            | Op::DropGraph { .. }
            | Op::DropExec { .. } => self.graph_op(op, active),
            Op::Borrowed { s, action, e } => self.borrowed(s, action, e, active),
            Op::Pool { s, action } => self.pool_op(s, action, origin),
            Op::Threads { count, seed } => {
                if capturing {
                    return skip();
                }
                self.threads(2 + usize::from(count % 3), seed);
            }
            Op::CapturedEvent { e, action, seed } => self.captured_event(e, action, seed, active),
            Op::RawCapture { s, mode, fresh, seed } => {
                if capturing {
                    return skip();
                }
                self.raw_capture(s, mode, fresh, seed);
            }
            Op::NonPrimaryContext { seed } => {
                if capturing || self.no_non_primary {
                    return skip();
                }
                self.non_primary(seed);
            }
            Op::BufferNew { s, how, len, tag } => self.buffer_new(s, how, len, tag, active.as_deref()),
            Op::BufferWrite { b, s, how, tag, other } => self.buffer_write(b, s, how, tag, other, active.as_deref()),
            Op::BufferRead { b, s, how, other } => self.buffer_read(b, s, how, other, active.as_deref()),
            Op::BufferDrop { b, elsewhere } => self.buffer_drop(b, elsewhere),
            Op::Pinned { p, action, tag } => self.pinned_op(p, action, tag, capturing),
            Op::MemoryPool { action, bytes } => self.pool_mem_op(action, bytes, capturing),
            Op::MemOps { s, action, tag } => self.mem_ops(s, action, tag, active.as_deref()),
            Op::SyncScope { s, mode, what } => self.sync_scope(s, mode, what, active.as_deref()),
            Op::GraphMem { pick, action, tag } => self.graph_mem_op(pick, action, tag, capturing),
            Op::GraphCapture { s, seed } => self.graph_capture(s, seed, active),
            Op::GraphRun { x, s, action, seed } => self.graph_run(x, s, action, seed, active.as_deref()),
            // The rest never run during a capture.
            _ if capturing => skip(),
            Op::TypedLaunch { s, other, attr, a } => self.typed_launch(s, other, attr, a),
            Op::Partition { pick, action } => self.partition(pick, action),
            Op::Conditional { value, tag } => self.conditional(value, tag),
            Op::RaceScope { s, other, seed } => self.race_scope_op(s, other, seed),
            Op::JoinRace { seed } => self.join_race(seed),
            Op::GraphBuild { seed } => self.graph_build(seed),
        }
    }

    /// Synchronizes what can be, then drops everything: graphs and executables in a random
    /// order, launches perhaps still pending.
    pub(crate) fn finish(mut self, rng: &mut Rng) -> Leftovers {
        let mut stranded = 0;
        for slot in &self.slots {
            let status = slot.stream.capture_status();
            note("StreamRef::capture_status", &status);
            match status {
                Ok(CaptureStatus::None) => {
                    note("StreamRef::synchronize", &slot.stream.synchronize());
                }
                Ok(_) => stranded += 1,
                Err(_) => {}
            }
        }
        while !self.graphs.is_empty() || !self.execs.is_empty() {
            if self.execs.is_empty() || (!self.graphs.is_empty() && coin(rng)) {
                let index = rng.below(self.graphs.len());
                drop(self.graphs.swap_remove(index));
            } else {
                let index = rng.below(self.execs.len());
                drop(self.execs.swap_remove(index));
            }
        }
        self.graph_mem.drop_all(rng);
        while !self.events.is_empty() {
            let index = rng.below(self.events.len());
            drop(self.events.swap_remove(index));
        }
        self.mem.drop_all(rng);
        while !self.partition_streams.is_empty() {
            let index = rng.below(self.partition_streams.len());
            drop(self.partition_streams.swap_remove(index));
        }
        stranded += self.stranded;
        while !self.slots.is_empty() {
            let index = rng.below(self.slots.len());
            drop(self.slots.swap_remove(index));
        }
        Leftovers { tokens: self.tokens, graph_tokens: self.graph_tokens, completions: self.completions, stranded }
    }
}
