//! The happens-before model of what the crate enqueues, and the memory's access history
//! checked against it. Pure bookkeeping: no CUDA call.
//!
//! Each stream has a vector clock ([`Clock`]); each operation on it counts one more of its
//! own (its epoch) after taking in what it waits for:
//! * the host's clock (every stream, event and device synchronize the host made, and every
//!   host access: work enqueued later comes after them);
//! * a `wait_event`: the clock the stream had when the event was last recorded (an event never
//!   recorded, or recorded while the detector was off, orders nothing);
//!   (`wait_stream` is a record of an internal event and a wait for it);
//! * work (kernels, copies, fills, host functions, graph launches) on the legacy stream: the
//!   clocks of the device's blocking streams at their last work; work on a blocking stream
//!   (the per-thread stream is one): the legacy stream's at its last work. Non-blocking
//!   streams take part in neither; a borrowed stream whose flags are unknown counts as
//!   non-blocking (no ordering assumed).
//!
//! An access made by operation `epoch` of stream `s` comes before an operation with clock `c`
//! exactly when `c[s] >= epoch`. Two accesses of overlapping bytes conflict when one of them
//! writes (or frees) and neither comes before the other. This is the relation
//! the ordering model (`src/ordering_model.rs`, run by `tests/stream/ordering_model.rs`) checks the GPU against; the detector reports exactly its
//! unordered conflicting pairs (cross-checked in the tests).

use super::clock::Clock;
use crate::ffi::race_report::{AccessKind, HOST, RaceAccess, RaceKind, RaceReport, missing_edge};
use std::backtrace::Backtrace;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

/// The index of the host in every clock.
const HOST_INDEX: usize = 0;

/// How many accesses of one stream one allocation remembers; older ones are forgotten (a race
/// with them goes unreported).
const KEPT_PER_STREAM: usize = 4096;

/// How a stream takes part in the legacy stream's implicit synchronization.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StreamClass {
    /// The legacy default stream of its device.
    Legacy,
    /// A blocking stream (the per-thread default stream is one).
    Blocking,
    /// A non-blocking stream, or one whose flags are unknown.
    NonBlocking,
}

/// Which stream an operation is on: its device, handle and thread (the per-thread stream is
/// one per thread; 0 for the others), and its class. Two keys are one stream when device,
/// handle and thread agree, whatever class each wrapper knew (a borrowed view of an owned
/// stream may not know its flags).
#[derive(Clone, Debug)]
pub(crate) struct StreamKey {
    pub(crate) device: i32,
    pub(crate) handle: usize,
    pub(crate) thread: u64,
    pub(crate) class: StreamClass,
}

impl PartialEq for StreamKey {
    fn eq(&self, other: &StreamKey) -> bool {
        (self.device, self.handle, self.thread) == (other.device, other.handle, other.thread)
    }
}

impl Eq for StreamKey {}

impl std::hash::Hash for StreamKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.device, self.handle, self.thread).hash(state);
    }
}

impl StreamKey {
    fn label(&self) -> String {
        match self.class {
            StreamClass::Legacy => format!("the legacy stream of device {}", self.device),
            _ if self.thread != 0 => {
                format!("the per-thread stream of thread {} (device {})", self.thread, self.device)
            }
            _ => format!("stream {:#x} (device {})", self.handle, self.device),
        }
    }
}

/// One access an operation declares: bytes `[address, address + bytes)`. Addresses are
/// unified (CUDA's UVA on 64-bit Linux): device memory of every device and pinned host memory
/// never share an address, so one address space holds them all.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Use {
    pub(crate) address: u64,
    pub(crate) bytes: u64,
    pub(crate) kind: AccessKind,
}

impl Use {
    fn overlaps(&self, address: u64, bytes: u64) -> bool {
        self.address < address.saturating_add(bytes) && address < self.address.saturating_add(self.bytes)
    }
}

/// Who enqueued an operation: its name, thread and backtrace (taken once per operation).
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub(crate) operation: String,
    pub(crate) thread: Option<String>,
    pub(crate) backtrace: Arc<Backtrace>,
}

impl Origin {
    /// An operation that accesses nothing: no report names it, so no backtrace is taken.
    pub(crate) fn unseen(operation: impl Into<String>) -> Origin {
        Origin { operation: operation.into(), thread: None, backtrace: Arc::new(Backtrace::disabled()) }
    }

    /// The calling thread's operation `operation`, with a backtrace of here.
    pub(crate) fn here(operation: impl Into<String>) -> Origin {
        Origin {
            operation: operation.into(),
            thread: crate::call::thread::thread_name(),
            backtrace: Arc::new(Backtrace::capture()),
        }
    }
}

#[derive(Debug)]
struct StreamState {
    index: usize,
    class: StreamClass,
    device: i32,
    clock: Clock,
    /// The clock at its last work (what the legacy rule orders against).
    at_last_work: Option<Clock>,
}

/// An access remembered: which stream's operation, its epoch, the bytes, and who made it.
#[derive(Clone, Debug)]
struct Entry {
    stream: usize,
    epoch: u64,
    /// When it was recorded ([`Model::sequence`]).
    sequence: u64,
    access: Use,
    origin: Arc<Origin>,
}

/// The history of one allocation (or of bytes first declared without one).
#[derive(Debug, Default)]
struct Memory {
    bytes: u64,
    allocation: Option<RaceAccess>,
    /// Per stream index, its accesses in enqueue order (so in epoch order).
    by_stream: BTreeMap<usize, VecDeque<Entry>>,
}

/// Everything the detector knows, behind one lock.
#[derive(Debug)]
pub(crate) struct Model {
    /// Which model this is: an operation checked against an earlier one (the detector was
    /// turned off and on meanwhile) is not recorded in this one.
    generation: u64,
    /// The detector's on-period it observes ([`ModeSwitch::on_period`](crate::call::mode_switch::ModeSwitch::on_period)):
    /// a model of an earlier one is replaced, never used again.
    on_period: u64,
    /// How many operations were recorded: an operation recorded after another was checked is
    /// checked again when that one is recorded.
    sequence: u64,
    streams: HashMap<StreamKey, StreamState>,
    /// Per device, what its destroyed streams had enqueued: a device synchronize covers it.
    retired: HashMap<i32, Clock>,
    labels: Vec<String>,
    events: HashMap<usize, Clock>,
    host: Clock,
    memory: BTreeMap<u64, Memory>,
}

impl Default for Model {
    fn default() -> Model {
        Model::new(0)
    }
}

/// What an operation does to ordering, besides its accesses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Work the device runs (kernels, copies, fills, host functions, graph launches).
    Work,
    /// An event record: the event remembers the stream's clock.
    Record(usize),
    /// A wait for an event's last record.
    WaitEvent(usize),
}

impl Model {
    /// An empty model of the detector's on-period `on_period`.
    pub(crate) fn new(on_period: u64) -> Model {
        static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Model {
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            on_period,
            sequence: 0,
            streams: HashMap::new(),
            retired: HashMap::new(),
            labels: vec![HOST.to_owned()],
            events: HashMap::new(),
            host: Clock::default(),
            memory: BTreeMap::new(),
        }
    }

    /// The detector's on-period this model observes.
    pub(crate) fn on_period(&self) -> u64 {
        self.on_period
    }

    fn stream(&mut self, key: &StreamKey) -> &mut StreamState {
        if !self.streams.contains_key(key) {
            let index = self.labels.len();
            self.labels.push(key.label());
            let state = StreamState {
                index,
                class: key.class,
                device: key.device,
                clock: Clock::default(),
                at_last_work: None,
            };
            self.streams.insert(key.clone(), state);
        }
        self.streams.get_mut(key).expect("inserted above")
    }

    /// The clock operation `step` on `key` would have, and the stream's index.
    fn next_clock(&mut self, key: &StreamKey, step: Step) -> (usize, Clock) {
        let host = self.host.clone();
        let waited = match step {
            Step::WaitEvent(event) => self.events.get(&event).cloned(),
            _ => None,
        };
        let legacy: Vec<Clock> = if step == Step::Work { self.legacy_partners(key) } else { Vec::new() };
        let state = self.stream(key);
        let mut clock = state.clock.clone();
        clock.join(&host);
        if let Some(waited) = waited {
            clock.join(&waited);
        }
        for partner in &legacy {
            clock.join(partner);
        }
        clock.tick(state.index);
        (state.index, clock)
    }

    /// The clocks at their last work of the streams the legacy rule orders new work on `key`
    /// after.
    fn legacy_partners(&self, key: &StreamKey) -> Vec<Clock> {
        let partner = |state: &StreamState| match key.class {
            StreamClass::Legacy => state.class == StreamClass::Blocking,
            StreamClass::Blocking => state.class == StreamClass::Legacy,
            StreamClass::NonBlocking => false,
        };
        self.streams
            .values()
            .filter(|state| state.device == key.device && partner(state))
            .filter_map(|state| state.at_last_work.clone())
            .collect()
    }

    /// Checks operation `step` on `key` with `uses` against the history, and returns the
    /// races it would make; `commit` then records it (or nothing changes, when the caller
    /// refuses the operation).
    pub(crate) fn check(&mut self, key: &StreamKey, step: Step, uses: &[Use], origin: &Arc<Origin>) -> Pending {
        self.check_after(key, step, uses, origin).0
    }

    /// [`Model::check`], and what the operation knows of before itself (its clock less its
    /// own count): the work it comes after.
    pub(crate) fn check_after(
        &mut self,
        key: &StreamKey,
        step: Step,
        uses: &[Use],
        origin: &Arc<Origin>,
    ) -> (Pending, Clock) {
        let (index, mut clock) = self.next_clock(key, step);
        let races = self.races(index, &clock, uses, origin, 0);
        clock.set(index, clock.get(index) - 1);
        (Pending { key: key.clone(), step, generation: self.generation, seen: self.sequence, races }, clock)
    }

    /// Records an operation checked by [`Model::check`] (nothing, if the model was replaced
    /// since), and returns the races it makes with the operations recorded since its check
    /// (other threads' operations that CUDA took between the check and this).
    pub(crate) fn commit(&mut self, pending: Pending, uses: &[Use], origin: Arc<Origin>) -> Vec<RaceReport> {
        let Pending { key, step, generation, seen, .. } = pending;
        if generation != self.generation {
            return Vec::new();
        }
        // The clock as of now: records, waits and synchronizes recorded since the check count.
        let (index, clock) = self.next_clock(&key, step);
        let late = if self.sequence > seen { self.races(index, &clock, uses, &origin, seen) } else { Vec::new() };
        self.sequence += 1;
        let epoch = clock.get(index);
        self.remember(index, epoch, uses, &origin);
        match step {
            Step::Record(event) => {
                self.events.insert(event, clock.clone());
            }
            Step::Work => self.stream(&key).at_last_work = Some(clock.clone()),
            Step::WaitEvent(_) => {}
        }
        self.stream(&key).clock = clock;
        late
    }

    /// The ranks of a collective, each on its stream (`key`) after the work it knew of
    /// (`before`, read before its operation was recorded): rank `i`'s stream takes in the
    /// `before` of every rank `j` it receives data from (`receives(i, j)`), since its part
    /// cannot complete before theirs have begun (not the other ranks' own accesses in it).
    pub(crate) fn rendezvous(&mut self, ranks: &[(StreamKey, Clock)], receives: impl Fn(usize, usize) -> bool) {
        for (rank, (key, _)) in ranks.iter().enumerate() {
            let mut joined = Clock::default();
            for (from, (_, before)) in ranks.iter().enumerate() {
                if from != rank && receives(rank, from) {
                    joined.join(before);
                }
            }
            self.stream(key).clock.join(&joined);
        }
    }

    /// The races a host access of `uses` would make: with the device's accesses the host has
    /// not waited for.
    pub(crate) fn host_check(&self, uses: &[Use], origin: &Arc<Origin>) -> Vec<RaceReport> {
        let mut clock = self.host.clone();
        clock.tick(HOST_INDEX);
        self.races(HOST_INDEX, &clock, uses, origin, 0)
    }

    /// Records a host access checked by [`Model::host_check`]: every operation enqueued later
    /// comes after it.
    pub(crate) fn host_commit(&mut self, uses: &[Use], origin: Arc<Origin>) {
        self.sequence += 1;
        let epoch = self.host.tick(HOST_INDEX);
        self.remember(HOST_INDEX, epoch, uses, &origin);
    }

    /// What a synchronize of `key` waits for: everything enqueued on it so far. Read before
    /// the synchronize, so that another thread's work enqueued during it is not taken as done.
    pub(crate) fn stream_clock(&mut self, key: &StreamKey) -> Clock {
        self.stream(key).clock.clone()
    }

    /// What a synchronize of `event` waits for: the work before its last record.
    pub(crate) fn event_clock(&self, event: usize) -> Clock {
        self.events.get(&event).cloned().unwrap_or_default()
    }

    /// What a device synchronize waits for: everything enqueued on `device` so far, on live
    /// and destroyed streams.
    pub(crate) fn device_clock(&self, device: i32) -> Clock {
        let mut clock = self.retired.get(&device).cloned().unwrap_or_default();
        for state in self.streams.values().filter(|state| state.device == device) {
            clock.join(&state.clock);
        }
        clock
    }

    /// The host saw the work of `clock` complete (a clock read before the wait).
    pub(crate) fn host_saw(&mut self, clock: &Clock) {
        self.host.join(clock);
        self.prune();
    }

    /// Which model this is (see [`Model::generation`]).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The host saw everything enqueued on `key` so far complete.
    #[cfg(test)]
    pub(crate) fn stream_synchronized(&mut self, key: &StreamKey) {
        let clock = self.stream_clock(key);
        self.host_saw(&clock);
    }

    /// The host saw the work before `event`'s last record complete.
    #[cfg(test)]
    pub(crate) fn event_synchronized(&mut self, event: usize) {
        let clock = self.event_clock(event);
        self.host_saw(&clock);
    }

    /// The host saw everything enqueued on `device` so far complete.
    #[cfg(test)]
    pub(crate) fn device_synchronized(&mut self, device: i32) {
        let clock = self.device_clock(device);
        self.host_saw(&clock);
    }

    /// A stream was destroyed: a new stream that gets its handle is another stream. What it
    /// enqueued still runs: a device synchronize still covers it.
    pub(crate) fn forget_stream(&mut self, key: &StreamKey) {
        if let Some(state) = self.streams.remove(key) {
            self.retired.entry(state.device).or_default().join(&state.clock);
        }
    }

    /// An event was destroyed: a new event that gets its handle has no record.
    pub(crate) fn forget_event(&mut self, event: usize) {
        self.events.remove(&event);
    }

    /// Memory `allocation` names was allocated on `key` by `origin` (a write of all of it, in
    /// the stream's order): older histories of those bytes end.
    pub(crate) fn allocated(&mut self, key: &StreamKey, allocation: Use, origin: Arc<Origin>) {
        self.forget_memory(allocation.address, allocation.bytes);
        let index = self.stream(key).index;
        let description = self.describe(index, &allocation, &origin);
        let memory = Memory { bytes: allocation.bytes, allocation: Some(description), by_stream: BTreeMap::new() };
        self.memory.insert(allocation.address, memory);
        let pending = self.check(key, Step::Work, &[allocation], &origin);
        let _ = self.commit(pending, &[allocation], origin);
    }

    /// The histories of memory overlapping `[address, address + bytes)` end (it was freed).
    pub(crate) fn forget_memory(&mut self, address: u64, bytes: u64) {
        let overlapping: Vec<u64> = self.overlapping(address, bytes).collect();
        for key in overlapping {
            self.memory.remove(&key);
        }
    }

    fn overlapping(&self, address: u64, bytes: u64) -> impl Iterator<Item = u64> + '_ {
        let end = address.saturating_add(bytes);
        self.memory
            .range(..end)
            .filter(move |(start, memory)| start.saturating_add(memory.bytes) > address)
            .map(|(key, _)| *key)
    }

    /// The races of operation `index` with `clock` accessing `uses`, with the accesses
    /// recorded after operation number `newer_than` (0: all).
    fn races(
        &self,
        index: usize,
        clock: &Clock,
        uses: &[Use],
        origin: &Arc<Origin>,
        newer_than: u64,
    ) -> Vec<RaceReport> {
        let mut races = Vec::new();
        // An access spanning several histories is in each of them: each pair once.
        let mut seen: Vec<(usize, u64, u64)> = Vec::new();
        for access in uses.iter().filter(|access| access.bytes > 0) {
            for key in self.overlapping(access.address, access.bytes) {
                let memory = &self.memory[&key];
                for (&stream, entries) in &memory.by_stream {
                    if stream == index {
                        continue;
                    }
                    // Entries of one stream are in epoch order: those not before this
                    // operation are a suffix.
                    let first_unordered = entries.partition_point(|entry| clock.covers(stream, entry.epoch));
                    for entry in entries.range(first_unordered..) {
                        let pair = (entry.stream, entry.sequence, access.address);
                        if entry.sequence > newer_than
                            && entry.access.kind.conflicts_with(access.kind)
                            && entry.access.overlaps(access.address, access.bytes)
                            && !seen.contains(&pair)
                        {
                            seen.push(pair);
                            races.push(self.report(entry, index, access, origin, memory));
                        }
                    }
                }
            }
        }
        races
    }

    fn report(&self, entry: &Entry, index: usize, access: &Use, origin: &Origin, memory: &Memory) -> RaceReport {
        let earlier = self.describe(entry.stream, &entry.access, &entry.origin);
        let later = self.describe(index, access, origin);
        let kind = match (entry.access.kind, access.kind) {
            _ if index == HOST_INDEX => RaceKind::HostInFlight,
            (_, AccessKind::Free) => RaceKind::FreeInUse,
            (AccessKind::Read, _) => RaceKind::ReadWrite,
            (_, AccessKind::Read) => RaceKind::WriteRead,
            _ => RaceKind::WriteWrite,
        };
        let missing_edge = missing_edge(&earlier, &later);
        RaceReport { kind, earlier, later, allocation: memory.allocation.clone(), missing_edge }
    }

    fn describe(&self, index: usize, access: &Use, origin: &Origin) -> RaceAccess {
        RaceAccess {
            operation: origin.operation.clone(),
            kind: access.kind,
            stream: self.labels[index].clone(),
            address: access.address,
            bytes: access.bytes,
            thread: origin.thread.clone(),
            backtrace: origin.backtrace.clone(),
        }
    }

    fn remember(&mut self, index: usize, epoch: u64, uses: &[Use], origin: &Arc<Origin>) {
        let sequence = self.sequence;
        for access in uses.iter().filter(|access| access.bytes > 0) {
            if access.kind == AccessKind::Free {
                self.forget_memory(access.address, access.bytes);
                continue;
            }
            // In every history it overlaps: a later access of any part of it meets it.
            for home in self.homes(access) {
                let Some(memory) = self.memory.get_mut(&home) else { continue };
                let entries = memory.by_stream.entry(index).or_default();
                if entries.len() >= KEPT_PER_STREAM {
                    entries.pop_front();
                }
                entries.push_back(Entry { stream: index, epoch, sequence, access: *access, origin: origin.clone() });
            }
        }
    }

    /// The histories `access` goes into: the allocations it overlaps; in memory the crate did
    /// not allocate (declared by hand), one history spanning it and every such history it
    /// overlaps, merged.
    fn homes(&mut self, access: &Use) -> Vec<u64> {
        let overlapping: Vec<u64> = self.overlapping(access.address, access.bytes).collect();
        let end = access.address.saturating_add(access.bytes);
        let spans = |start: &u64| *start <= access.address && start.saturating_add(self.memory[start].bytes) >= end;
        if overlapping.iter().any(|start| self.memory[start].allocation.is_some())
            || (overlapping.len() == 1 && spans(&overlapping[0]))
        {
            // An allocation's, or the one history that holds all of it already.
            return overlapping;
        }
        let mut start = access.address;
        let mut end = end;
        let several = overlapping.len() > 1;
        let mut merged = Memory::default();
        for key in overlapping {
            let Some(memory) = self.memory.remove(&key) else { continue };
            start = start.min(key);
            end = end.max(key.saturating_add(memory.bytes));
            if !several {
                // One history grows: its entries stay as they are.
                merged = memory;
                continue;
            }
            for (stream, entries) in memory.by_stream {
                merged.by_stream.entry(stream).or_default().extend(entries);
            }
        }
        if several {
            for entries in merged.by_stream.values_mut() {
                // Each stream's accesses in enqueue order again.
                entries.make_contiguous().sort_by_key(|entry| (entry.epoch, entry.sequence));
            }
        }
        merged.bytes = end - start;
        self.memory.insert(start, merged);
        vec![start]
    }

    /// Drops the accesses the host has seen complete: they come before every later operation.
    fn prune(&mut self) {
        let host = &self.host;
        for memory in self.memory.values_mut() {
            for (&stream, entries) in memory.by_stream.iter_mut() {
                let done = entries.partition_point(|entry| host.covers(stream, entry.epoch));
                entries.drain(..done);
            }
            memory.by_stream.retain(|_, entries| !entries.is_empty());
        }
    }
}

/// An operation checked and not yet recorded ([`Model::check`]).
#[derive(Debug)]
pub(crate) struct Pending {
    key: StreamKey,
    step: Step,
    /// The model it was checked against.
    generation: u64,
    /// How many operations that model had recorded when it was checked.
    seen: u64,
    /// The races it would make.
    pub(crate) races: Vec<RaceReport>,
}
