//! The race detector: finds two accesses of the same memory, on different streams, that
//! nothing orders (a kernel on stream B reading a buffer while stream A may still be writing
//! it), the bug of several streams that is silent on the device.
//!
//! While it is on, the crate keeps a happens-before model of everything it enqueues (vector
//! clocks per stream, snapshotted by each event record, joined by each wait; the host's
//! synchronizes; the legacy stream's implicit synchronization with blocking streams) and the
//! history of the memory operations access, and checks each new access against that history:
//!
//! | what | its accesses |
//! |---|---|
//! | [`DeviceBuffer`](crate::DeviceBuffer) allocation, copies, fills, free | the buffer's bytes (reads and writes as the copy goes; the free conflicts as a write) |
//! | [`Kernel::launch`](crate::Kernel::launch) with [`LaunchConfig::accesses`](crate::LaunchConfig::accesses) | what the launch declares |
//! | [`StreamRef::declare_accesses`](crate::StreamRef::declare_accesses) | what you declare, for work the crate cannot see (raw FFI, another library) |
//! | [`StreamRef::declare_collective`](crate::StreamRef::declare_collective) | each rank's accesses of a collective (NCCL's), on its stream, enqueued through it |
//! | [`host_access`] | host memory the host reads or writes (a pinned buffer a copy may still use) |
//!
//! Ordering comes from what the crate enqueues: records and waits (also those `wait_stream`,
//! `fork` and the buffers make), stream, event and device synchronizes (and queries that saw
//! the work complete; the clock a wait covers is read before it, so work another thread
//! enqueues meanwhile is not taken as done), work on the legacy stream, and the rendezvous of
//! a declared collective (each rank's later work comes after the earlier work of the ranks it
//! receives from, as its [`CollectiveOrder`] says). Completion futures
//! do not count as host waits. Work the crate does not see (raw FFI)
//! orders nothing; a borrowed stream whose flags the crate does not know counts as
//! non-blocking. Work enqueued into a capture is not checked when it is captured: its
//! accesses go with the capture's graph ([`Capture::end`](crate::Capture::end)) to its
//! executables, and each [`GraphExec::launch`](crate::GraphExec::launch) checks them as one
//! operation on its stream (treated as ordered among themselves, as the graph's edges
//! normally make them); so do captures into a [`GraphBuilder`](crate::GraphBuilder)'s graph or
//! bodies, and its kernel nodes' [`LaunchConfig::accesses`](crate::LaunchConfig::accesses)
//! (a body's accesses count as made, however often it runs; nodes added while the detector
//! is off keep nothing). Accesses declared into a capture that the crate did not begin
//! (another library's) are kept for its graph, which the crate never launches: past
//! [`KEPT_CAPTURED`] accesses of captures in progress, the oldest are dropped.
//! The detector starts with an empty history each time it is turned on: events recorded while
//! it was off order nothing.
//!
//! A race is reported as a [`RaceReport`]: both operations, their streams, the bytes, both
//! backtraces ([`Backtrace::capture`](std::backtrace::Backtrace::capture): set
//! `RUST_BACKTRACE=1`) and the allocation's, and the edge that would order them.
//!
//! What the detector does is chosen process-wide ([`set_race_mode`]) and per thread for a
//! scope ([`race_scope`], which overrides the process mode on its thread until dropped, and
//! nests): [`RaceMode::Report`] prints each race to stderr and keeps it ([`take_race_reports`],
//! [`RaceScope::take_reports`]); [`RaceMode::Fail`] refuses the operation with
//! [`Error::Race`](crate::Error::Race) before it is enqueued (the model does not record it). A
//! buffer's free in its drop cannot fail: its race is reported instead. Operations of two
//! threads checked at once are checked again against each other when CUDA has taken them:
//! a race found then is reported (the operation is enqueued already), also under `Fail`. The model follows every thread's operations while any thread has a mode
//! other than [`RaceMode::Off`]; races are reported for the operations made under one. Off
//! (the default), it costs each operation one relaxed load.

pub(crate) mod clock;
pub(crate) mod model;

pub use crate::ffi::race_report::{AccessKind, RaceAccess, RaceKind, RaceReport};

use self::model::{Model, Origin, Pending, Step, StreamKey, Use};
use super::mode_switch::{self, ModeScope, ModeSwitch, ThreadScopes};
use crate::ffi::error::{Error, Result};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What the race detector does with an operation that races another.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum RaceMode {
    /// Nothing (the default): nothing is tracked, unless another thread's scope is on.
    #[default]
    Off,
    /// The operation goes on; the race is printed to stderr and kept as a [`RaceReport`].
    Report,
    /// The operation fails with [`Error::Race`] before it is enqueued.
    Fail,
}

impl mode_switch::Mode for RaceMode {
    const OFF: Self = RaceMode::Off;
    const REPORT: Self = RaceMode::Report;
    const REFUSE: Self = RaceMode::Fail;
}

/// How many reports are kept for [`take_race_reports`] (and per scope); later ones are only
/// printed.
pub const KEPT_REPORTS: usize = 4096;

static MODEL: Mutex<Option<Model>> = Mutex::new(None);

thread_local! {
    /// This thread's open scopes, innermost last, with their reports.
    static SCOPES: ThreadScopes<RaceMode, RaceReport> = const { RefCell::new(Vec::new()) };
    /// Inside [`reporting_only`]: `Fail` reports instead.
    static REPORTING_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// The detector's mode, process-wide and per scope, and the reports of races found under it.
/// Once it is off everywhere, the history ends ([`forget_history`]).
static SWITCH: ModeSwitch<RaceMode, RaceReport> =
    ModeSwitch::new(&SCOPES, &REPORTING_ONLY, KEPT_REPORTS, Some(forget_history));

/// Runs `drop` (a destructor that frees, and cannot fail) with `Fail` turned into `Report`: a
/// refused free would leak the memory and lose the report.
pub(crate) fn reporting_only<R>(drop: impl FnOnce() -> R) -> R {
    SWITCH.reporting_only(drop)
}

/// Sets the process-wide mode, for every thread without a scope of its own; returns the
/// previous one. Turning the detector on from off everywhere starts an empty history.
pub fn set_race_mode(mode: RaceMode) -> RaceMode {
    SWITCH.set_process_mode(mode)
}

/// The process-wide mode.
pub fn race_mode() -> RaceMode {
    SWITCH.process_mode()
}

/// Takes the reports of races found under the process mode so far (those under a scope
/// belong to the scope: [`RaceScope::take_reports`]).
pub fn take_race_reports() -> Vec<RaceReport> {
    SWITCH.take_process_kept()
}

/// Opens a scope with `mode` on this thread: until the returned guard drops, operations of
/// this thread follow `mode` instead of the process mode, and their reports are kept in the
/// scope. Scopes nest; the innermost one decides. A guard leaked with `mem::forget` keeps the
/// detector on for the rest of the process.
pub fn race_scope(mode: RaceMode) -> RaceScope {
    RaceScope { scope: SWITCH.open_scope(mode) }
}

/// A race-detector scope of this thread ([`race_scope`]): the mode is restored when it
/// drops. Not `Send`: it belongs to its thread.
#[derive(Debug)]
#[must_use = "the scope ends when this guard drops"]
pub struct RaceScope {
    /// The scope on the switch, which closes it when dropped (and ends the history when that
    /// leaves the detector off everywhere).
    scope: ModeScope<RaceMode, RaceReport>,
}

impl RaceScope {
    /// Takes the reports of races found in this scope so far.
    pub fn take_reports(&self) -> Vec<RaceReport> {
        self.scope.take_kept()
    }
}

/// Ends the history; the switch calls it once the detector is off everywhere: edges made
/// while it is off are not seen, so an old history would report races that are not. Decided
/// under the model's lock by the on-period: a model that another thread made since, the
/// detector on again, belongs to the new period and is kept (so are its first records).
fn forget_history() {
    let mut guard = model();
    if guard.as_ref().is_some_and(|model| model.on_period() != SWITCH.on_period()) {
        *guard = None;
    }
}

/// Whether the detector follows operations now. One relaxed load.
#[inline(always)]
pub(crate) fn tracking() -> bool {
    SWITCH.is_on_anywhere()
}

/// The calling thread's mode: its innermost scope's (also an `Off` one under a process mode
/// that is on), else the process mode; inside a destructor that cannot fail
/// ([`reporting_only`]), `Fail` reports.
fn this_threads_mode() -> RaceMode {
    SWITCH.this_threads_mode()
}

struct ModelGuard(MutexGuard<'static, Option<Model>>);

impl std::ops::Deref for ModelGuard {
    type Target = Model;
    fn deref(&self) -> &Model {
        self.0.as_ref().expect("created by model()")
    }
}

impl std::ops::DerefMut for ModelGuard {
    fn deref_mut(&mut self) -> &mut Model {
        self.0.as_mut().expect("created by model()")
    }
}

fn model() -> MutexGuard<'static, Option<Model>> {
    MODEL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The model of the detector's current on-period, read under the model's lock: a model of an
/// earlier one (the detector went off everywhere since) is replaced by an empty one. `None`
/// once the detector is off everywhere: a thread that found it on and then took the lock after
/// it went off records nothing (a model made then would belong to the next on-period, and
/// carry this record into it).
fn live_model() -> Option<ModelGuard> {
    let mut guard = model();
    let period = SWITCH.on_now()?;
    if guard.as_ref().is_none_or(|model| model.on_period() != period) {
        *guard = Some(Model::new(period));
    }
    Some(ModelGuard(guard))
}

/// Prints and keeps `races` where this thread's mode reports them.
fn report(mode: RaceMode, races: Vec<RaceReport>) {
    if mode == RaceMode::Off || races.is_empty() {
        return;
    }
    {
        // Not `eprintln!`, which panics when stderr is closed: this runs in drops too.
        let mut stderr = std::io::stderr().lock();
        for race in &races {
            let _ = writeln!(stderr, "cuda-stream race detector: {race}");
        }
    }
    SWITCH.keep(races);
}

/// Reports `late`, the races an operation checked under `mode` makes with operations another
/// thread recorded between its check and its record: it is enqueued already, so they are
/// reported, also under `Fail`.
fn report_late(mode: RaceMode, late: Vec<RaceReport>) {
    report(if mode == RaceMode::Off { mode } else { RaceMode::Report }, late);
}

/// Memory of a stream's device that an operation reads or writes: declared for a typed
/// launch ([`LaunchConfig::accesses`](crate::LaunchConfig::accesses)) or for work the crate
/// cannot see ([`StreamRef::declare_accesses`](crate::StreamRef::declare_accesses)).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    address: u64,
    bytes: u64,
    kind: AccessKind,
}

impl Access {
    /// The address of its first byte.
    pub(crate) fn address(&self) -> u64 {
        self.address
    }

    /// Reads `len` elements at `pointer`.
    pub fn read<T>(pointer: *const T, len: usize) -> Access {
        Access::of(pointer, len, AccessKind::Read)
    }

    /// Writes (or reads and writes) `len` elements at `pointer`.
    pub fn write<T>(pointer: *const T, len: usize) -> Access {
        Access::of(pointer, len, AccessKind::Write)
    }

    /// `bytes` bytes at device address `address`, accessed as `kind`.
    pub fn bytes(address: u64, bytes: u64, kind: AccessKind) -> Access {
        Access { address, bytes, kind }
    }

    fn of<T>(pointer: *const T, len: usize, kind: AccessKind) -> Access {
        let bytes = (len as u64).saturating_mul(size_of::<T>() as u64);
        Access { address: pointer as u64, bytes, kind }
    }

    /// The access as the model's use.
    pub(crate) fn as_use(self) -> Use {
        Use { address: self.address, bytes: self.bytes, kind: self.kind }
    }
}

/// `accesses` as the model's uses.
pub(crate) fn uses(accesses: &[Access]) -> Vec<Use> {
    accesses.iter().map(|access| access.as_use()).collect()
}

/// What a wait for the device waits for, read before the wait ([`snapshot`]).
pub(crate) struct Snapshot {
    generation: u64,
    clock: clock::Clock,
}

/// Reads, while the detector is on, what a wait about to be made waits for (`read`: a
/// stream's, an event's or a device's clock). Before the wait: work another thread enqueues
/// during it is not taken as done.
#[inline(always)]
pub(crate) fn snapshot(read: impl FnOnce(&mut Model) -> clock::Clock) -> Option<Snapshot> {
    if !tracking() {
        return None;
    }
    let mut model = live_model()?;
    let generation = model.generation();
    Some(Snapshot { generation, clock: read(&mut model) })
}

/// The host saw the work of `snapshot` complete: everything enqueued later comes after it.
#[inline(always)]
pub(crate) fn host_saw(snapshot: Option<Snapshot>) {
    if let Some(snapshot) = snapshot {
        let mut guard = model();
        if let Some(model) = guard.as_mut().filter(|model| model.generation() == snapshot.generation) {
            model.host_saw(&snapshot.clock);
        }
    }
}

/// An operation the detector checked, to be recorded once CUDA took it ([`Checked::enqueued`]).
#[must_use]
pub(crate) struct Checked {
    /// Boxed: a `Checked` of the detector off is one null pointer on the hot path.
    pending: Option<Box<Unrecorded>>,
}

/// An operation checked and not yet recorded: the model's verdict, its uses, who made it, and
/// what the thread's mode does with races found when it is recorded.
struct Unrecorded(Pending, Vec<Use>, Arc<Origin>, RaceMode);

impl Checked {
    /// Nothing to record: the detector is off, or the operation goes into a capture.
    #[inline(always)]
    pub(crate) fn none() -> Checked {
        Checked { pending: None }
    }

    /// Records the operation in the model: CUDA accepted it. Dropped without this (CUDA
    /// refused the operation), the model does not see it.
    #[inline(always)]
    pub(crate) fn enqueued(self) {
        if let Some(checked) = self.pending {
            commit(*checked);
        }
    }
}

/// [`Checked::enqueued`] of an operation the detector checked.
#[cold]
#[inline(never)]
fn commit(checked: Unrecorded) {
    let Unrecorded(pending, uses, origin, mode) = checked;
    // Not into a model made since the check (the detector was turned off and on).
    let late = model().as_mut().map(|model| model.commit(pending, &uses, origin)).unwrap_or_default();
    report_late(mode, late);
}

/// Checks an operation about to be enqueued on `stream`, while the detector is on:
/// `Err(Error::Race)` under [`RaceMode::Fail`] when it races; otherwise the races are reported
/// as this thread's mode says, and the returned [`Checked`] records it once CUDA took it.
///
/// # Errors
/// [`Error::Race`] as above.
#[cold]
#[inline(never)]
pub(crate) fn check(stream: StreamKey, step: Step, uses: Vec<Use>, operation: String) -> Result<Checked> {
    let mode = this_threads_mode();
    let origin = Arc::new(if uses.is_empty() { Origin::unseen(operation) } else { Origin::here(operation) });
    let Some(mut model) = live_model() else { return Ok(Checked::none()) };
    let mut pending = model.check(&stream, step, &uses, &origin);
    drop(model);
    decide(mode, std::mem::take(&mut pending.races))?;
    Ok(Checked { pending: Some(Box::new(Unrecorded(pending, uses, origin, mode))) })
}

/// Which ranks of a collective wait for which: what the rendezvous of
/// [`StreamRef::declare_collective`](crate::StreamRef::declare_collective) orders. A rank's
/// part cannot complete before the parts it receives data from have begun, and a part begins
/// only after the work enqueued before it on its stream: so a rank's later work comes after
/// the earlier work of every rank it receives from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveOrder {
    /// Every rank receives from every rank: all-reduce, all-gather, reduce-scatter,
    /// all-to-all.
    AllToAll,
    /// Every rank receives from the first rank (the root) and from no other: broadcast,
    /// scatter, and a send (first rank) with its receive (second rank).
    FromFirstRank,
    /// The first rank (the root) receives from every rank, the others from none: reduce,
    /// gather.
    IntoFirstRank,
}

impl CollectiveOrder {
    /// Whether rank `rank` receives data from rank `from`.
    fn receives(self, rank: usize, from: usize) -> bool {
        match self {
            CollectiveOrder::AllToAll => true,
            CollectiveOrder::FromFirstRank => from == 0,
            CollectiveOrder::IntoFirstRank => rank == 0,
        }
    }
}

/// A collective checked and not yet recorded ([`check_collective`]): recorded by
/// [`CheckedCollective::enqueued`] once the collective was enqueued.
#[must_use]
pub(crate) struct CheckedCollective {
    mode: RaceMode,
    order: CollectiveOrder,
    origin: Arc<Origin>,
    /// The model the ranks were checked against (none: the detector was off by then).
    generation: Option<u64>,
    /// Per rank: its stream, what it knew of before the collective, its check, its uses.
    ranks: Vec<(StreamKey, clock::Clock, Pending, Vec<Use>)>,
}

/// Checks a collective about to be enqueued (see
/// [`StreamRef::declare_collective`](crate::StreamRef::declare_collective)): each rank's
/// accesses on its stream, as one operation there. Under [`RaceMode::Fail`] a race of any rank
/// refuses them all; otherwise the races are reported as this thread's mode says.
///
/// # Errors
/// [`Error::Race`] as above.
#[cold]
#[inline(never)]
pub(crate) fn check_collective(
    ranks: Vec<(StreamKey, Vec<Use>)>,
    order: CollectiveOrder,
    operation: &str,
) -> Result<CheckedCollective> {
    let mode = this_threads_mode();
    let origin = Arc::new(Origin::here(operation));
    let Some(mut model) = live_model() else {
        return Ok(CheckedCollective { mode, order, origin, generation: None, ranks: Vec::new() });
    };
    let generation = Some(model.generation());
    let mut checked = Vec::with_capacity(ranks.len());
    let mut races = Vec::new();
    for (key, uses) in ranks {
        let (mut pending, before) = model.check_after(&key, Step::Work, &uses, &origin);
        races.append(&mut pending.races);
        checked.push((key, before, pending, uses));
    }
    drop(model);
    decide(mode, races)?;
    Ok(CheckedCollective { mode, order, origin, generation, ranks: checked })
}

impl CheckedCollective {
    /// Records the collective: CUDA took it. Its ranks' accesses, and the rendezvous (unless
    /// no rank accesses anything: a collective of no elements enqueues nothing). Races with
    /// operations other threads recorded since the check are reported.
    pub(crate) fn enqueued(self) {
        let CheckedCollective { mode, order, origin, generation, ranks } = self;
        let Some(generation) = generation else { return };
        let mut guard = model();
        let Some(model) = guard.as_mut().filter(|model| model.generation() == generation) else { return };
        let moves_data = ranks.iter().any(|(_, _, _, uses)| uses.iter().any(|access| access.bytes > 0));
        let mut late = Vec::new();
        let mut rendezvous = Vec::with_capacity(ranks.len());
        for (key, before, pending, uses) in ranks {
            late.append(&mut model.commit(pending, &uses, origin.clone()));
            rendezvous.push((key, before));
        }
        if moves_data {
            model.rendezvous(&rendezvous, |rank, from| order.receives(rank, from));
        }
        drop(guard);
        report_late(mode, late);
    }
}

/// Memory a host access touches: `bytes` bytes at `address` of host memory, read or
/// written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HostAccess {
    /// The first byte.
    pub address: *const u8,
    /// How many bytes.
    pub bytes: usize,
    /// Read or written (a free is a write).
    pub kind: AccessKind,
}

/// Declares that the host is about to read or write host memory (pinned memory a copy may
/// use): checked against the device's accesses of it that the host has not waited for
/// (a stream or event synchronize, or a query that saw the work complete).
///
/// # Errors
/// [`Error::Race`] under [`RaceMode::Fail`] when a copy of that memory may still be in
/// flight; the access is then not recorded.
pub fn host_access(operation: &str, accesses: &[HostAccess]) -> Result<()> {
    if !tracking() {
        return Ok(());
    }
    let uses: Vec<Use> = accesses
        .iter()
        .map(|access| Access::bytes(access.address as u64, access.bytes as u64, access.kind).as_use())
        .collect();
    let mode = this_threads_mode();
    let origin = Arc::new(Origin::here(operation));
    let races = {
        let Some(mut model) = live_model() else { return Ok(()) };
        let races = model.host_check(&uses, &origin);
        if mode != RaceMode::Fail || races.is_empty() {
            model.host_commit(&uses, origin);
        }
        races
    };
    decide(mode, races)
}

/// What `mode` does with `races` found before an operation: under `Fail`, the first is the
/// operation's [`Error::Race`]; otherwise they are reported as the mode says.
fn decide(mode: RaceMode, races: Vec<RaceReport>) -> Result<()> {
    if mode != RaceMode::Fail {
        report(mode, races);
        return Ok(());
    }
    match races.into_iter().next() {
        Some(first) => Err(Error::Race(Box::new(first))),
        None => Ok(()),
    }
}

/// Memory allocated on `stream` by `operation` (stream-ordered: a write of all of it there):
/// its history starts here, and reports name this allocation.
#[inline(always)]
pub(crate) fn allocated(stream: impl FnOnce() -> StreamKey, allocation: impl FnOnce() -> Use, operation: &str) {
    if tracking() {
        let origin = Arc::new(Origin::here(operation));
        if let Some(mut model) = live_model() {
            model.allocated(&stream(), allocation(), origin);
        }
    }
}

/// The accesses declared while a capture was in progress, keyed by CUDA's capture id, until
/// the capture ends and its graph takes them.
static CAPTURED: Mutex<VecDeque<(u64, Use, Arc<Origin>)>> = Mutex::new(VecDeque::new());

/// How many accesses declared into captures in progress are kept; past it the oldest are
/// dropped, whichever capture declared them (a capture of more accesses loses its first ones).
/// It bounds what captures begun outside the crate leave: their accesses are never taken,
/// since their graphs are not the crate's to launch.
pub const KEPT_CAPTURED: usize = 1 << 16;

/// The accesses of the work a capture recorded: each launch of the graph replays them on its
/// stream ([`GraphExec::launch`](crate::GraphExec::launch)).
#[derive(Clone, Debug, Default)]
pub(crate) struct CapturedAccesses(Vec<(Use, Arc<Origin>)>);

impl CapturedAccesses {
    /// `earlier`'s accesses and then `later`'s: a graph's, grown by another capture into it.
    pub(crate) fn append(
        earlier: Option<Arc<CapturedAccesses>>,
        later: Option<Arc<CapturedAccesses>>,
    ) -> Option<Arc<CapturedAccesses>> {
        match (earlier, later) {
            (Some(mut earlier), Some(later)) => {
                // In place while no executable shares the list (a graph grown node by node).
                Arc::make_mut(&mut earlier).0.extend(later.0.iter().cloned());
                Some(earlier)
            }
            (earlier, later) => earlier.or(later),
        }
    }

    /// The accesses `accesses` of a node `operation` added to a graph, while the detector is on
    /// (`None` otherwise, or when there are none).
    pub(crate) fn of_node(operation: &str, accesses: &[Access]) -> Option<Arc<CapturedAccesses>> {
        if !tracking() || accesses.iter().all(|access| access.bytes == 0) {
            return None;
        }
        let origin = Arc::new(Origin::here(operation));
        Some(Arc::new(CapturedAccesses(accesses.iter().map(|access| (access.as_use(), origin.clone())).collect())))
    }
}

/// Operation `operation` enqueued into the capture `capture` uses `uses`: kept for the graph.
#[cold]
pub(crate) fn captured(capture: u64, uses: Vec<Use>, operation: String) {
    if uses.is_empty() {
        return;
    }
    let origin = Arc::new(Origin::here(operation));
    let mut captured = CAPTURED.lock().unwrap_or_else(PoisonError::into_inner);
    captured.extend(uses.into_iter().map(|access| (capture, access, origin.clone())));
    let over = captured.len().saturating_sub(KEPT_CAPTURED);
    captured.drain(..over);
}

/// The accesses declared into capture `capture`, which has ended (`None` when there were
/// none).
pub(crate) fn take_captured(capture: u64) -> Option<Arc<CapturedAccesses>> {
    let mut captured = CAPTURED.lock().unwrap_or_else(PoisonError::into_inner);
    if captured.is_empty() {
        return None;
    }
    let mut taken = Vec::new();
    captured.retain(|(id, access, origin)| {
        let mine = *id == capture;
        if mine {
            taken.push((*access, origin.clone()));
        }
        !mine
    });
    (!taken.is_empty()).then(|| Arc::new(CapturedAccesses(taken)))
}

/// Checks a launch of a graph whose capture declared `accesses` on `stream`: one operation
/// that makes them all (the graph's own edges order them among themselves), named after the
/// launch and the captured operations.
///
/// # Errors
/// [`Error::Race`] as [`check`].
pub(crate) fn check_replay(stream: StreamKey, accesses: &CapturedAccesses) -> Result<Checked> {
    let uses: Vec<Use> = accesses.0.iter().map(|(access, _)| *access).collect();
    let mut names: Vec<&str> = accesses.0.iter().map(|(_, origin)| origin.operation.as_str()).collect();
    names.dedup();
    check(stream, Step::Work, uses, format!("cudaGraphLaunch (captured: {})", names.join(", ")))
}

/// Runs `update` on the model while the detector is on.
#[inline(always)]
pub(crate) fn update(update: impl FnOnce(&mut Model)) {
    if tracking() {
        if let Some(mut model) = live_model() {
            update(&mut model);
        }
    }
}

#[cfg(test)]
mod pytorch_port;
#[cfg(test)]
mod tests;
