//! Graphs that hold memory: device buffers shared as `Arc<DeviceBuffer>` and page-locked memory
//! as `Arc<SharedPinned>` (written and read on the host through its guard, which no launch
//! waits for: a node or a launch over it is refused with `GraphMisuse` while the program holds
//! a guard), used by the memcpy and memset nodes of graphs built node by node (good and refused
//! nodes, host-function nodes, node counts), by the memory work of the
//! program's captures (`Capture::copy`, `fill_bytes`, the pinned copies, `use_on`), and by
//! captures of their own that end, fail, are dropped or are ended by raw FFI; capture buffers,
//! memory those captures' graphs allocate and free themselves, in both kinds of capture
//! (`graph_memory/capture_buffers.rs`); the graphs cloned,
//! instantiated, launched (also from another thread, and while the program holds a page-locked
//! buffer's lock), updated and dropped in any order with launches pending. A graph whose last
//! memory nodes fill elements of a buffer with a byte and copy them to page-locked memory is
//! checked after its launches: the host reads that byte there; so is a fill of a capture
//! buffer copied out to page-locked memory or a shared buffer (read back with `to_vec`).

use super::*;
use cuda_stream::conditional::{GraphBuilder, GraphNode};
use cuda_stream::{CaptureBuffer, DeviceBuffer, PinnedBuffer, PinnedGuard, SharedPinned};
use std::cell::Cell;
use std::ops::Range;
use std::sync::Weak;

use capture_buffers::Scratch;
pub(crate) use capture_buffers::free_before_end;

/// Bounds on what one program holds at a time.
const MAX_SHARED: usize = 6;
const MAX_LOCKED: usize = 3;
const MAX_MEMORY_GRAPHS: usize = 4;
const MAX_MEMORY_EXECS: usize = 4;
/// The device buffers the memory nodes of one graph may use (the crate's bound).
const MAX_GRAPH_BUFFERS: usize = 12;

/// A device buffer that graphs may hold.
pub(crate) type SharedBuffer = Arc<DeviceBuffer<u32, Arc<Stream>>>;
/// Page-locked memory that graphs may hold, behind the lock the host takes.
pub(crate) type Locked = Arc<SharedPinned<u32>>;
/// Page-locked memory, not kept alive.
type WeakLocked = Weak<SharedPinned<u32>>;

/// The homes of the buffers that captures may hold, made once per process before the baseline
/// of live streams: a capture whose end fails leaks what it holds (as documented), and with a
/// buffer its home, which as a stream of the program would never be released.
static CAPTURE_HOMES: OnceLock<Vec<Arc<Stream>>> = OnceLock::new();

/// Makes the homes of the buffers that captures may hold (before the baseline is taken).
pub(crate) fn make_capture_homes(device: Device) {
    CAPTURE_HOMES.get_or_init(|| {
        [StreamOptions::non_blocking(), StreamOptions::default()]
            .into_iter()
            .map(|options| Arc::new(Stream::new(device, options).expect("a home stream for buffers captures hold")))
            .collect()
    });
}

fn capture_home(pick: u32) -> Option<Arc<Stream>> {
    let homes = CAPTURE_HOMES.get()?;
    (!homes.is_empty()).then(|| Arc::clone(&homes[pick as usize % homes.len()]))
}

/// The identity of the value behind an `Arc` (stable while any `Arc` or `Weak` of it lives).
fn identity<T: ?Sized>(arc: &Arc<T>) -> usize {
    Arc::as_ptr(arc).cast::<()>() as usize
}

fn weak_identity<T>(weak: &Weak<T>) -> usize {
    weak.as_ptr().cast::<()>() as usize
}

fn lock(locked: &Locked) -> PinnedGuard<'_, u32> {
    locked.lock()
}

/// A shared device buffer of the program.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) buffer: SharedBuffer,
    /// Homed on [`CAPTURE_HOMES`]: captures may hold it. A buffer of the program shared later
    /// lives on a home of the program, and only built graphs hold it.
    pub(crate) capturable: bool,
    /// Given to graphs borrowed (`&DeviceBuffer`: the graph holds its memory apart from it)
    /// rather than as the `Arc`. Such a buffer may go back to the program's plain buffers
    /// while graphs hold its memory, and be used, exported or dropped there; what a graph
    /// holding it may do is then less known (see [`Holds::add_parts`]).
    pub(crate) borrowed: bool,
}

/// Runs `$body` with `$b` the buffer of `$shared` as a graph is given it: borrowed or shared.
macro_rules! with_side {
    ($shared:expr, |$b:ident| $body:expr) => {
        if $shared.borrowed {
            let $b = &*$shared.buffer;
            $body
        } else {
            let $b = &$shared.buffer;
            $body
        }
    };
}

/// One memory operation of a graph, with its operands.
#[derive(Clone)]
enum Plan {
    Fill { buffer: Shared, range: Range<usize>, byte: u8 },
    Copy { to: Shared, to_range: Range<usize>, from: Shared, from_range: Range<usize> },
    FromPinned { to: Shared, to_range: Range<usize>, from: Locked, from_range: Range<usize> },
    ToPinned { to: Locked, to_range: Range<usize>, from: Shared, from_range: Range<usize> },
}

impl Plan {
    fn buffers(&self) -> Vec<&Shared> {
        match self {
            Plan::Fill { buffer, .. } => vec![buffer],
            Plan::Copy { to, from, .. } => vec![to, from],
            Plan::FromPinned { to, .. } => vec![to],
            Plan::ToPinned { from, .. } => vec![from],
        }
    }

    fn pinned(&self) -> Option<&Locked> {
        match self {
            Plan::FromPinned { from, .. } => Some(from),
            Plan::ToPinned { to, .. } => Some(to),
            Plan::Fill { .. } | Plan::Copy { .. } => None,
        }
    }

    fn node_name(&self) -> &'static str {
        match self {
            Plan::Fill { .. } => "GraphBuilder::add_fill_bytes",
            Plan::Copy { .. } => "GraphBuilder::add_copy",
            Plan::FromPinned { .. } => "GraphBuilder::add_copy_from_pinned",
            Plan::ToPinned { .. } => "GraphBuilder::add_copy_to_pinned",
        }
    }

    fn capture_name(&self) -> &'static str {
        match self {
            Plan::Fill { .. } => "Capture::fill_bytes",
            Plan::Copy { .. } => "Capture::copy",
            Plan::FromPinned { .. } => "Capture::copy_from_pinned",
            Plan::ToPinned { .. } => "Capture::copy_to_pinned",
        }
    }
}

/// What a launch leaves: elements `range` of this page-locked buffer (or shared device buffer)
/// hold bytes `byte`.
#[derive(Clone)]
struct Expect {
    place: Place,
    range: Range<usize>,
    byte: u8,
}

/// Where a launch leaves what [`Expect`] says: memory not kept alive by it.
#[derive(Clone)]
enum Place {
    Pinned(WeakLocked),
    /// A shared device buffer, read back with `to_vec` (ordered after the launch).
    Device(Weak<DeviceBuffer<u32, Arc<Stream>>>),
}

impl Expect {
    fn pinned(pinned: &Locked, range: Range<usize>, byte: u8) -> Expect {
        Expect { place: Place::Pinned(Arc::downgrade(pinned)), range, byte }
    }

    fn device(buffer: &SharedBuffer, range: Range<usize>, byte: u8) -> Expect {
        Expect { place: Place::Device(Arc::downgrade(buffer)), range, byte }
    }
}

/// Memory the graph allocates itself (capture buffers, `capture_buffers.rs`), as far as the
/// program knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum OwnMemory {
    /// No memory node.
    #[default]
    None,
    /// Every capture buffer is freed in the graph: launches as any other (CUDA allows one
    /// executable of it at a time: a second instantiation fails, a typed error).
    Freed,
    /// A capture buffer is never freed: a launch after the first (of this executable, or of
    /// another while one's allocation is outstanding) fails with CUDA's error. Only for an
    /// executable instantiated without `auto_free_on_launch`.
    Unfreed,
    /// A clone of a graph with memory nodes: where CUDA puts its allocations is not the
    /// program's to know, nor so whether its launches meet another's outstanding allocation.
    Cloned,
}

/// What a node of a built graph is; `TailFill` and `TailCopy` are its last memory nodes: a
/// fill, and the copy of the filled elements to page-locked memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fill,
    Copy,
    FromPinned,
    ToPinned,
    HostFn,
    TailFill,
    TailCopy,
}

/// A node of a built graph: its kind and the nodes it comes after (indices).
#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    after: Vec<usize>,
}

/// What a graph (a capture, an executable) holds and leaves, as far as the program knows.
#[derive(Clone, Default)]
pub(crate) struct Holds {
    /// The device buffers its nodes use (identities).
    buffers: Vec<usize>,
    /// One of them lives on a home of the program: no capture writes into this graph.
    program_homed: bool,
    /// The page-locked buffers its nodes copy (identities).
    pinned: Vec<usize>,
    /// What each launch leaves in page-locked memory.
    expect: Option<Expect>,
    /// Its nodes, for a graph built node by node: a graph of the same shape updates its
    /// executables.
    shape: Option<Vec<Node>>,
    /// Memory work into it failed with an error after which it may or may not hold the
    /// memory: what it holds is an upper bound, and its launches' refusals are not known.
    uncertain: bool,
    /// Memory its graph allocates itself.
    own: OwnMemory,
}

impl Holds {
    fn holds_pinned(&self, id: usize) -> bool {
        self.pinned.contains(&id)
    }

    fn holds_buffer(&self, id: usize) -> bool {
        self.buffers.contains(&id)
    }

    /// Now also what `plan` uses.
    fn add(&mut self, plan: &Plan) {
        self.add_parts(&plan.buffers(), plan.pinned());
    }

    /// Now also the shared buffers `buffers` and the page-locked buffer `pinned`.
    fn add_parts(&mut self, buffers: &[&Shared], pinned: Option<&Locked>) {
        for shared in buffers {
            let id = identity(&shared.buffer);
            if !self.holds_buffer(id) {
                self.buffers.push(id);
            }
            self.program_homed |= !shared.capturable;
            // The memory of a borrowed buffer: the program may export its address (launches
            // refused), or drop the buffer while this graph holds the memory.
            self.uncertain |= shared.borrowed;
        }
        if let Some(pin) = pinned {
            let id = identity(pin);
            if !self.holds_pinned(id) {
                self.pinned.push(id);
            }
        }
    }

    /// Its launches' results are not known: memory work that failed into it, or memory of
    /// its own that a launch may find outstanding.
    fn launches_unknown(&self) -> bool {
        self.uncertain || matches!(self.own, OwnMemory::Unfreed | OwnMemory::Cloned)
    }

    /// What adding `plan` (`bad`: with refused operands) to a graph that holds this must give:
    /// [`Error::Size`] for bad operands or a 13th buffer.
    fn expected(&self, plan: &Plan, bad: bool) -> Expected {
        if bad {
            return Expected::Size;
        }
        if self.uncertain || plan.buffers().iter().any(|shared| shared.borrowed) {
            // A borrowed buffer may be refused (its address exported, its home capturing with
            // uses not marked) and is one more entry beside its `Arc`.
            return Expected::Typed;
        }
        let mut buffers: Vec<usize> = self.buffers.clone();
        for shared in plan.buffers() {
            let id = identity(&shared.buffer);
            if !buffers.contains(&id) {
                buffers.push(id);
            }
        }
        if buffers.len() > MAX_GRAPH_BUFFERS {
            return Expected::Size;
        }
        Expected::Ok
    }
}

/// What a call must give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expected {
    Ok,
    Size,
    GraphMisuse,
    CaptureMisuse,
    /// Any typed result.
    Typed,
}

fn check_expected<T: std::fmt::Debug>(what: &str, expected: Expected, result: &Result<T>) {
    let fine = match expected {
        Expected::Ok => result.is_ok(),
        Expected::Size => matches!(result, Err(Error::Size(_))),
        Expected::GraphMisuse => matches!(result, Err(Error::GraphMisuse(_))),
        Expected::CaptureMisuse => matches!(result, Err(Error::CaptureMisuse(_))),
        Expected::Typed => true,
    };
    assert!(fine, "{what}: expected {expected:?}, got {result:?}");
}

/// A refusal by the planning checks, before anything is held or enqueued.
fn refused_by_checks<T>(result: &Result<T>) -> bool {
    matches!(result, Err(Error::Size(_) | Error::GraphMisuse(_) | Error::CaptureMisuse(_)))
}

pub(crate) struct MemoryGraph {
    graph: Graph,
    holds: Holds,
}

pub(crate) struct MemoryExec {
    exec: GraphExec,
    holds: Holds,
}

/// The memory work captured so far into the program's capture `generation`.
pub(crate) struct CaptureHolds {
    generation: u64,
    holds: Holds,
    /// Some of it went to a stream other than the captured one: unordered with the rest.
    off_origin: bool,
    /// Some of it may have been captured: the graph goes to this family.
    used: bool,
    /// Its capture buffers, and the streams forked for them (`capture_buffers.rs`).
    scratch: Scratch,
}

/// The shared memory of a program, and the graphs and executables that hold it.
#[derive(Default)]
pub(crate) struct GraphMem {
    shared: Vec<Shared>,
    locked: Vec<Locked>,
    graphs: Vec<MemoryGraph>,
    execs: Vec<MemoryExec>,
    capture: Option<CaptureHolds>,
    /// A capture buffer of a capture that ended: refused by every later capture.
    stale: Option<CaptureBuffer<u32>>,
}

impl GraphMem {
    /// The page-locked memory of the program.
    fn pins_now(&self) -> Vec<Locked> {
        self.locked.clone()
    }

    fn capturable(&self) -> Vec<Shared> {
        self.shared.iter().filter(|shared| shared.capturable).cloned().collect()
    }

    /// Whether a launch of what holds `holds` must be refused now ([`Error::GraphMisuse`]): a
    /// page-locked buffer it copies is `guarded` (the program holds its lock).
    fn refused(&self, holds: &Holds, guarded: Option<usize>) -> bool {
        guarded.is_some_and(|id| holds.holds_pinned(id))
    }

    /// What a launch of what holds `holds` must give now (`guarded`: the program holds that
    /// page-locked buffer's lock; `strict`: on a stream outside captures).
    fn launch_expected(&self, holds: &Holds, guarded: Option<usize>, strict: bool) -> Expected {
        if holds.uncertain {
            Expected::Typed
        } else if self.refused(holds, guarded) {
            // Refused before CUDA sees the launch, whatever its memory of its own.
            Expected::GraphMisuse
        } else if strict && !holds.launches_unknown() {
            Expected::Ok
        } else {
            Expected::Typed
        }
    }

    fn keep_graph(&mut self, graph: Graph, holds: Holds) {
        if self.graphs.len() < MAX_MEMORY_GRAPHS {
            self.graphs.push(MemoryGraph { graph, holds });
        }
    }

    /// What capture `generation` holds, when it used this family's memory: its graph is then
    /// kept here (see `World::end_capture`).
    pub(crate) fn capture_ended(&mut self, generation: u64) -> Option<Holds> {
        let mut capture = self.capture.take()?;
        // Its forks leave with the capture's end; a capture buffer of it is kept to be refused.
        if let Some(block) = capture.scratch.ended() {
            self.stale = Some(block);
        }
        if capture.generation != generation || !capture.used {
            return None;
        }
        let mut holds = capture.holds;
        if capture.off_origin {
            holds.expect = None;
        }
        Some(holds)
    }

    /// A buffer of the program was written during capture `generation` by a call that went
    /// through (a fill, a copy between buffers, a typed launch): the capture's graph may hold
    /// it beside what this family gave it, so what the capture holds is an upper bound (its
    /// 13th buffer may come sooner) and includes a buffer homed on the program's streams.
    pub(crate) fn program_buffer_captured(&mut self, generation: u64) {
        let capture = CaptureHolds::current(&mut self.capture, generation);
        capture.holds.uncertain = true;
        capture.holds.program_homed = true;
    }

    pub(crate) fn keep_captured(&mut self, graph: Graph, holds: Holds) {
        self.keep_graph(graph, holds);
    }

    fn new_locked(&mut self, tag: u8) {
        if self.locked.len() >= MAX_LOCKED {
            return;
        }
        let len = LENGTHS[usize::from(tag) % LENGTHS.len()];
        let made =
            if tag % 2 == 0 { PinnedBuffer::zeroed(len) } else { PinnedBuffer::from_slice(&vec![word(tag); len]) };
        note("PinnedBuffer::new (shared)", &made);
        if let Ok(buffer) = made {
            self.locked.push(Arc::new(SharedPinned::new(buffer)));
        }
    }

    fn new_shared(&mut self, pick: u32, tag: u8) {
        if self.shared.len() >= MAX_SHARED {
            return;
        }
        let Some(home) = capture_home(pick) else { return };
        let len = LENGTHS[usize::from(tag) % LENGTHS.len()];
        let made = if tag % 2 == 0 {
            DeviceBuffer::zeroed(home, len)
        } else {
            DeviceBuffer::from_slice(home, &vec![word(tag); len])
        };
        note("DeviceBuffer::new (shared)", &made);
        if let Ok(buffer) = made {
            self.shared.push(Shared { buffer: Arc::new(buffer), capturable: true, borrowed: tag % 3 == 0 });
        }
    }

    /// Drops everything in a random order (graphs, executables, buffers, page-locked buffers).
    pub(crate) fn drop_all(&mut self, rng: &mut Rng) {
        self.capture = None;
        self.stale = None;
        while !self.graphs.is_empty() || !self.execs.is_empty() || !self.shared.is_empty() || !self.locked.is_empty() {
            match rng.below(4) {
                0 if !self.graphs.is_empty() => drop(self.graphs.swap_remove(rng.below(self.graphs.len()))),
                1 if !self.execs.is_empty() => drop(self.execs.swap_remove(rng.below(self.execs.len()))),
                2 if !self.shared.is_empty() => drop(self.shared.swap_remove(rng.below(self.shared.len()))),
                3 if !self.locked.is_empty() => drop(self.locked.swap_remove(rng.below(self.locked.len()))),
                _ => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Operands
// ---------------------------------------------------------------------------------------------

/// `n` elements within `0..len`.
fn range_of(rng: &mut Rng, len: usize, n: usize) -> Range<usize> {
    let start = rng.below(len - n + 1);
    start..start + n
}

fn some_range(rng: &mut Rng, len: usize) -> Range<usize> {
    let n = 1 + rng.below(len);
    range_of(rng, len, n)
}

/// A range `checked_range` refuses: empty, reversed, or past the end of `0..len`.
fn bad_range(rng: &mut Rng, len: usize) -> Range<usize> {
    match rng.below(3) {
        0 => {
            let at = rng.below(len + 1);
            at..at
        }
        1 => {
            let end = rng.below(len);
            let start = end + 1 + rng.below(4);
            Range { start, end }
        }
        _ => {
            let start = rng.below(len);
            start..len + 1 + rng.below(8)
        }
    }
}

/// The two sides of a copy into `0..to` from `0..from` (`same`: one buffer); refused ones when
/// `bad`: a side out of range, sides of different lengths, or (one buffer) overlapping sides.
fn copy_ranges(rng: &mut Rng, to: usize, from: usize, same: bool, bad: bool) -> (Range<usize>, Range<usize>) {
    if !bad {
        if same {
            let n = 1 + rng.below(to / 2);
            let first = rng.below(to - 2 * n + 1);
            let second = first + n + rng.below(to - n - (first + n) + 1);
            let (a, b) = (first..first + n, second..second + n);
            return if coin(rng) { (a, b) } else { (b, a) };
        }
        let n = 1 + rng.below(to.min(from));
        return (range_of(rng, to, n), range_of(rng, from, n));
    }
    match rng.below(if same { 4 } else { 3 }) {
        0 => (bad_range(rng, to), some_range(rng, from)),
        1 => (some_range(rng, to), bad_range(rng, from)),
        2 => {
            let n = 1 + rng.below(to);
            let m = if n < from { n + 1 + rng.below(from - n) } else { 1 + rng.below(from.min(n - 1)) };
            (range_of(rng, to, n), range_of(rng, from, m))
        }
        _ => {
            let n = 1 + rng.below(to);
            let first = rng.below(to - n + 1);
            let second = first - rng.below(n).min(first);
            (first..first + n, second..second + n)
        }
    }
}

/// An operation of `kind` on `shared` and `pins` (`None` when they lack what it needs), with
/// refused operands when `bad`.
fn make_plan(rng: &mut Rng, kind: Kind, shared: &[Shared], pins: &[Locked], bad: bool) -> Option<Plan> {
    if shared.is_empty() {
        return None;
    }
    let buffer = |rng: &mut Rng| shared[rng.below(shared.len())].clone();
    let pin = |rng: &mut Rng| (!pins.is_empty()).then(|| pins[rng.below(pins.len())].clone());
    Some(match kind {
        Kind::Fill | Kind::TailFill => {
            let buffer = buffer(rng);
            let len = buffer.buffer.len();
            let range = if bad { bad_range(rng, len) } else { some_range(rng, len) };
            Plan::Fill { buffer, range, byte: byte(rng) }
        }
        Kind::Copy => {
            let to = buffer(rng);
            let from = if rng.below(4) == 0 { to.clone() } else { buffer(rng) };
            let same = identity(&to.buffer) == identity(&from.buffer);
            let (to_range, from_range) = copy_ranges(rng, to.buffer.len(), from.buffer.len(), same, bad);
            Plan::Copy { to, to_range, from, from_range }
        }
        Kind::FromPinned => {
            let from = pin(rng)?;
            let to = buffer(rng);
            let (to_range, from_range) = copy_ranges(rng, to.buffer.len(), from.len(), false, bad);
            Plan::FromPinned { to, to_range, from, from_range }
        }
        Kind::ToPinned | Kind::TailCopy => {
            let to = pin(rng)?;
            let from = buffer(rng);
            let (to_range, from_range) = copy_ranges(rng, to.len(), from.buffer.len(), false, bad);
            Plan::ToPinned { to, to_range, from, from_range }
        }
        Kind::HostFn => return None,
    })
}

/// A fill of elements of a buffer with a byte, the copy of those elements to page-locked
/// memory, and what a launch then leaves there.
fn tail_plans(rng: &mut Rng, shared: &[Shared], pins: &[Locked]) -> (Plan, Plan, Expect) {
    let buffer = shared[rng.below(shared.len())].clone();
    let pin = pins[rng.below(pins.len())].clone();
    let n = 1 + rng.below(buffer.buffer.len().min(pin.len()));
    let range = range_of(rng, buffer.buffer.len(), n);
    let to_range = range_of(rng, pin.len(), n);
    let byte = byte(rng);
    let expect = Expect::pinned(&pin, to_range.clone(), byte);
    let fill = Plan::Fill { buffer: buffer.clone(), range: range.clone(), byte };
    (fill, Plan::ToPinned { to: pin, to_range, from: buffer, from_range: range }, expect)
}

/// Adds `plan` as a node after `after`.
fn add_planned(builder: &mut GraphBuilder<'_>, plan: &Plan, after: &[GraphNode]) -> Result<GraphNode> {
    match plan {
        Plan::Fill { buffer, range, byte } => {
            with_side!(buffer, |b| builder.add_fill_bytes(b, range.clone(), *byte, after))
        }
        Plan::Copy { to, to_range, from, from_range } => with_side!(to, |t| with_side!(from, |f| builder.add_copy(
            t,
            to_range.clone(),
            f,
            from_range.clone(),
            after
        ))),
        Plan::FromPinned { to, to_range, from, from_range } => {
            with_side!(to, |t| builder.add_copy_from_pinned(t, to_range.clone(), from, from_range.clone(), after))
        }
        Plan::ToPinned { to, to_range, from, from_range } => {
            with_side!(from, |f| builder.add_copy_to_pinned(to, to_range.clone(), f, from_range.clone(), after))
        }
    }
}

/// Runs `$body` with `$c` the capture of any mode.
macro_rules! on_capture {
    ($capture:expr, |$c:ident| $body:expr) => {
        match $capture {
            AnyCapture::Global($c) => $body,
            AnyCapture::ThreadLocal($c) => $body,
            AnyCapture::Relaxed($c) => $body,
        }
    };
}

// After `on_capture!`, which it uses.
mod capture_buffers;

/// Captures `plan` on `stream`.
fn capture_planned(capture: &mut AnyCapture<'_>, stream: &StreamRef, plan: &Plan) -> Result<()> {
    on_capture!(capture, |c| match plan {
        Plan::Fill { buffer, range, byte } => with_side!(buffer, |b| c.fill_bytes(stream, b, range.clone(), *byte)),
        Plan::Copy { to, to_range, from, from_range } => {
            with_side!(to, |t| with_side!(from, |f| c.copy(stream, (t, to_range.clone()), (f, from_range.clone()))))
        }
        Plan::FromPinned { to, to_range, from, from_range } => {
            with_side!(to, |t| c.copy_from_pinned(stream, (t, to_range.clone()), (from, from_range.clone())))
        }
        Plan::ToPinned { to, to_range, from, from_range } => {
            with_side!(from, |f| c.copy_to_pinned(stream, (to, to_range.clone()), (f, from_range.clone())))
        }
    })
}

/// A graph being built node by node: its nodes, and what it holds.
#[derive(Default)]
struct Built {
    holds: Holds,
    nodes: Vec<GraphNode>,
    shape: Vec<Node>,
}

impl Built {
    /// The nodes no other node comes after.
    fn leaves(&self) -> Vec<usize> {
        (0..self.shape.len()).filter(|index| !self.shape.iter().any(|node| node.after.contains(index))).collect()
    }

    /// Some of the nodes so far.
    fn some_nodes(&self, rng: &mut Rng) -> Vec<usize> {
        (0..self.nodes.len()).filter(|_| rng.below(3) == 0).collect()
    }

    /// Adds a node of `kind` after `after`: `plan` (with refused operands when `bad`), or a
    /// host function (`plan` `None`); checks the result. Whether it was added.
    fn add(
        &mut self,
        builder: &mut GraphBuilder<'_>,
        kind: Kind,
        plan: Option<&Plan>,
        bad: bool,
        after: Vec<usize>,
        tokens: &mut Vec<Arc<AtomicU8>>,
    ) -> bool {
        let dependencies: Vec<GraphNode> = after.iter().map(|&index| self.nodes[index]).collect();
        let (what, result, expected) = match plan {
            None => {
                let (token, state) = Token::new();
                let probe = tokens.len() % 4 == 0;
                tokens.push(state);
                let f = move || {
                    token.run();
                    if probe {
                        probe_refusal();
                    }
                };
                ("GraphBuilder::add_host_fn", builder.add_host_fn(f, &dependencies), Expected::Ok)
            }
            Some(plan) => (plan.node_name(), add_planned(builder, plan, &dependencies), self.holds.expected(plan, bad)),
        };
        note(what, &result);
        check_expected(what, expected, &result);
        let Ok(node) = result else { return false };
        self.nodes.push(node);
        self.shape.push(Node { kind, after });
        if let Some(plan) = plan {
            self.holds.add(plan);
        }
        true
    }

    /// Checks the node counts of the builder's graph.
    fn count(&self, builder: &GraphBuilder<'_>) {
        let count = builder.node_count();
        note("GraphBuilder::node_count", &count);
        assert_eq!(count.ok(), Some(self.nodes.len()), "a built graph has the nodes added to it");
    }

    fn finish(self, graph: &Graph, expect: Option<Expect>) -> Holds {
        let count = graph.node_count();
        note("Graph::node_count", &count);
        assert_eq!(count.ok(), Some(self.nodes.len()), "a built graph has the nodes added to it");
        Holds { expect, shape: Some(self.shape), ..self.holds }
    }
}

/// Checks what a launch of what holds `holds` left in page-locked memory (or a shared buffer).
fn check_expect(holds: &Holds, what: &str) {
    let Some(expect) = &holds.expect else { return };
    let check = |values: &[u32]| {
        let Some(values) = values.get(expect.range.clone()) else {
            panic!("{what}: {:?} lies outside the memory the launch copied to", expect.range)
        };
        expect_bytes(what, Some(expect.byte), values);
    };
    match &expect.place {
        Place::Pinned(pinned) => {
            let Some(pinned) = pinned.upgrade() else { return };
            let guard = lock(&pinned);
            let values = guard.as_slice();
            note("PinnedBuffer::as_slice (after a graph's launch)", &values);
            if let Ok(values) = values {
                check(values);
            }
        }
        Place::Device(buffer) => {
            let Some(buffer) = buffer.upgrade() else { return };
            let values = buffer.to_vec();
            note("DeviceBuffer::to_vec (after a graph's launch)", &values);
            if let Ok(values) = values {
                check(&values);
            }
        }
    }
}

/// Whether a launch on `stream` now must succeed (when nothing refuses it): outside any
/// capture, none left stranded.
fn launchable(stream: &StreamRef, stranded: usize) -> bool {
    stranded == 0 && records_into_capture(stream) == Some(false)
}

/// Launches `entry` on `stream` and checks the result: [`Error::GraphMisuse`] when a
/// page-locked buffer it copies is locked (never here: the program holds no guard), `Ok` when
/// `strict`. Whether it was `Ok`.
fn launch_checked(mem: &GraphMem, entry: &MemoryExec, stream: &StreamRef, strict: bool, what: &str) -> bool {
    let expected = mem.launch_expected(&entry.holds, None, strict);
    let result = entry.exec.launch(stream);
    note(what, &result);
    check_expected(what, expected, &result);
    result.is_ok()
}

impl<'p> World<'p> {
    /// Shared memory: device buffers made (on the capture homes) or shared from the program's
    /// (and given back when no graph holds them), page-locked buffers made or shared from the
    /// program's, written and read on the host through their guard, tried while a guard is alive
    /// (`try_lock`), dropped here or on another thread.
    pub(crate) fn graph_mem_op(&mut self, pick: u32, action: u8, tag: u8, capturing: bool) {
        let gm = &mut self.graph_mem;
        let at = |len: usize| pick as usize % len;
        match action % 10 {
            0 if gm.shared.len() < MAX_SHARED => gm.new_shared(pick, tag),
            1 if gm.shared.len() < MAX_SHARED && !self.mem.buffers.is_empty() => {
                let buf = self.mem.buffers.remove(at(self.mem.buffers.len()));
                // Once held apart, always borrowed: graphs may still hold its memory.
                let borrowed = buf.held_apart || pick % 3 == 0;
                gm.shared.push(Shared { buffer: Arc::new(buf.buffer), capturable: false, borrowed });
            }
            2 if !gm.shared.is_empty() => {
                let shared = gm.shared.swap_remove(at(gm.shared.len()));
                let (capturable, borrowed) = (shared.capturable, shared.borrowed);
                match Arc::try_unwrap(shared.buffer) {
                    Ok(buffer) if self.mem.buffers.len() < MAX_BUFFERS => {
                        // A borrowed buffer goes back while graphs may hold its memory.
                        self.mem.buffers.push(Buf { buffer, holds: None, held_apart: borrowed });
                    }
                    Ok(buffer) => drop(buffer),
                    Err(buffer) => gm.shared.push(Shared { buffer, capturable, borrowed }),
                }
            }
            3 if gm.locked.len() < MAX_LOCKED => gm.new_locked(tag),
            4 if !capturing && gm.locked.len() < MAX_LOCKED && !self.mem.pinned.is_empty() => {
                let pin = self.mem.pinned.remove(at(self.mem.pinned.len()));
                gm.locked.push(Arc::new(SharedPinned::new(pin.buffer)));
            }
            5 if !capturing && !gm.locked.is_empty() => {
                let mut guard = lock(&gm.locked[at(gm.locked.len())]);
                let values = guard.as_mut_slice();
                note("PinnedBuffer::as_mut_slice (locked)", &values);
                if let Ok(values) = values {
                    values.fill(word(tag));
                }
            }
            6 if !capturing && !gm.shared.is_empty() && (tag % 2 == 0 || gm.locked.is_empty()) => {
                let values = gm.shared[at(gm.shared.len())].buffer.to_vec();
                note("DeviceBuffer::to_vec (shared)", &values);
            }
            6 if !capturing && !gm.locked.is_empty() => {
                let guard = lock(&gm.locked[at(gm.locked.len())]);
                note("PinnedBuffer::as_slice (locked)", &guard.as_slice());
            }
            7 if !gm.locked.is_empty() => {
                // Nothing else holds the lock between operations (no launch is being enqueued,
                // no host function takes it): a try takes it, and a second one is refused.
                let locked = &gm.locked[at(gm.locked.len())];
                let guard = locked.try_lock();
                assert!(guard.is_some(), "SharedPinned::try_lock: nothing else holds the lock");
                assert!(locked.try_lock().is_none(), "SharedPinned::try_lock while a guard is alive");
                assert_eq!(guard.map(|guard| guard.len()), Some(locked.len()), "SharedPinned::len");
            }
            8 if !gm.shared.is_empty() => {
                let shared = gm.shared.swap_remove(at(gm.shared.len()));
                if tag % 3 == 0 {
                    let dropped = std::thread::spawn(move || drop(shared)).join();
                    assert!(dropped.is_ok(), "a shared buffer dropped on another thread panicked");
                }
            }
            9 if !gm.locked.is_empty() => {
                let locked = gm.locked.swap_remove(at(gm.locked.len()));
                if tag % 3 == 0 {
                    let dropped = std::thread::spawn(move || drop(locked)).join();
                    assert!(dropped.is_ok(), "a page-locked buffer dropped on another thread panicked");
                }
            }
            _ => skip(),
        }
    }

    /// A graph built node by node over the shared memory (good nodes, refused ones, host
    /// functions), perhaps ending with a fill and its copy to page-locked memory; its node
    /// counts checked; perhaps instantiated and launched at once. Or a capture into a graph that holds memory already.
    pub(crate) fn graph_build(&mut self, seed: u64) {
        let mut rng = Rng::new(seed);
        if self.graph_mem.graphs.len() >= MAX_MEMORY_GRAPHS {
            return skip();
        }
        if rng.below(4) == 0 {
            return self.capture_into(&mut rng);
        }
        if self.graph_mem.shared.is_empty() {
            self.graph_mem.new_shared(pick(&mut rng), byte(&mut rng));
        }
        if self.graph_mem.locked.is_empty() {
            self.graph_mem.new_locked(byte(&mut rng));
        }
        let graph = Graph::new(self.device);
        note("Graph::new", &graph);
        let Ok(mut graph) = graph else { return };
        let mut built = Built::default();
        let mut expect = None;
        {
            let mut builder = graph.builder();
            for _ in 0..rng.below(6) {
                let (shared, pins) = (self.graph_mem.shared.clone(), self.graph_mem.pins_now());
                const KINDS: [Kind; 5] = [Kind::Fill, Kind::Copy, Kind::FromPinned, Kind::ToPinned, Kind::HostFn];
                let kind = KINDS[rng.below(KINDS.len())];
                let after = built.some_nodes(&mut rng);
                let bad = rng.below(4) == 0;
                let plan = make_plan(&mut rng, kind, &shared, &pins, bad);
                if kind == Kind::HostFn || plan.is_some() {
                    built.add(&mut builder, kind, plan.as_ref(), bad, after, &mut self.graph_tokens);
                }
            }
            let (shared, pins) = (self.graph_mem.shared.clone(), self.graph_mem.pins_now());
            if !shared.is_empty() && !pins.is_empty() && rng.below(3) != 0 {
                let (fill, copy, tail) = tail_plans(&mut rng, &shared, &pins);
                let leaves = built.leaves();
                if built.add(&mut builder, Kind::TailFill, Some(&fill), false, leaves, &mut self.graph_tokens) {
                    let filled = vec![built.nodes.len() - 1];
                    if built.add(&mut builder, Kind::TailCopy, Some(&copy), false, filled, &mut self.graph_tokens) {
                        expect = Some(tail);
                    }
                }
            }
            if built.nodes.is_empty() || rng.below(4) == 0 {
                let leaves = built.leaves();
                built.add(&mut builder, Kind::HostFn, None, false, leaves, &mut self.graph_tokens);
            }
            built.count(&builder);
        }
        let holds = built.finish(&graph, expect);
        if coin(&mut rng) && self.graph_mem.execs.len() < MAX_MEMORY_EXECS {
            let exec = graph.instantiate();
            note("Graph::instantiate (memory)", &exec);
            if let Ok(exec) = exec {
                let entry = MemoryExec { exec, holds: holds.clone() };
                if let Some((stream, _)) = self.pick(pick(&mut rng), None) {
                    let strict = launchable(stream, self.stranded);
                    if launch_checked(&self.graph_mem, &entry, stream, strict, "GraphExec::launch (built)") && strict {
                        check_expect(&entry.holds, "a built graph's fill, copied to page-locked memory");
                    }
                }
                self.graph_mem.execs.push(entry);
            }
        }
        self.graph_mem.keep_graph(graph, holds);
    }

    /// A capture (ThreadLocal, of a stream of its own) into a graph of the family whose buffers
    /// captures may hold: a fill and its copy to page-locked memory are added to what it holds.
    fn capture_into(&mut self, rng: &mut Rng) {
        let gm = &mut self.graph_mem;
        let candidates: Vec<usize> = (0..gm.graphs.len())
            .filter(|&index| !gm.graphs[index].holds.program_homed && gm.graphs[index].holds.own == OwnMemory::None)
            .collect();
        let (shared, pins) = (gm.capturable(), gm.pins_now());
        if candidates.is_empty() || shared.is_empty() || pins.is_empty() {
            return skip();
        }
        let MemoryGraph { graph, mut holds } = gm.graphs.remove(candidates[rng.below(candidates.len())]);
        let before = graph.node_count();
        note("Graph::node_count", &before);
        let stream = Stream::new(self.device, StreamOptions::non_blocking());
        note("Stream::new", &stream);
        let Ok(stream) = stream else { return };
        let (fill, copy, tail) = tail_plans(rng, &shared, &pins);
        let (Plan::Fill { buffer, .. }, Some(pin)) = (&fill, copy.pinned()) else { unreachable!("a tail") };
        // The graph's own nodes run beside the captured ones: their bytes are known only where
        // the graph touched neither.
        let apart = !holds.holds_buffer(identity(&buffer.buffer)) && !holds.holds_pinned(identity(pin));
        let begun = stream.begin_capture_into(graph, capture::ThreadLocal);
        note("StreamRef::begin_capture_into", &begun);
        let Ok(capture) = begun else { return };
        let mut capture = AnyCapture::ThreadLocal(capture);
        let mut added = 0;
        for plan in [&fill, &copy] {
            let expected = match holds.expected(plan, false) {
                // The 13th buffer: what a graph of the program's capture holds is an upper bound.
                Expected::Size => Expected::Typed,
                expected => expected,
            };
            let result = capture_planned(&mut capture, &stream, plan);
            note(plan.capture_name(), &result);
            check_expected(plan.capture_name(), expected, &result);
            if !refused_by_checks(&result) {
                holds.uncertain |= result.is_err();
                holds.add(plan);
                added += usize::from(result.is_ok());
            }
        }
        let ended = capture.end();
        note("Capture::end (into a graph)", &ended);
        assert!(ended.is_ok(), "a capture into a graph, of captured memory work alone, ends Ok: {ended:?}");
        let Ok(graph) = ended else { return };
        if let Ok(before) = before {
            let count = graph.node_count();
            note("Graph::node_count", &count);
            assert_eq!(count.ok(), Some(before + added), "a capture into a graph adds its nodes to the graph's");
        }
        holds.shape = None;
        holds.expect = if added == 2 && apart {
            Some(tail)
        } else if apart {
            holds.expect
        } else {
            None
        };
        self.graph_mem.keep_graph(graph, holds);
    }

    /// During the program's capture: its memory work on shared memory (on the captured stream,
    /// a stream that joined it, or one outside it), with refused operands or a page-locked
    /// buffer the program holds locked. Outside: a capture of its own, that ends, is dropped,
    /// fails, or is ended by raw FFI.
    pub(crate) fn graph_capture(&mut self, s: u32, seed: u64, active: Option<&mut Active<'_>>) {
        let mut rng = Rng::new(seed);
        match active {
            Some(active) => self.captured_memory(s, &mut rng, active),
            None => {
                if rng.below(3) == 0 {
                    self.capture_buffers_of_its_own(s, &mut rng);
                } else {
                    self.capture_of_its_own(s, &mut rng);
                }
            }
        }
    }

    fn captured_memory(&mut self, s: u32, rng: &mut Rng, active: &mut Active<'_>) {
        let origin: &StreamRef = active.origin;
        let id = active.capture.id();
        let generation = active.generation;
        if self.graph_mem.capturable().is_empty() {
            // Zeroed: no wait for a copy, which the capture's mode may refuse.
            self.graph_mem.new_shared(s, 2 * byte(rng));
        }
        let (shared, pins) = (self.graph_mem.capturable(), self.graph_mem.pins_now());
        if shared.is_empty() {
            return skip();
        }
        let intact = self.quiet() && capture_intact(origin, id);
        let what = rng.below(11);
        if what >= 8 {
            return self.capture_buffers_in_capture(rng, active, intact);
        }
        // The stream: the captured one, a stream of the program, or (7) a new one.
        let fresh = if what == 7 {
            let stream = Stream::new(self.device, StreamOptions::non_blocking());
            note("Stream::new", &stream);
            stream.ok()
        } else {
            None
        };
        let target: &StreamRef = match &fresh {
            Some(fresh) => fresh,
            None if what == 5 || coin(rng) => origin,
            None => pick_in(&self.slots, s, None).unwrap_or(origin),
        };
        let on_origin = std::ptr::eq(target, origin);
        let outside = !on_origin && {
            is_legacy(target) || {
                let info = target.capture_info();
                note("StreamRef::capture_info", &info);
                matches!(info, Ok(info) if info.status == CaptureStatus::None)
            }
        };
        let gm = &mut self.graph_mem;
        let held = CaptureHolds::current(&mut gm.capture, generation);
        let at = Site { stream: target, origin, id, on_origin, outside, intact };
        match what {
            4 => {
                let buffer = &shared[rng.below(shared.len())];
                let kernel = coin(rng);
                let ran = Cell::new(false);
                let result = on_capture!(&mut active.capture, |c| c.use_on(target, &buffer.buffer, |on, _| {
                    ran.set(true);
                    if kernel { cuda_stream_tests::empty(on) } else { Ok(()) }
                }));
                let what = "Capture::use_on";
                note(what, &result);
                if let Ok(inner) = &result {
                    note("a captured kernel (use_on)", inner);
                }
                let plan = Plan::Fill { buffer: buffer.clone(), range: 0..1, byte: 0 };
                let expected = match held.holds.expected(&plan, false) {
                    Expected::Ok => at.expected(),
                    _ => Expected::Typed,
                };
                check_expected(what, if outside { Expected::CaptureMisuse } else { expected }, &result);
                assert_eq!(ran.get(), result.is_ok(), "{what}: its closure runs exactly when it is not refused");
                at.after(what, &result);
                held.captured(&plan, &result, on_origin);
            }
            5 if !pins.is_empty() => {
                let (fill, copy, tail) = tail_plans(rng, &shared, &pins);
                let filled = at.capture(&mut active.capture, held, &fill, false, false);
                let copied = at.capture(&mut active.capture, held, &copy, false, false);
                if filled && copied && !held.off_origin {
                    held.holds.expect = Some(tail);
                }
            }
            6 if !pins.is_empty() => {
                // The page-locked buffer's lock held by the program: refused, nothing held.
                let kind = if coin(rng) { Kind::FromPinned } else { Kind::ToPinned };
                let Some(plan) = make_plan(rng, kind, &shared, &pins, false) else { return skip() };
                let Some(pin) = plan.pinned() else { unreachable!("a copy of page-locked memory") };
                let _guard = lock(pin);
                at.capture(&mut active.capture, held, &plan, false, true);
            }
            _ => {
                const KINDS: [Kind; 4] = [Kind::Fill, Kind::Copy, Kind::FromPinned, Kind::ToPinned];
                let kind = KINDS[rng.below(KINDS.len())];
                let bad = rng.below(4) == 0;
                let Some(plan) = make_plan(rng, kind, &shared, &pins, bad) else { return skip() };
                at.capture(&mut active.capture, held, &plan, bad, false);
            }
        }
    }

    fn capture_of_its_own(&mut self, s: u32, rng: &mut Rng) {
        let Some(home) = capture_home(s) else { return skip() };
        let len = LENGTHS[rng.below(LENGTHS.len())];
        let made = DeviceBuffer::zeroed(home, len);
        note("DeviceBuffer::zeroed (shared)", &made);
        let Ok(buffer) = made else { return };
        let buffer: SharedBuffer = Arc::new(buffer);
        // Shared, not borrowed: what the capture holds is counted in the `Arc`.
        let shared = Shared { buffer: Arc::clone(&buffer), capturable: true, borrowed: false };
        let stream = Stream::new(self.device, StreamOptions::non_blocking());
        note("Stream::new", &stream);
        let Ok(stream) = stream else { return };
        let how = rng.below(5);
        // Not Global: the reactor's queries of pending completions would invalidate it.
        let begun = AnyCapture::begin(&stream, 1 + rng.below(2) as u8);
        note("StreamRef::begin_capture", &begun);
        let Ok(mut capture) = begun else { return };
        let byte = byte(rng);
        let fill = Plan::Fill { buffer: shared.clone(), range: 0..len, byte };
        // The program's own `Arc`s of the buffer; what the capture, its graph and executable
        // hold comes on top.
        let base = Arc::strong_count(&buffer);
        let holding = |held: usize, what: &str| {
            assert_eq!(Arc::strong_count(&buffer), base + held, "{what}");
        };
        if how == 4 || rng.below(3) == 0 {
            let idle = Stream::new(self.device, StreamOptions::non_blocking());
            note("Stream::new", &idle);
            if let Ok(idle) = idle {
                let result = capture_planned(&mut capture, &idle, &fill);
                note("Capture::fill_bytes (off the capture)", &result);
                check_expected("Capture::fill_bytes on a stream outside the capture", Expected::CaptureMisuse, &result);
                let ran = Cell::new(false);
                let result = on_capture!(&mut capture, |c| c.use_on(&*idle, &buffer, |_, _| ran.set(true)));
                note("Capture::use_on (off the capture)", &result);
                check_expected("Capture::use_on on a stream outside the capture", Expected::CaptureMisuse, &result);
                assert!(!ran.get(), "a refused use_on runs nothing");
                holding(0, "refused memory work holds nothing");
            }
        }
        let result = capture_planned(&mut capture, &stream, &fill);
        note("Capture::fill_bytes", &result);
        check_expected("Capture::fill_bytes on the captured stream", Expected::Ok, &result);
        let mut holds = Holds::default();
        holds.add(&fill);
        let mut nodes = 1;
        let pins = self.graph_mem.pins_now();
        if !pins.is_empty() && coin(rng) {
            let to = pins[rng.below(pins.len())].clone();
            let n = 1 + rng.below(len.min(to.len()));
            let (from_range, to_range) = (range_of(rng, len, n), range_of(rng, to.len(), n));
            let expect = Expect::pinned(&to, to_range.clone(), byte);
            let copy = Plan::ToPinned { to, to_range, from: shared.clone(), from_range };
            let result = capture_planned(&mut capture, &stream, &copy);
            note("Capture::copy_to_pinned", &result);
            check_expected("Capture::copy_to_pinned on the captured stream", Expected::Ok, &result);
            holds.add(&copy);
            holds.expect = Some(expect);
            nodes += 1;
        }
        if coin(rng) {
            let result =
                on_capture!(&mut capture, |c| c.use_on(&stream, &buffer, |on, _| cuda_stream_tests::empty(on)));
            note("Capture::use_on (a kernel)", &result);
            assert!(
                matches!(result, Ok(Ok(()))),
                "a captured kernel through use_on on the captured stream: {result:?}"
            );
            nodes += 1;
        }
        holding(1, "the capture holds the buffer of its memory work, once");
        match how {
            1 => {
                drop(capture);
                note_infallible();
                holding(0, "a capture dropped before its end lets go of what it held");
            }
            2 => {
                // A fork never joined back: the end fails, and the hold is leaked.
                let side = stream.fork();
                note("StreamRef::fork", &side);
                let Ok(side) = side else {
                    drop(capture);
                    return;
                };
                let launched = cuda_stream_tests::empty(&side);
                note("a kernel on the fork", &launched);
                let ended = capture.end();
                note("Capture::end (a fork unjoined)", &ended);
                if launched.is_ok() {
                    assert!(ended.is_err(), "a capture with a fork never joined back fails to end");
                    holding(1, "a capture whose end failed leaks its hold, never frees the buffer");
                }
                drop(side);
            }
            3 => {
                // Ended by another library: the crate's end ends nothing and leaks the hold.
                let mut raw: sys::cudaGraph_t = std::ptr::null_mut();
                // SAFETY: the stream's own capture, begun on this thread and not ended; a valid
                // out-pointer. The graph is destroyed below, once, and never launched.
                let code = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut raw) };
                let ended_raw = check(code, "cudaStreamEndCapture");
                note("cudaStreamEndCapture (raw)", &ended_raw);
                let ended = capture.end();
                note("Capture::end (ended elsewhere)", &ended);
                if ended_raw.is_ok() {
                    check_expected("Capture::end of a capture ended by raw FFI", Expected::CaptureMisuse, &ended);
                    holding(1, "a capture ended elsewhere leaks its hold (the foreign graph uses the buffer)");
                }
                if !raw.is_null() {
                    // SAFETY: the graph the raw end gave, destroyed once; nothing else has it.
                    let destroyed = check(unsafe { sys::cudaGraphDestroy(raw) }, "cudaGraphDestroy");
                    note("cudaGraphDestroy", &destroyed);
                }
            }
            _ => {
                let ended = capture.end();
                note("Capture::end", &ended);
                assert!(ended.is_ok(), "a capture of memory work alone ends Ok: {ended:?}");
                let Ok(graph) = ended else { return };
                let count = graph.node_count();
                note("Graph::node_count", &count);
                assert_eq!(count.ok(), Some(nodes), "a captured graph has a node per captured operation");
                holding(1, "the graph holds the buffer");
                let keep = coin(rng);
                let exec = graph.instantiate();
                note("Graph::instantiate (captured memory)", &exec);
                holding(1, "a graph and its executable share one hold");
                if let Ok(exec) = exec {
                    let entry = MemoryExec { exec, holds: holds.clone() };
                    if let Some((target, _)) = self.pick(s, None) {
                        let strict = launchable(target, self.stranded);
                        if launch_checked(&self.graph_mem, &entry, target, strict, "GraphExec::launch (captured)")
                            && strict
                        {
                            check_expect(&entry.holds, "a captured fill, copied to page-locked memory");
                        }
                    }
                    if keep && self.graph_mem.execs.len() < MAX_MEMORY_EXECS {
                        self.graph_mem.execs.push(entry);
                    } else {
                        drop(graph);
                        holding(1, "the executable holds the buffer (its launches perhaps pending)");
                        drop(entry);
                        holding(0, "the graph and its executable gone, the buffer is the program's alone");
                        return self.keep_shared(shared);
                    }
                }
                self.graph_mem.keep_graph(graph, holds);
            }
        }
        self.keep_shared(shared);
    }

    fn keep_shared(&mut self, shared: Shared) {
        if self.graph_mem.shared.len() < MAX_SHARED {
            self.graph_mem.shared.push(shared);
        }
    }

    /// Graphs and executables of the family: instantiated, cloned, launched on streams of the
    /// program (and from another thread, two at once), updated, launched while the program
    /// holds a page-locked buffer's lock, dropped. During a capture: launches (on the captured
    /// stream: refused) and drops.
    pub(crate) fn graph_run(&mut self, x: u32, s: u32, action: u8, seed: u64, active: Option<&Active<'_>>) {
        let mut rng = Rng::new(seed);
        let gm = &mut self.graph_mem;
        match (action % 8, active) {
            (7, _) => {
                if !gm.graphs.is_empty() && (gm.execs.is_empty() || coin(&mut rng)) {
                    drop(gm.graphs.swap_remove(x as usize % gm.graphs.len()));
                } else if !gm.execs.is_empty() {
                    drop(gm.execs.swap_remove(x as usize % gm.execs.len()));
                } else {
                    skip();
                }
            }
            (_, Some(active)) => self.launch_in_capture(x, s, active),
            (0, None) => {
                if gm.graphs.is_empty() || gm.execs.len() >= MAX_MEMORY_EXECS {
                    return skip();
                }
                let entry = &gm.graphs[x as usize % gm.graphs.len()];
                let exec = entry.graph.instantiate();
                note("Graph::instantiate (memory)", &exec);
                if let Ok(exec) = exec {
                    let holds = entry.holds.clone();
                    gm.execs.push(MemoryExec { exec, holds });
                }
            }
            (1, None) => {
                if gm.graphs.is_empty() || gm.graphs.len() >= MAX_MEMORY_GRAPHS {
                    return skip();
                }
                let entry = &gm.graphs[x as usize % gm.graphs.len()];
                let clone = entry.graph.try_clone();
                note("Graph::try_clone", &clone);
                if entry.holds.shape.is_some() {
                    assert!(clone.is_ok(), "a built graph of memory and host nodes is cloned: {clone:?}");
                }
                if let Ok(clone) = clone {
                    let (mine, theirs) = (clone.node_count(), entry.graph.node_count());
                    note("Graph::node_count", &mine);
                    assert_eq!(mine.ok(), theirs.ok(), "a clone has the graph's nodes");
                    let mut holds = entry.holds.clone();
                    if holds.own != OwnMemory::None {
                        holds.own = OwnMemory::Cloned;
                    }
                    gm.graphs.push(MemoryGraph { graph: clone, holds });
                }
            }
            (2 | 3, None) => {
                if gm.execs.is_empty() {
                    return skip();
                }
                let Some((stream, _)) = self.pick(s, None) else { return skip() };
                let strict = launchable(stream, self.stranded);
                let entry = &self.graph_mem.execs[x as usize % self.graph_mem.execs.len()];
                if rng.below(3) == 0 {
                    note("GraphExec::upload (memory)", &entry.exec.upload(stream));
                }
                let mut launched = true;
                for _ in 0..1 + rng.below(2) {
                    launched &= launch_checked(&self.graph_mem, entry, stream, strict, "GraphExec::launch (memory)");
                }
                if launched && strict {
                    check_expect(&entry.holds, "a graph's fill, copied to page-locked memory");
                }
            }
            (4, None) => self.launch_on_two_threads(x, s, &mut rng),
            (5, None) => self.update(x, s, &mut rng),
            (_, None) => self.launch_locked(x, s, &mut rng),
        }
    }

    /// A launch during the program's capture: on a stream of it, refused.
    fn launch_in_capture(&mut self, x: u32, s: u32, active: &Active<'_>) {
        let gm = &self.graph_mem;
        if gm.execs.is_empty() {
            return skip();
        }
        let entry = &gm.execs[x as usize % gm.execs.len()];
        let origin: &StreamRef = active.origin;
        let Some(target) = pick_in(&self.slots, s, Some(active.origin)) else { return skip() };
        let capturing = std::ptr::eq(target, origin) || records_into_capture(target) == Some(true);
        let intact = self.quiet() && capture_intact(origin, active.capture.id());
        let result = entry.exec.launch(target);
        let what = "GraphExec::launch (during a capture)";
        note(what, &result);
        if capturing {
            let expected = match gm.launch_expected(&entry.holds, None, false) {
                Expected::GraphMisuse => Expected::GraphMisuse,
                _ if entry.holds.uncertain => Expected::Typed,
                _ => Expected::CaptureMisuse,
            };
            check_expected(&format!("{what} onto a capturing stream"), expected, &result);
            if intact {
                assert!(
                    capture_intact(origin, active.capture.id()),
                    "{what}: a refused launch leaves the capture intact"
                );
            }
        }
    }

    /// Two executables launched at once, one on another thread: a page-locked buffer both copy
    /// may refuse one of them (its lock held by the other's launch).
    fn launch_on_two_threads(&mut self, x: u32, s: u32, rng: &mut Rng) {
        if self.graph_mem.execs.is_empty() {
            return skip();
        }
        let MemoryExec { exec, holds } = self.graph_mem.execs.swap_remove(x as usize % self.graph_mem.execs.len());
        let gm = &self.graph_mem;
        let other = (!gm.execs.is_empty() && rng.below(4) != 0).then(|| rng.below(gm.execs.len()));
        let (Some(here), Some((there, _))) = (self.pick_owned(s, None), self.pick(s.rotate_left(16), None)) else {
            self.graph_mem.execs.push(MemoryExec { exec, holds });
            return skip();
        };
        let (strict_here, strict_there) = (launchable(here, self.stranded), launchable(there, self.stranded));
        let (exec, result, other_result) = std::thread::scope(|scope| {
            let spawned = scope.spawn(move || {
                let result = exec.launch(here);
                (exec, result)
            });
            let other_result = other.map(|index| gm.execs[index].exec.launch(there));
            let (exec, result) = spawned.join().unwrap_or_else(|payload| {
                panic!("a launch on another thread panicked: {}", panic_message(payload.as_ref()))
            });
            (exec, result, other_result)
        });
        let empty = Holds::default();
        let other_holds = other.map_or(&empty, |index| &gm.execs[index].holds);
        let shares = holds.pinned.iter().any(|&id| other_holds.holds_pinned(id)) && other_result.is_some();
        let expected = |holds: &Holds, strict: bool| match gm.launch_expected(holds, None, strict) {
            Expected::Ok if shares => Expected::Typed,
            expected => expected,
        };
        let what = "GraphExec::launch (on another thread)";
        note(what, &result);
        check_expected(what, expected(&holds, strict_here), &result);
        if shares {
            assert!(
                matches!(result, Ok(()) | Err(Error::GraphMisuse(_))),
                "{what}: beside a launch that copies the same page-locked memory: Ok or GraphMisuse, got {result:?}"
            );
        }
        let mut checks = Vec::new();
        let other_launched = matches!(other_result, Some(Ok(())));
        if let (Some(index), Some(other_result)) = (other, &other_result) {
            let what = "GraphExec::launch (beside another thread's)";
            note(what, other_result);
            check_expected(what, expected(other_holds, strict_there), other_result);
            if shares {
                assert!(matches!(other_result, Ok(()) | Err(Error::GraphMisuse(_))), "{what}: {other_result:?}");
            }
            // What one launch left stays, unless the other may have written the same
            // page-locked buffer.
            let kept = other_holds.expect.as_ref().is_some_and(|expect| stays(expect, &holds, result.is_ok()));
            if other_result.is_ok() && strict_there && kept {
                checks.push(gm.execs[index].holds.clone());
            }
        }
        let kept = holds.expect.as_ref().is_some_and(|expect| stays(expect, other_holds, other_launched));
        if result.is_ok() && strict_here && kept {
            checks.push(holds.clone());
        }
        for checked in &checks {
            check_expect(checked, "a graph launched beside another thread's launch");
        }
        self.graph_mem.execs.push(MemoryExec { exec, holds });
    }

    /// An executable updated from a graph of the same shape built anew (its launches then leave
    /// the new graph's bytes), from one with a node more (refused), or from any graph of the
    /// family; then launched.
    fn update(&mut self, x: u32, s: u32, rng: &mut Rng) {
        if self.graph_mem.execs.is_empty() {
            return skip();
        }
        let index = x as usize % self.graph_mem.execs.len();
        let variant = rng.below(3);
        let shape = self.graph_mem.execs[index].holds.shape.clone();
        let rebuilt = match (variant, shape) {
            (0 | 1, Some(shape)) => self.rebuild(&shape, rng, variant == 1),
            _ => None,
        };
        let what = "GraphExec::update (memory)";
        match rebuilt {
            Some(MemoryGraph { graph, holds }) => {
                let entry = &mut self.graph_mem.execs[index];
                let result = entry.exec.update(&graph);
                note(what, &result);
                if variant == 1 {
                    assert!(
                        matches!(result, Err(Error::GraphUpdate { .. })),
                        "{what} from a graph with a node more must be refused with GraphUpdate: {result:?}"
                    );
                }
                match result {
                    Ok(()) => entry.holds = holds.clone(),
                    Err(Error::GraphUpdate { .. }) => {}
                    Err(_) => entry.holds.expect = None,
                }
                // The executable shares what the new nodes use: the graph may go at once.
                if coin(rng) {
                    self.graph_mem.keep_graph(graph, holds);
                }
            }
            None => {
                let gm = &mut self.graph_mem;
                if gm.graphs.is_empty() {
                    return skip();
                }
                let from = &gm.graphs[rng.below(gm.graphs.len())];
                let entry = &mut gm.execs[index];
                let result = entry.exec.update(&from.graph);
                note(what, &result);
                match result {
                    Ok(()) => entry.holds = from.holds.clone(),
                    Err(Error::GraphUpdate { .. }) => {}
                    Err(_) => entry.holds.expect = None,
                }
            }
        }
        let Some((stream, _)) = self.pick(s, None) else { return };
        let strict = launchable(stream, self.stranded);
        let entry = &self.graph_mem.execs[index];
        if launch_checked(&self.graph_mem, entry, stream, strict, "GraphExec::launch (updated)") && strict {
            check_expect(&entry.holds, "an updated executable's fill, copied to page-locked memory");
        }
    }

    /// A graph of `shape` built anew over the shared memory, with good operands (and a host
    /// function more when `extra`); `None` when the memory lacks what it needs or a node is
    /// refused.
    fn rebuild(&mut self, shape: &[Node], rng: &mut Rng, extra: bool) -> Option<MemoryGraph> {
        let (shared, pins) = (self.graph_mem.shared.clone(), self.graph_mem.pins_now());
        let needs_pins =
            shape.iter().any(|node| matches!(node.kind, Kind::FromPinned | Kind::ToPinned | Kind::TailCopy));
        let needs_buffers = shape.iter().any(|node| node.kind != Kind::HostFn);
        if (needs_buffers && shared.is_empty()) || (needs_pins && pins.is_empty()) {
            return None;
        }
        let graph = Graph::new(self.device);
        note("Graph::new", &graph);
        let mut graph = graph.ok()?;
        let mut built = Built::default();
        let mut tail: Option<(Plan, Expect)> = None;
        let mut expect = None;
        {
            let mut builder = graph.builder();
            for node in shape {
                let plan = match node.kind {
                    Kind::HostFn => None,
                    Kind::TailFill => {
                        let (fill, copy, expected) = tail_plans(rng, &shared, &pins);
                        tail = Some((copy, expected));
                        Some(fill)
                    }
                    Kind::TailCopy => match tail.take() {
                        Some((copy, expected)) => {
                            expect = Some(expected);
                            Some(copy)
                        }
                        None => make_plan(rng, Kind::ToPinned, &shared, &pins, false),
                    },
                    kind => make_plan(rng, kind, &shared, &pins, false),
                };
                if plan.is_none() && node.kind != Kind::HostFn {
                    return None;
                }
                if !built.add(&mut builder, node.kind, plan.as_ref(), false, node.after.clone(), &mut self.graph_tokens)
                {
                    return None;
                }
            }
            if extra {
                built.add(&mut builder, Kind::HostFn, None, false, Vec::new(), &mut self.graph_tokens);
            }
            built.count(&builder);
        }
        let holds = built.finish(&graph, expect);
        Some(MemoryGraph { graph, holds })
    }

    /// The program holds a page-locked buffer's lock (having written it on the host): a node
    /// over it is refused, so is the launch of an executable that copies it, which enqueues
    /// nothing (the host still reads what it wrote). Once the lock is let go, the launch runs.
    fn launch_locked(&mut self, x: u32, s: u32, rng: &mut Rng) {
        let gm = &self.graph_mem;
        if gm.locked.is_empty() {
            return skip();
        }
        let pinned = Arc::clone(&gm.locked[x as usize % gm.locked.len()]);
        let id = identity(&pinned);
        let tag = byte(rng);
        let exec_index = (!gm.execs.is_empty()).then(|| s as usize % gm.execs.len());
        let Some((stream, _)) = self.pick(s, None) else { return skip() };
        let strict = launchable(stream, self.stranded);
        let mut relaunch = false;
        {
            let mut guard = lock(&pinned);
            let values = guard.as_mut_slice();
            note("PinnedBuffer::as_mut_slice (locked)", &values);
            let wrote = match values {
                Ok(values) => {
                    values.fill(word(tag));
                    true
                }
                Err(_) => false,
            };
            if let Some(shared) = gm.shared.first() {
                let graph = Graph::new(self.device);
                note("Graph::new", &graph);
                if let Ok(mut graph) = graph {
                    let mut builder = graph.builder();
                    let what = "GraphBuilder::add_copy_to_pinned (locked)";
                    let added = builder.add_copy_to_pinned(&pinned, 0..1, &shared.buffer, 0..1, &[]);
                    note(what, &added);
                    check_expected(what, Expected::GraphMisuse, &added);
                    let what = "GraphBuilder::add_copy_from_pinned (locked)";
                    let added = builder.add_copy_from_pinned(&shared.buffer, 0..1, &pinned, 0..1, &[]);
                    note(what, &added);
                    check_expected(what, Expected::GraphMisuse, &added);
                }
            }
            if let Some(index) = exec_index {
                let entry = &gm.execs[index];
                let holds_it = entry.holds.holds_pinned(id);
                let expected = gm.launch_expected(&entry.holds, Some(id), strict);
                let what = "GraphExec::launch (a page-locked buffer locked)";
                let result = entry.exec.launch(stream);
                note(what, &result);
                check_expected(what, expected, &result);
                // Refused, nothing was enqueued; or it copies no page-locked memory of this
                // buffer: the host's write stays.
                let untouched = matches!(result, Err(Error::GraphMisuse(_)))
                    || (result.is_ok() && !holds_it && !entry.holds.uncertain);
                if wrote && untouched {
                    let values = guard.as_slice();
                    note("PinnedBuffer::as_slice (locked)", &values);
                    if let Ok(values) = values {
                        expect_bytes(
                            "the host's write under the lock, after a launch that could not touch it",
                            Some(tag),
                            values,
                        );
                    }
                }
                relaunch = holds_it && gm.launch_expected(&entry.holds, None, true) == Expected::Ok;
            }
        }
        if let (true, Some(index)) = (relaunch, exec_index) {
            let entry = &gm.execs[index];
            if launch_checked(gm, entry, stream, strict, "GraphExec::launch (the lock let go)") && strict {
                check_expect(&entry.holds, "a graph's fill, copied to page-locked memory after the host's write");
            }
        }
    }
}

/// Whether what a launch left (`expect`) stays beside another launch of what holds `other`
/// (`launched`: it was enqueued): unless it copies the same page-locked buffer.
fn stays(expect: &Expect, other: &Holds, launched: bool) -> bool {
    !launched
        || match &expect.place {
            Place::Pinned(pinned) => !other.holds_pinned(weak_identity(pinned)),
            Place::Device(buffer) => !other.holds_buffer(weak_identity(buffer)),
        }
}

/// Where the program's capture's memory work goes, and what is known of it.
struct Site<'a> {
    stream: &'a StreamRef,
    origin: &'a StreamRef,
    id: u64,
    on_origin: bool,
    /// Certainly outside the capture.
    outside: bool,
    /// The capture was intact just before (and no completion is pending).
    intact: bool,
}

impl Site<'_> {
    /// What a memory operation that passes the planning checks must give here.
    fn expected(&self) -> Expected {
        if self.outside {
            Expected::CaptureMisuse
        } else if self.on_origin && self.intact {
            Expected::Ok
        } else {
            Expected::Typed
        }
    }

    /// After a call refused with `CaptureMisuse`: the capture is intact.
    fn after<T>(&self, what: &str, result: &Result<T>) {
        if self.intact && matches!(result, Err(Error::CaptureMisuse(_))) {
            assert!(capture_intact(self.origin, self.id), "{what}: a refused call leaves the capture intact");
        }
    }

    /// Captures `plan` (`bad`: refused operands; `guarded`: its page-locked buffer locked by
    /// the program) and checks the result; `held` grows. Whether it was captured.
    fn capture(
        &self,
        capture: &mut AnyCapture<'_>,
        held: &mut CaptureHolds,
        plan: &Plan,
        bad: bool,
        guarded: bool,
    ) -> bool {
        let expected = match held.holds.expected(plan, bad) {
            Expected::Ok if guarded => Expected::GraphMisuse,
            Expected::Ok => self.expected(),
            // The 13th buffer: the count of what the capture holds is an upper bound.
            Expected::Size if !bad => Expected::Typed,
            expected => expected,
        };
        let result = capture_planned(capture, self.stream, plan);
        let what = plan.capture_name();
        note(what, &result);
        check_expected(what, expected, &result);
        self.after(what, &result);
        held.captured(plan, &result, self.on_origin);
        result.is_ok()
    }
}

impl CaptureHolds {
    /// What `slot` holds for capture `generation`: new if it held another capture's, or none.
    pub(crate) fn current(slot: &mut Option<CaptureHolds>, generation: u64) -> &mut CaptureHolds {
        if slot.as_ref().is_some_and(|capture| capture.generation != generation) {
            *slot = None;
        }
        slot.get_or_insert_with(|| CaptureHolds::new(generation))
    }

    fn new(generation: u64) -> CaptureHolds {
        CaptureHolds {
            generation,
            holds: Holds::default(),
            off_origin: false,
            used: false,
            scratch: Scratch::default(),
        }
    }

    /// After memory work on capture buffers and the shared buffers `buffers` and page-locked
    /// `pinned` that gave `result` (`ordered`: on the captured stream, or on a stream forked
    /// from it just before and joined back just after): what the capture may hold.
    fn captured_parts(
        &mut self,
        buffers: &[&Shared],
        pinned: Option<&Locked>,
        result: &Result<impl Sized>,
        ordered: bool,
    ) {
        if refused_by_checks(result) {
            return;
        }
        self.holds.uncertain |= result.is_err();
        self.used = true;
        self.off_origin |= !ordered;
        if !buffers.is_empty() || pinned.is_some() {
            self.holds.add_parts(buffers, pinned);
            self.holds.expect = None;
        }
    }

    /// After memory work (`plan`'s operands) that gave `result`: what the capture may hold.
    fn captured(&mut self, plan: &Plan, result: &Result<impl Sized>, on_origin: bool) {
        if refused_by_checks(result) {
            return;
        }
        self.holds.uncertain |= result.is_err();
        self.holds.add(plan);
        self.holds.expect = None;
        self.used = true;
        self.off_origin |= !on_origin;
    }
}

/// The operands the generator makes are refused exactly when it says so, by the crate's rules
/// (`checked_range`, `same_length`, the overlap of one buffer's sides), without a GPU.
#[test]
fn generated_operands_are_refused_exactly_when_bad() {
    let valid = |range: &Range<usize>, len: usize| range.start < range.end && range.end <= len;
    let mut rng = Rng::new(0x0600_d0ff);
    for _ in 0..20_000 {
        let (to, from) = (LENGTHS[rng.below(2)], LENGTHS[rng.below(2)]);
        let range = some_range(&mut rng, to);
        assert!(valid(&range, to), "{range:?} of {to}");
        let range = bad_range(&mut rng, to);
        assert!(!valid(&range, to), "{range:?} of {to}");
        for same in [false, true] {
            let from = if same { to } else { from };
            for bad in [false, true] {
                let (a, b) = copy_ranges(&mut rng, to, from, same, bad);
                let refused = !valid(&a, to)
                    || !valid(&b, from)
                    || a.len() != b.len()
                    || (same && a.start < b.end && b.start < a.end);
                assert_eq!(refused, bad, "{a:?} of {to} from {b:?} of {from}, one buffer: {same}");
            }
        }
    }
}
