//! Memcpy and memset nodes of graphs, built node by node or captured, over memory the graph
//! holds: device buffers borrowed (their memory, apart from the buffer: see
//! [`buffer_core`](super::buffer_core)) or shared as `Arc<DeviceBuffer>`, page-locked buffers
//! as `Arc<SharedPinned>`
//! ([`cudaGraphAddMemcpyNode1D`, `cudaGraphAddMemsetNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html);
//! `cudaMemcpyAsync` and `cudaMemsetAsync` during a capture), and a capture's kernels on such
//! buffers (`Capture::use_on`). An operation is planned once ([`Planned`]: the checks, the
//! memory the graph will hold) and then added as a node or captured.
//!
//! A capture holds the memory from before CUDA has the work until `end` hands it to the graph;
//! a capture dropped before `end` lets it go with the graph it discards, and one whose end
//! fails (or cannot be made) leaks it: another library may have ended the capture and kept a
//! graph that uses it.
//!
//! The graph keeps a clone of each `Arc` that a node uses (a shared buffer's, a borrowed
//! buffer's memory's), and so do its clones and every executable made from it: no launch can
//! be enqueued after the memory is gone, whichever is dropped first. Each launch of an executable is one use of that memory, ordered as a copy is:
//! the launch's stream waits for the earlier uses that the nodes conflict with, and the
//! launch's event is left behind for later uses, the buffers' frees and page-locked memory's
//! host access. A shared buffer whose last `Arc` an executable drops is thus freed on its home
//! stream after the launches that used it, and a borrowed buffer's memory whose owner went
//! first on a private stream after them.
//!
//! A [`SharedPinned`] is the host's way in between launches (its guard gives `as_mut_slice`,
//! which waits for the launches' copies, and never the buffer itself, which stays where the
//! nodes expect it). The launch takes the lock for as long as it orders and enqueues, with a
//! try: a lock held elsewhere refuses the launch rather than wait, so no launch blocks behind
//! the host.
//!
//! Host memory in a node is page-locked only. CUDA accepts pageable memory in memcpy nodes,
//! built and captured, but a graph with such a node launches synchronously: probed on CUDA 13.0
//! (driver 580, H200), `cudaGraphLaunch` of a graph of a 100 ms kernel, a copy in from pageable
//! memory and a copy out to it returned after 102 ms, the copy out already written. A launch
//! is enqueued under the enqueue path's hold (or a fast call), which a capture's begin waits
//! for: such a launch would hold every capture of the process up for the whole graph, and
//! deadlock where the graph waits for work that another thread enqueues after a capture's
//! begin (a word written by a memory operation). Copy through a [`SharedPinned`] instead.

use super::buffer_core::{BufferCore, prepare_core};
use super::capture_buffer::{CaptureAllocation, CaptureBuffer};
use super::ledger::{SharedEvent, Span, Ticket, UseEvent};
use super::output_slot::OutputSlot;
use super::shared_pinned::{PinnedGuard, SharedPinned};
use super::uses::{CAPTURED, Hold, InCaptures, MAX_TOUCHED, Touched, Touches, Uses, ordered_use};
use super::{DeviceBuffer, DeviceCopy, checked_range, same_length};
use crate::call::capture_mode::uncapturable_call;
use crate::call::race::{Access, AccessKind, CapturedAccesses};
use crate::conditional::{GraphBuilder, GraphNode};
use crate::device::{Device, same_device};
use crate::ffi::error::{Error, Result, check};
use crate::graph::capture::{Capture, CaptureMode};
use crate::graph::held::{CaptureHolds, GraphMemory};
use crate::graph::{Graph, GraphExec};
use crate::stream::capture_node::dependency_pointer;
use crate::stream::enqueue::{InCapture, Work};
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use crate::sys;
use std::any::Any;
use std::ffi::c_void;
use std::fmt;
use std::ops::{Range, RangeBounds};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

/// Why a launch or a node is refused while a page-locked buffer's lock is held.
const LOCKED: &str = "the SharedPinned a graph copies to or from is locked (a guard is alive, on this thread or another, or another launch that copies it is being enqueued): a graph is not launched, nor a node added, while the lock is held elsewhere";

/// A device buffer a graph holds, its type erased: a shared buffer, whose home stream its
/// launches reach, or a borrowed buffer's memory, whose home they never touch.
trait HeldBuffer: Send + Sync + fmt::Debug {
    fn home(&self) -> Result<Option<BorrowedStream<'_>>>;
    fn uses(&self) -> &Uses;
}

impl<T: DeviceCopy, S: AsStream + Send + Sync + 'static> HeldBuffer for DeviceBuffer<T, S> {
    fn home(&self) -> Result<Option<BorrowedStream<'_>>> {
        DeviceBuffer::home(self).map(Some)
    }

    fn uses(&self) -> &Uses {
        DeviceBuffer::uses(self)
    }
}

impl HeldBuffer for BufferCore {
    fn home(&self) -> Result<Option<BorrowedStream<'_>>> {
        Ok(None)
    }

    fn uses(&self) -> &Uses {
        &self.uses
    }
}

/// A borrowed buffer, which gives a graph its memory apart from itself, its type erased.
trait BorrowedBuffer {
    fn core_for_graphs(&self, capture: Option<&CaptureHolds>) -> Result<Arc<BufferCore>>;
}

impl<T: DeviceCopy, S: AsStream> BorrowedBuffer for DeviceBuffer<T, S> {
    fn core_for_graphs(&self, capture: Option<&CaptureHolds>) -> Result<Arc<BufferCore>> {
        DeviceBuffer::core_for_graphs(self, capture)
    }
}

/// Device memory that a capture's memcpy, memset and `use_on` work takes: a buffer the graph
/// holds ([`GraphBuffer`]), or memory the capture's graph allocated, a [`CaptureBuffer`].
/// Sealed.
pub trait CaptureMemory: side::Side {
    /// The type of its elements.
    type Element: DeviceCopy;
}

/// A device buffer that a graph's memcpy and memset nodes, and a capture's work, may use,
/// which the graph then holds: a borrowed [`DeviceBuffer`] (`&buffer`, whatever its home
/// stream), whose memory the graph holds apart from it (freed by the last holder when the
/// buffer is dropped first; see [the memory docs](crate::memory#graphs)), or a shared one,
/// `Arc<DeviceBuffer<T, S>>` with `S: 'static`, which the graph holds whole. Sealed.
pub trait GraphBuffer: side::Side {
    /// The type of its elements.
    type Element: DeviceCopy;
}

/// The device memory one captured kernel launch uses ([`Capture::use_on`]): one
/// [`CaptureMemory`] (`&buffer`), whose address the launcher gets, or a tuple of two to four
/// (`(&a, &b)`), whose addresses it gets as a tuple in the same order. Sealed.
pub trait CaptureUses: side::Sides {
    /// What the launcher gets: `*mut T`, or a tuple of them.
    type Addresses;
}

/// What the capture's memory calls read of their device memory (see [`CaptureMemory`]).
pub(super) mod side {
    use super::{BorrowedBuffer, CaptureAllocation, HeldBuffer, Span};
    use crate::device::Device;
    use std::ffi::c_void;
    use std::ops::Range;
    use std::sync::Arc;

    pub trait Side {
        fn side(&self) -> Memory<'_>;
    }

    /// How a graph comes to hold a buffer.
    pub(super) enum Holder<'a> {
        /// A shared buffer: the graph holds a clone of its `Arc`.
        Shared(Arc<dyn HeldBuffer>),
        /// A borrowed buffer: the graph holds its memory, once ready.
        Borrowed(&'a dyn BorrowedBuffer),
    }

    pub trait Sides {
        type Addresses;
        fn sides(&self) -> Vec<Memory<'_>>;
        fn addresses(&self) -> Self::Addresses;
    }

    /// Device memory as the capture's memory calls see it.
    pub struct Memory<'a> {
        pub(super) device: Device,
        /// Its length in elements.
        pub(super) len: usize,
        /// The address of its first element.
        pub(super) start: *mut c_void,
        pub(super) element_size: usize,
        /// How the graph holds the buffer; `None` for the graph's own memory.
        pub(super) held: Option<Holder<'a>>,
        /// The capture's allocation it is, whose uses are ordered in the capture.
        pub(super) allocation: Option<&'a CaptureAllocation>,
    }

    impl std::fmt::Debug for Memory<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Memory").field("device", &self.device).field("len", &self.len).finish_non_exhaustive()
        }
    }

    impl Memory<'_> {
        /// The address of element `range.start`, and the bytes `range` covers.
        pub(super) fn at(&self, range: &Range<usize>, writes: bool) -> (*mut c_void, Span) {
            let bytes = range.start * self.element_size..range.end * self.element_size;
            (self.start.wrapping_byte_add(bytes.start), Span { bytes, writes })
        }
    }
}

impl<T: DeviceCopy, S: AsStream + Send + Sync + 'static> CaptureMemory for Arc<DeviceBuffer<T, S>> {
    type Element = T;
}

impl<T: DeviceCopy, S: AsStream + Send + Sync + 'static> GraphBuffer for Arc<DeviceBuffer<T, S>> {
    type Element = T;
}

impl<T: DeviceCopy, S: AsStream + Send + Sync + 'static> side::Side for Arc<DeviceBuffer<T, S>> {
    fn side(&self) -> side::Memory<'_> {
        buffer_side(self, side::Holder::Shared(Arc::clone(self) as Arc<dyn HeldBuffer>))
    }
}

/// `buffer` as the capture's memory calls see it, held as `held` says.
fn buffer_side<'a, T: DeviceCopy, S: AsStream>(
    buffer: &DeviceBuffer<T, S>,
    held: side::Holder<'a>,
) -> side::Memory<'a> {
    side::Memory {
        device: buffer.device(),
        len: buffer.len(),
        start: buffer.element(0),
        element_size: size_of::<T>(),
        held: Some(held),
        allocation: None,
    }
}

impl<T: DeviceCopy, S: AsStream> CaptureMemory for DeviceBuffer<T, S> {
    type Element = T;
}

impl<T: DeviceCopy, S: AsStream> GraphBuffer for DeviceBuffer<T, S> {
    type Element = T;
}

impl<T: DeviceCopy, S: AsStream> side::Side for DeviceBuffer<T, S> {
    fn side(&self) -> side::Memory<'_> {
        buffer_side(self, side::Holder::Borrowed(self))
    }
}

impl<T: DeviceCopy> CaptureMemory for CaptureBuffer<T> {
    type Element = T;
}

impl<T: DeviceCopy> side::Side for CaptureBuffer<T> {
    fn side(&self) -> side::Memory<'_> {
        side::Memory {
            device: self.device(),
            len: self.len(),
            start: self.allocation().at(0),
            element_size: size_of::<T>(),
            held: None,
            allocation: Some(self.allocation()),
        }
    }
}

impl<M: CaptureMemory> CaptureUses for &M {
    type Addresses = *mut M::Element;
}

impl<M: CaptureMemory> side::Sides for &M {
    type Addresses = *mut M::Element;

    fn sides(&self) -> Vec<side::Memory<'_>> {
        vec![self.side()]
    }

    fn addresses(&self) -> Self::Addresses {
        self.side().start.cast()
    }
}

/// `CaptureUses` for tuples of references to [`CaptureMemory`].
macro_rules! capture_uses_for_tuples {
    ($(($($memory:ident $index:tt),+)),+) => {$(
        impl<$($memory: CaptureMemory),+> CaptureUses for ($(&$memory,)+) {
            type Addresses = ($(*mut $memory::Element,)+);
        }

        impl<$($memory: CaptureMemory),+> side::Sides for ($(&$memory,)+) {
            type Addresses = ($(*mut $memory::Element,)+);

            fn sides(&self) -> Vec<side::Memory<'_>> {
                vec![$(self.$index.side()),+]
            }

            fn addresses(&self) -> Self::Addresses {
                ($(self.$index.side().start.cast(),)+)
            }
        }
    )+};
}

capture_uses_for_tuples!((A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3));

/// Page-locked memory a graph holds behind the lock the host takes, its type erased.
trait HeldPageLocked: Send + Sync + fmt::Debug {
    /// The memory, locked; [`Error::GraphMisuse`] while the lock is held elsewhere.
    fn lock(&self) -> Result<Box<dyn LockedPageLocked + '_>>;
}

/// Locked page-locked memory: its copies in flight.
trait LockedPageLocked {
    fn order_copy(&mut self, stream: &StreamRef, span: &Span) -> Result<Ticket>;
    fn copied(&mut self, stream: &StreamRef, span: Span, ticket: Ticket, recorded: &mut UseEvent<SharedEvent>);
    /// Never touched or given back again (a copy in flight was not noted).
    fn leak(&mut self);
}

impl<T: DeviceCopy> HeldPageLocked for SharedPinned<T> {
    fn lock(&self) -> Result<Box<dyn LockedPageLocked + '_>> {
        match self.try_lock() {
            Some(guard) => Ok(Box::new(guard)),
            None => Err(Error::GraphMisuse(LOCKED)),
        }
    }
}

impl<T: DeviceCopy> LockedPageLocked for PinnedGuard<'_, T> {
    fn order_copy(&mut self, stream: &StreamRef, span: &Span) -> Result<Ticket> {
        self.memory().order_copy(stream, span)
    }

    fn copied(&mut self, stream: &StreamRef, span: Span, ticket: Ticket, recorded: &mut UseEvent<SharedEvent>) {
        self.memory().copied(stream, span, ticket, recorded);
    }

    fn leak(&mut self) {
        self.memory().mark_leaked();
    }
}

/// The memory a graph's memcpy and memset nodes use (see the [module docs](self)): each buffer
/// with the parts its nodes touch (apart, see [`HeldMemory::hold_buffer`]), and each page-locked
/// buffer with the bytes its nodes touch (merged).
#[derive(Clone, Debug, Default)]
pub(super) struct HeldMemory {
    buffers: Vec<(Arc<dyn HeldBuffer>, Span)>,
    page_locked: Vec<(Arc<dyn HeldPageLocked>, Span)>,
    /// The memcpy and memset nodes added to the graph by hand, and what each does: the nodes
    /// an executable may point at other memory of the same kind.
    nodes: Vec<(GraphNode, NodeKind)>,
    /// The graph's allocations that outlive its launches ([`Capture::keep`]).
    outputs: Vec<Arc<OutputSlot>>,
}

/// What a memory node does, which a change of its parameters keeps.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum NodeKind {
    Copy(sys::cudaMemcpyKind),
    Fill,
}

/// The identity of the value behind an `Arc`.
fn identity<T: ?Sized>(arc: &Arc<T>) -> *const () {
    Arc::as_ptr(arc).cast::<()>()
}

/// Merges `span` into the entry of `held` that holds `memory`; `false` when it has none.
fn merge_into<T: ?Sized>(held: &mut [(Arc<T>, Span)], memory: &Arc<T>, span: &Span) -> bool {
    match held.iter_mut().find(|(entry, _)| identity(entry) == identity(memory)) {
        Some((_, held)) => {
            *held = held.merged(span);
            true
        }
        None => false,
    }
}

/// Takes out of `held` every span of `memory` whose bytes overlap or adjoin those of `span`,
/// and returns `span` merged with them: what remains of `memory` in `held` shares no byte with
/// it, nor touches it.
fn absorb<T: ?Sized>(held: &mut Vec<(Arc<T>, Span)>, memory: &Arc<T>, span: Span) -> Span {
    let mut span = span;
    held.retain(|(entry, kept)| {
        let meets = kept.bytes.start <= span.bytes.end && span.bytes.start <= kept.bytes.end;
        if identity(entry) == identity(memory) && meets {
            span = span.merged(kept);
            return false;
        }
        true
    });
    span
}

impl HeldMemory {
    /// A copy of `memory`, what a graph or capture holds so far, to grow by a node.
    pub(super) fn of(memory: Option<Arc<dyn GraphMemory>>) -> Result<HeldMemory> {
        match memory {
            None => Ok(HeldMemory::default()),
            Some(memory) => memory
                .as_any()
                .downcast_ref::<HeldMemory>()
                .cloned()
                .ok_or(Error::GraphMisuse("a graph's memory is of a kind this crate does not know")),
        }
    }

    /// Whether `exec` holds the graph output `slot` (its launches allocate it).
    pub(super) fn held_by(exec: &GraphExec, slot: &Arc<OutputSlot>) -> bool {
        let memory = exec.memory();
        let held = memory.as_ref().and_then(|memory| memory.as_any().downcast_ref::<HeldMemory>());
        held.is_some_and(|held| held.outputs.iter().any(|output| Arc::ptr_eq(output, slot)))
    }

    /// Holds `buffer` for a node that touches `span` of it. The parts of one buffer that the
    /// nodes touch are held apart (merged only where they overlap or adjoin), so that a launch
    /// is ordered with the uses of the bytes its nodes touch, as they touch them: a write of one
    /// part does not make a read of another part a write, nor cover the bytes between. A launch
    /// orders at most [`MAX_TOUCHED`] parts: past that, two parts of one buffer become the one
    /// span that covers both (the bytes between included).
    ///
    /// # Errors
    /// [`Error::Size`] past 12 device buffers. Nothing changes then.
    fn hold_buffer(&mut self, buffer: Arc<dyn HeldBuffer>, span: Span) -> Result<()> {
        let held_already = self.buffers.iter().any(|(entry, _)| identity(entry) == identity(&buffer));
        if !held_already {
            let mut buffers: Vec<*const ()> = self.buffers.iter().map(|(entry, _)| identity(entry)).collect();
            buffers.sort_unstable();
            buffers.dedup();
            if buffers.len() == MAX_TOUCHED {
                return Err(Error::Size("a graph's memory nodes use at most 12 device buffers"));
            }
        }
        let mut span = absorb(&mut self.buffers, &buffer, span);
        while self.buffers.len() == MAX_TOUCHED {
            // Full: two parts of one buffer (this one's first) become one.
            let of_this = self.buffers.iter().position(|(entry, _)| identity(entry) == identity(&buffer));
            if let Some(at) = of_this {
                let (_, kept) = self.buffers.swap_remove(at);
                span = absorb(&mut self.buffers, &buffer, span.merged(&kept));
                continue;
            }
            // Fewer than 12 buffers hold 12 parts (`buffer` is new, checked above): one of them
            // has two, which become one.
            let Some(first) = (0..self.buffers.len()).find(|&at| {
                let of = identity(&self.buffers[at].0);
                self.buffers[at + 1..].iter().any(|(entry, _)| identity(entry) == of)
            }) else {
                return Err(Error::Size("a graph's memory nodes use at most 12 device buffers"));
            };
            let (other, part) = self.buffers.swap_remove(first);
            let merged = match self.buffers.iter().position(|(entry, _)| identity(entry) == identity(&other)) {
                Some(second) => part.merged(&self.buffers.swap_remove(second).1),
                None => part,
            };
            let merged = absorb(&mut self.buffers, &other, merged);
            self.buffers.push((other, merged));
        }
        self.buffers.push((buffer, span));
        Ok(())
    }

    /// Adds what `more` holds to what `holds` holds (a capture's: under its lock, so that
    /// nothing another thread's call added meanwhile is lost).
    ///
    /// # Errors
    /// [`Error::Size`] past 12 device buffers; [`Error::GraphMisuse`] for memory of a kind
    /// this crate does not know. Nothing changes then.
    pub(super) fn add_to(self, holds: &CaptureHolds) -> Result<()> {
        holds.grow(|held| {
            let mut memory = HeldMemory::of(held)?;
            for (buffer, span) in self.buffers {
                memory.hold_buffer(buffer, span)?;
            }
            for (page_locked, span) in self.page_locked {
                memory.hold_page_locked(page_locked, span);
            }
            memory.nodes.extend(self.nodes);
            memory.outputs.extend(self.outputs);
            Ok(Arc::new(memory))
        })
    }

    /// Whether it holds nothing and names no node.
    fn is_empty(&self) -> bool {
        self.buffers.is_empty() && self.page_locked.is_empty() && self.nodes.is_empty() && self.outputs.is_empty()
    }

    /// Keeps the state of an allocation that outlives the graph's launches.
    pub(super) fn keep_output(&mut self, slot: Arc<OutputSlot>) {
        self.outputs.push(slot);
    }

    /// Holds `memory` for a node that touches `span` of it.
    fn hold_page_locked(&mut self, memory: Arc<dyn HeldPageLocked>, span: Span) {
        if !merge_into(&mut self.page_locked, &memory, &span) {
            self.page_locked.push((memory, span));
        }
    }
}

impl GraphMemory for HeldMemory {
    fn ordered_launch(&self, stream: &StreamRef, launch: &mut dyn FnMut(&mut bool) -> Result<()>) -> Result<()> {
        let homes = self.buffers.iter().map(|(buffer, _)| buffer.home()).collect::<Result<Vec<_>>>()?;
        let touched: Vec<Touched<'_>> = homes
            .iter()
            .zip(&self.buffers)
            .map(|(home, (buffer, span))| Touched { home: home.as_deref(), uses: buffer.uses(), span: span.clone() })
            .collect();
        let mut locked = Vec::with_capacity(self.page_locked.len());
        for (memory, span) in &self.page_locked {
            locked.push((memory.lock()?, span));
        }
        // A launch on a captured stream would be a child graph node, whose memory the outer
        // graph would not hold.
        ordered_use(stream, &touched, Hold::Throughout, InCaptures::Refused(CAPTURED), |recorded| {
            let mut tickets = Vec::with_capacity(locked.len());
            for (memory, span) in &mut locked {
                tickets.push(memory.order_copy(stream, span)?);
            }
            for output in &self.outputs {
                output.before_launch(stream)?;
            }
            let mut launched = false;
            if let Err(error) = launch(&mut launched) {
                // An error after CUDA took the launch (a launch that replays to the race
                // detector records a marker after it): its outputs are allocated, but no event
                // marks when, so none is read, taken or launched again. Before it, nothing
                // changed.
                if launched {
                    self.outputs.iter().for_each(|output| output.launch_failed());
                }
                return Err(error);
            }
            // Every output is noted (a failed note refuses the next launch), whatever the others did.
            let outputs = self.outputs.iter().map(|output| output.launched(stream)).fold(Ok(()), Result::and);
            // One event after the launch serves every side: the first page-locked note records
            // it, the others and the buffers' marks share it. A note that unwinds (a bug) leaves
            // its memory leaked, never touched again, and the others are noted all the same.
            let mut unwound = None;
            for ((memory, span), ticket) in locked.iter_mut().zip(tickets) {
                recorded.wanted = true;
                let note = || memory.copied(stream, (*span).clone(), ticket, recorded);
                if let Err(payload) = catch_unwind(AssertUnwindSafe(note)) {
                    memory.leak();
                    unwound.get_or_insert(payload);
                }
            }
            if let Some(payload) = unwound {
                resume_unwind(payload);
            }
            outputs
        })
    }

    fn one_executable(&self) -> bool {
        !self.outputs.is_empty()
    }

    fn instantiated(&self, auto_free: bool) {
        for output in &self.outputs {
            output.instantiated(auto_free);
        }
    }

    fn nodes_only(&self) -> Arc<dyn GraphMemory> {
        Arc::new(HeldMemory { nodes: self.nodes.clone(), ..HeldMemory::default() })
    }

    fn without_nodes(&self) -> Arc<dyn GraphMemory> {
        Arc::new(HeldMemory { nodes: Vec::new(), ..self.clone() })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A memory operation of a graph: what it does, and the memory the graph holds for it (what it
/// held before, and what the operation uses).
struct Planned {
    memory: HeldMemory,
    operation: Operation,
}

/// What a memcpy or memset node does (or captured work, when it is enqueued on a capturing
/// stream): on addresses of memory the graph holds (see [`Planned`]).
#[derive(Copy, Clone)]
enum Operation {
    Copy { to: *mut c_void, from: *const c_void, bytes: usize, kind: sys::cudaMemcpyKind },
    Fill { to: *mut c_void, bytes: usize, byte: u8 },
}

impl Operation {
    /// What its node does.
    fn kind(self) -> NodeKind {
        match self {
            Operation::Copy { kind, .. } => NodeKind::Copy(kind),
            Operation::Fill { .. } => NodeKind::Fill,
        }
    }

    /// Points node `node` of the graph `exec` was instantiated from at its memory: later
    /// launches of `exec` run it there.
    ///
    /// # Safety
    /// `exec` is a live executable that no other thread uses during the call; `node` is a node
    /// of its graph of this operation's kind; the operation's memory is what `exec` holds from
    /// now on.
    unsafe fn set_in(self, exec: sys::cudaGraphExec_t, node: sys::cudaGraphNode_t) -> Result<()> {
        let (code, api) = match self {
            Operation::Copy { to, from, bytes, kind } => (
                // SAFETY: the caller's contract; `bytes` bytes at both addresses, of the kinds
                // `kind` names.
                unsafe { sys::cudaGraphExecMemcpyNodeSetParams1D(exec, node, to, from, bytes, kind) },
                "cudaGraphExecMemcpyNodeSetParams1D",
            ),
            Operation::Fill { to, bytes, byte } => {
                let params = fill_params(to, bytes, byte);
                // SAFETY: the caller's contract; `bytes` bytes at `to`.
                (
                    unsafe { sys::cudaGraphExecMemsetNodeSetParams(exec, node, &params) },
                    "cudaGraphExecMemsetNodeSetParams",
                )
            }
        };
        check(code, api)
    }

    /// What it reads and writes, for the race detector.
    fn accesses(self) -> Vec<Access> {
        match self {
            Operation::Copy { to, from, bytes, .. } => vec![
                Access::bytes(from as u64, bytes as u64, AccessKind::Read),
                Access::bytes(to as u64, bytes as u64, AccessKind::Write),
            ],
            Operation::Fill { to, bytes, .. } => vec![Access::bytes(to as u64, bytes as u64, AccessKind::Write)],
        }
    }

    /// Adds it to `graph` as a node after `dependencies`.
    ///
    /// # Safety
    /// `graph` is a live graph (or body) that nothing else uses during the call, `dependencies`
    /// are nodes of it, and the operation's memory is what [`Planned`] holds for that graph.
    unsafe fn add_node(
        self,
        graph: sys::cudaGraph_t,
        dependencies: &[sys::cudaGraphNode_t],
    ) -> Result<sys::cudaGraphNode_t> {
        let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
        let (deps, count) = (dependency_pointer(dependencies), dependencies.len());
        // When a launch runs the node, its device buffer is one the graph holds, and its
        // page-locked memory a `SharedPinned` the graph holds, which no guard moves or frees.
        let (code, api) = match self {
            Operation::Copy { to, from, bytes, kind } => (
                // SAFETY: the caller's contract for the graph and its dependencies; `bytes` bytes
                // at both addresses, of the kinds `kind` names; a valid out-pointer.
                unsafe { sys::cudaGraphAddMemcpyNode1D(&mut node, graph, deps, count, to, from, bytes, kind) },
                "cudaGraphAddMemcpyNode1D",
            ),
            Operation::Fill { to, bytes, byte } => {
                let params = fill_params(to, bytes, byte);
                // SAFETY: as above, with `bytes` bytes at `to`.
                (
                    unsafe { sys::cudaGraphAddMemsetNode(&mut node, graph, deps, count, &params) },
                    "cudaGraphAddMemsetNode",
                )
            }
        };
        check(code, api)?;
        Ok(node)
    }

    /// The name of its node, in race reports of a graph's launches.
    fn node_name(self) -> &'static str {
        match self {
            Operation::Copy { .. } => "cudaGraphAddMemcpyNode1D",
            Operation::Fill { .. } => "cudaGraphAddMemsetNode",
        }
    }

    /// Enqueues it on `stream`, capturing into a graph that holds its memory, with the device
    /// current.
    fn enqueue(self, stream: &StreamRef) -> Result<()> {
        // The operation's memory is what the capture's graph holds for every launch (see
        // `add_node`).
        let (code, api) = match self {
            Operation::Copy { to, from, bytes, kind } => {
                // SAFETY: `bytes` bytes at both addresses, of the kinds `kind` names; a live
                // stream of the device, current.
                (unsafe { sys::cudaMemcpyAsync(to, from, bytes, kind, stream.as_raw()) }, "cudaMemcpyAsync")
            }
            Operation::Fill { to, bytes, byte } => {
                // SAFETY: `bytes` bytes at `to`; a live stream of the device, current.
                (unsafe { sys::cudaMemsetAsync(to, i32::from(byte), bytes, stream.as_raw()) }, "cudaMemsetAsync")
            }
        };
        check(code, api)
    }

    /// The name of the CUDA call `enqueue` makes.
    fn call_name(self) -> &'static str {
        match self {
            Operation::Copy { .. } => "cudaMemcpyAsync",
            Operation::Fill { .. } => "cudaMemsetAsync",
        }
    }
}

/// A memset node's parameters: `bytes` bytes at `to` set to `byte`.
fn fill_params(to: *mut c_void, bytes: usize, byte: u8) -> sys::cudaMemsetParams {
    sys::cudaMemsetParams { dst: to, pitch: 0, value: u32::from(byte), elementSize: 1, width: bytes, height: 1 }
}

/// Holds `side` (a buffer the graph keeps; nothing for the graph's own memory) in `memory`
/// for a node that touches `span` of it, of a built graph or of the capture whose holds are
/// `capture`.
fn hold_side(
    memory: &mut HeldMemory,
    capture: Option<&CaptureHolds>,
    side: side::Memory<'_>,
    span: Span,
) -> Result<()> {
    match side.held {
        Some(side::Holder::Shared(buffer)) => memory.hold_buffer(buffer, span),
        Some(side::Holder::Borrowed(buffer)) => memory.hold_buffer(buffer.core_for_graphs(capture)?, span),
        None => Ok(()),
    }
}

/// Holds, for the graph of the capture whose holds are `holds`, the buffers `touched` that a
/// use on one of its streams touches (checked, under the caller's hold, where the capture
/// cannot end), before the use is captured: each launch of an executable made from the graph
/// is then ordered with their other uses, as for a capture's own calls. `cores` are the
/// buffers' memory as the graph holds it, in the same order (none for memory another library
/// lent). Every buffer is checked before any is prepared, and its home uses not yet marked are
/// then marked as [`prepare_core`] says.
///
/// # Errors
/// [`Error::CaptureMisuse`] for memory another library lent, a buffer of another device than
/// the capture's (a graph's memory nodes and launches are ordered on its own device: a copy
/// between devices, or a kernel reaching a peer's memory, is not captured), and a home stream
/// captured elsewhere with uses not yet marked; [`Error::GraphMisuse`] for a buffer whose
/// address was handed out; [`Error::Size`] past 12 buffers in the graph; CUDA's errors
/// recording a mark. Nothing is held then (marks made for the buffers checked before stay: they
/// only order).
pub(super) fn hold_in_capture<T: Touches>(
    holds: &CaptureHolds,
    touched: &[T],
    cores: &[Option<&Arc<BufferCore>>],
) -> Result<()> {
    let mut checked = Vec::with_capacity(touched.len());
    for (buffer, &core) in touched.iter().zip(cores) {
        let (Some(core), Some(home)) = (core, buffer.home()) else {
            return Err(Error::CaptureMisuse(
                "memory another library lent is not captured by a buffer's own call (a graph holds it only through an Arc<DeviceBuffer> and a capture's own calls)",
            ));
        };
        if home.device() != holds.device() {
            return Err(Error::CaptureMisuse(
                "a capture holds only buffers of its own device: a copy between devices, or a kernel reaching a peer's memory, is not captured",
            ));
        }
        checked.push((core, home, buffer.span()));
    }
    let mut held = HeldMemory::default();
    for (core, home, span) in checked {
        prepare_core(core, home, Some(holds))?;
        held.hold_buffer(Arc::clone(core) as Arc<dyn HeldBuffer>, span.clone())?;
    }
    held.add_to(holds)
}

/// Holds `side` in `memory` for kernels that may read and write all of it.
fn hold_whole(memory: &mut HeldMemory, capture: Option<&CaptureHolds>, side: side::Memory<'_>) -> Result<()> {
    let span = side.at(&(0..side.len), true).1;
    hold_side(memory, capture, side, span)
}

/// Whose memory a node's plan grows.
enum Growing<'a> {
    /// A built graph's, or an executable's: a copy of what it holds so far.
    Graph(Option<Arc<dyn GraphMemory>>),
    /// A capture's: what the node adds, added to its holds before the work is captured.
    Capture(&'a CaptureHolds),
}

impl Growing<'_> {
    /// What the plan holds before the node's memory.
    fn start(&self) -> Result<HeldMemory> {
        match self {
            Growing::Graph(held) => HeldMemory::of(held.clone()),
            Growing::Capture(_) => Ok(HeldMemory::default()),
        }
    }

    fn capture(&self) -> Option<&CaptureHolds> {
        match self {
            Growing::Graph(_) => None,
            Growing::Capture(holds) => Some(holds),
        }
    }
}

/// Elements `range` of `buffer` set to bytes `byte`, by a graph of `device` that holds `held`.
fn plan_fill(
    held: Growing<'_>,
    device: Device,
    buffer: &impl side::Side,
    range: impl RangeBounds<usize>,
    byte: u8,
) -> Result<Planned> {
    let buffer = buffer.side();
    same_device("a graph's memset uses a buffer of the graph's device", device, buffer.device)?;
    let range = checked_range(&range, buffer.len)?;
    let (to, span) = buffer.at(&range, true);
    let bytes = span.bytes.len();
    let mut memory = held.start()?;
    hold_side(&mut memory, held.capture(), buffer, span)?;
    Ok(Planned { memory, operation: Operation::Fill { to, bytes, byte } })
}

/// Elements `from_range` of `from` copied into `to_range` of `to`, by a graph of `device` that
/// holds `held`.
fn plan_copy(
    held: Growing<'_>,
    device: Device,
    (to, to_range): (&impl side::Side, impl RangeBounds<usize>),
    (from, from_range): (&impl side::Side, impl RangeBounds<usize>),
) -> Result<Planned> {
    let (to, from) = (to.side(), from.side());
    same_device("a graph's memcpy copies between buffers of the graph's device", device, to.device)?;
    same_device("a graph's memcpy copies between buffers of the graph's device", device, from.device)?;
    let (to_range, from_range) = (checked_range(&to_range, to.len)?, checked_range(&from_range, from.len)?);
    same_length(to_range.len(), from_range.len())?;
    let (destination, written) = to.at(&to_range, true);
    let (source, read) = from.at(&from_range, false);
    let bytes = written.bytes.len();
    // Two buffers never share an address: only two ranges of one buffer can overlap.
    let (to_bytes, from_bytes) =
        (destination as usize..destination as usize + bytes, source as usize..source as usize + bytes);
    if to_bytes.start < from_bytes.end && from_bytes.start < to_bytes.end {
        return Err(Error::Size("the two sides of a copy within one buffer overlap"));
    }
    let mut memory = held.start()?;
    hold_side(&mut memory, held.capture(), to, written)?;
    hold_side(&mut memory, held.capture(), from, read)?;
    let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice;
    Ok(Planned { memory, operation: Operation::Copy { to: destination, from: source, bytes, kind } })
}

/// A copy between elements `device_range` of `buffer` and `pinned_range` of the page-locked
/// buffer in `pinned`, into the device (`into_device`) or out of it, by a graph of `device`
/// that holds `held`.
fn plan_pinned_copy<T: DeviceCopy>(
    held: Growing<'_>,
    device: Device,
    (buffer, device_range): (&impl side::Side, impl RangeBounds<usize>),
    (pinned, pinned_range): (&Arc<SharedPinned<T>>, impl RangeBounds<usize>),
    into_device: bool,
) -> Result<Planned> {
    let buffer = buffer.side();
    same_device("a graph's memcpy uses a buffer of the graph's device", device, buffer.device)?;
    let device_range = checked_range(&device_range, buffer.len)?;
    // Where the buffer is: for as long as the `Arc` lives (no guard replaces it).
    let place = pinned.try_lock().ok_or(Error::GraphMisuse(LOCKED))?.place();
    let pinned_range = checked_range(&pinned_range, place.1)?;
    same_length(device_range.len(), pinned_range.len())?;
    let host_address = (place.0 + pinned_range.start * size_of::<T>()) as *mut c_void;
    let host =
        Span { bytes: pinned_range.start * size_of::<T>()..pinned_range.end * size_of::<T>(), writes: !into_device };
    let (device_address, device_span) = buffer.at(&device_range, into_device);
    let bytes = device_span.bytes.len();
    let mut memory = held.start()?;
    hold_side(&mut memory, held.capture(), buffer, device_span)?;
    memory.hold_page_locked(Arc::clone(pinned) as Arc<dyn HeldPageLocked>, host);
    let operation = if into_device {
        let kind = sys::cudaMemcpyKind::cudaMemcpyHostToDevice;
        Operation::Copy { to: device_address, from: host_address.cast_const(), bytes, kind }
    } else {
        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToHost;
        Operation::Copy { to: host_address, from: device_address.cast_const(), bytes, kind }
    };
    Ok(Planned { memory, operation })
}

impl GraphBuilder<'_> {
    /// Adds a node that sets the bytes of elements `range` of `buffer` to `byte` after the
    /// nodes `after`, at every launch of the graph (and every run of the body it is in)
    /// ([`cudaGraphAddMemsetNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// The graph holds `buffer` (borrowed, its memory; shared, a clone of the `Arc`: see
    /// [`GraphBuffer`]); each launch is ordered with its other uses as a write of those
    /// elements (see [`GraphExec::launch`](crate::GraphExec::launch)).
    ///
    /// # Errors
    /// [`Error::Size`] for an empty range or one outside the buffer, and for a 13th device
    /// buffer in one graph; [`Error::DeviceMismatch`] for a buffer of another device;
    /// [`Error::GraphMisuse`] for a borrowed buffer whose address was handed out
    /// ([`DeviceBuffer::as_ptr`]) or whose memory another library lent;
    /// [`Error::CaptureMisuse`] for a borrowed buffer whose home stream is being captured and
    /// has uses not yet marked (see [the memory docs](crate::memory#graphs));
    /// [`Error::GraphMisuse`] for a node of another graph or body in `after`, or while a capture
    /// leaked with `mem::forget` writes into this level; [`Error::InsideHostFn`]; CUDA's errors.
    pub fn add_fill_bytes<T: DeviceCopy>(
        &mut self,
        buffer: &impl GraphBuffer<Element = T>,
        range: impl RangeBounds<usize>,
        byte: u8,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        let planned = plan_fill(Growing::Graph(self.memory()), self.device(), buffer, range, byte)?;
        self.add_planned(after, planned)
    }

    /// Adds a node that copies elements `from_range` of `from` into elements `to_range` of `to`
    /// (two ranges of one length) after the nodes `after`, at every launch of the graph
    /// ([`cudaGraphAddMemcpyNode1D`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// The graph holds both buffers; each launch is ordered with their other uses as a write of
    /// `to_range` and a read of `from_range`. `to` and `from` may be one buffer, with ranges
    /// that do not overlap.
    ///
    /// # Errors
    /// [`Error::Size`] for an empty range or one outside its buffer, ranges of different
    /// lengths, overlapping ranges of one buffer, and a 13th device buffer in one graph;
    /// otherwise as [`GraphBuilder::add_fill_bytes`].
    pub fn add_copy<T: DeviceCopy>(
        &mut self,
        to: &impl GraphBuffer<Element = T>,
        to_range: impl RangeBounds<usize>,
        from: &impl GraphBuffer<Element = T>,
        from_range: impl RangeBounds<usize>,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        let planned = plan_copy(Growing::Graph(self.memory()), self.device(), (to, to_range), (from, from_range))?;
        self.add_planned(after, planned)
    }

    /// Adds a node that copies elements `from_range` of the page-locked buffer in `from` into
    /// elements `to_range` of `to`, after the nodes `after`, at every launch of the graph
    /// ([`cudaGraphAddMemcpyNode1D`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)):
    /// a host-to-device copy, asynchronous. The graph holds both; each launch is ordered with
    /// the buffer's other uses as a write of `to_range`, and with the page-locked buffer's
    /// copies in flight as a read of `from_range`, which its host access then waits for
    /// ([`SharedPinned::lock`], then [`PinnedGuard::as_mut_slice`]). A launch is refused while
    /// a guard of it is alive (see the [module docs](crate::memory#graphs)).
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] while a guard of `from` is alive; otherwise as
    /// [`GraphBuilder::add_copy`].
    pub fn add_copy_from_pinned<T: DeviceCopy>(
        &mut self,
        to: &impl GraphBuffer<Element = T>,
        to_range: impl RangeBounds<usize>,
        from: &Arc<SharedPinned<T>>,
        from_range: impl RangeBounds<usize>,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        let planned =
            plan_pinned_copy(Growing::Graph(self.memory()), self.device(), (to, to_range), (from, from_range), true)?;
        self.add_planned(after, planned)
    }

    /// Adds a node that copies elements `from_range` of `from` into elements `to_range` of the
    /// page-locked buffer in `to`: a device-to-host copy, as
    /// [`GraphBuilder::add_copy_from_pinned`] with the sides swapped. Each launch is ordered as
    /// a read of `from_range`, and as a write of the page-locked elements, whose host access
    /// waits for it.
    ///
    /// # Errors
    /// As [`GraphBuilder::add_copy_from_pinned`].
    pub fn add_copy_to_pinned<T: DeviceCopy>(
        &mut self,
        to: &Arc<SharedPinned<T>>,
        to_range: impl RangeBounds<usize>,
        from: &impl GraphBuffer<Element = T>,
        from_range: impl RangeBounds<usize>,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        let planned =
            plan_pinned_copy(Growing::Graph(self.memory()), self.device(), (from, from_range), (to, to_range), false)?;
        self.add_planned(after, planned)
    }

    /// Holds `buffer` for kernel nodes of this graph and returns its device address, for their
    /// arguments ([`GraphBuilder::add_kernel`](crate::GraphBuilder::add_kernel)): each launch
    /// of the graph is then ordered with the buffer's other uses as a write of all of it, as
    /// [`Capture::use_on`] orders a captured kernel's. A borrowed buffer's address handed out
    /// this way is not an export ([`DeviceBuffer::as_ptr`] would make the graph refuse it).
    /// Adding the kernel stays `unsafe`: use the address only in nodes of this graph.
    ///
    /// # Errors
    /// As [`GraphBuilder::add_fill_bytes`], without the node's.
    pub fn hold_for_kernels<T: DeviceCopy>(&mut self, buffer: &impl GraphBuffer<Element = T>) -> Result<*mut T> {
        let side = buffer.side();
        same_device("a graph's kernels use a buffer of the graph's device", self.device(), side.device)?;
        let start = side.start.cast::<T>();
        let mut memory = HeldMemory::of(self.memory())?;
        hold_whole(&mut memory, None, side)?;
        self.hold_memory(Arc::new(memory));
        Ok(start)
    }

    /// Adds the node `planned` describes after `after`; then the graph holds its memory, and
    /// replays its accesses to the race detector at each launch.
    fn add_planned(&mut self, after: &[GraphNode], planned: Planned) -> Result<GraphNode> {
        let Planned { mut memory, operation } = planned;
        // SAFETY: `add_node_with` hands this level's live graph, which nothing else uses
        // meanwhile (the builder's exclusive borrow), and nodes of it; the graph holds
        // `memory` from the moment the node exists.
        let node =
            self.add_node_with(after, |graph, dependencies| unsafe { operation.add_node(graph, dependencies) })?;
        memory.nodes.push((node, operation.kind()));
        self.hold_memory(Arc::new(memory));
        self.add_race_accesses(CapturedAccesses::of_node(operation.node_name(), &operation.accesses()));
        Ok(node)
    }
}

impl<M: CaptureMode> Capture<'_, M> {
    /// Copies elements `from_range` of `from` into elements `to_range` of `to` on `stream`, the
    /// captured stream or one that joined this capture: the copy becomes a memcpy node of the
    /// capture's graph, after the stream's captured work
    /// ([`cudaMemcpyAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)
    /// during capture). Each side is a device buffer, borrowed or shared ([`GraphBuffer`]),
    /// which the graph then holds as a built graph's memcpy node does (see [`GraphBuilder::add_copy`] and
    /// [the memory docs](crate::memory#graphs)): each launch of an executable made from it is
    /// ordered with their other uses; or a [`CaptureBuffer`] of this capture, whose use is
    /// ordered after its allocation and before its free. Between streams of the capture,
    /// order the work on those buffers as for kernels (a fork and a join).
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a stream that is not part of this capture, or a capture
    /// buffer of another capture or freed; otherwise as [`GraphBuilder::add_copy`] (nothing is
    /// captured then).
    pub fn copy<T: DeviceCopy>(
        &mut self,
        stream: impl AsStream,
        (to, to_range): (&impl CaptureMemory<Element = T>, impl RangeBounds<usize>),
        (from, from_range): (&impl CaptureMemory<Element = T>, impl RangeBounds<usize>),
    ) -> Result<()> {
        let stream = stream.as_stream();
        let planned = plan_copy(Growing::Capture(self.holds()), stream.device(), (to, to_range), (from, from_range))?;
        self.capture_planned(&stream, planned, [to.side().allocation, from.side().allocation])
    }

    /// Sets the bytes of elements `range` of `buffer` to `byte` on `stream`, a stream of this
    /// capture: a memset node of its graph
    /// ([`cudaMemsetAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)
    /// during capture; see [`Capture::copy`]).
    ///
    /// # Errors
    /// As [`Capture::copy`] and [`GraphBuilder::add_fill_bytes`].
    pub fn fill_bytes<T: DeviceCopy>(
        &mut self,
        stream: impl AsStream,
        buffer: &impl CaptureMemory<Element = T>,
        range: impl RangeBounds<usize>,
        byte: u8,
    ) -> Result<()> {
        let stream = stream.as_stream();
        let planned = plan_fill(Growing::Capture(self.holds()), stream.device(), buffer, range, byte)?;
        self.capture_planned(&stream, planned, [buffer.side().allocation, None])
    }

    /// Copies elements `from_range` of the page-locked buffer in `from` into elements
    /// `to_range` of `to` on `stream`, a stream of this capture: a memcpy node of its graph,
    /// which holds the page-locked buffer (and `to`, a shared buffer), as
    /// [`GraphBuilder::add_copy_from_pinned`] describes (the host's access and the launches
    /// through the mutex).
    ///
    /// # Errors
    /// As [`Capture::copy`] and [`GraphBuilder::add_copy_from_pinned`].
    pub fn copy_from_pinned<T: DeviceCopy>(
        &mut self,
        stream: impl AsStream,
        to: (&impl CaptureMemory<Element = T>, impl RangeBounds<usize>),
        from: (&Arc<SharedPinned<T>>, impl RangeBounds<usize>),
    ) -> Result<()> {
        let stream = stream.as_stream();
        let allocation = to.0.side().allocation;
        let planned = plan_pinned_copy(Growing::Capture(self.holds()), stream.device(), to, from, true)?;
        self.capture_planned(&stream, planned, [allocation, None])
    }

    /// Copies elements `from_range` of `from` into elements `to_range` of the page-locked
    /// buffer in `to` on `stream`, a stream of this capture: [`Capture::copy_from_pinned`] the
    /// other way.
    ///
    /// # Errors
    /// As [`Capture::copy_from_pinned`].
    pub fn copy_to_pinned<T: DeviceCopy>(
        &mut self,
        stream: impl AsStream,
        to: (&Arc<SharedPinned<T>>, impl RangeBounds<usize>),
        from: (&impl CaptureMemory<Element = T>, impl RangeBounds<usize>),
    ) -> Result<()> {
        let stream = stream.as_stream();
        let allocation = from.0.side().allocation;
        let planned = plan_pinned_copy(Growing::Capture(self.holds()), stream.device(), from, to, false)?;
        self.capture_planned(&stream, planned, [allocation, None])
    }

    /// Runs `launch` with `stream`, a stream of this capture, and the device addresses of
    /// `memory`: one buffer (`&buffer`, its address) or a tuple of two to four (`(&a, &b)`,
    /// their addresses as a tuple, in order), each a device buffer, borrowed or shared
    /// ([`GraphBuffer`]), or a [`CaptureBuffer`] (see [`CaptureUses`]). The kernels `launch`
    /// enqueues there are captured. A device buffer is then held by the graph, whose every element they may read and write: each launch of an
    /// executable made from the graph is ordered with the buffer's other uses as a write of all
    /// of it (see [the memory docs](crate::memory#graphs)). A [`CaptureBuffer`] of this
    /// capture: `stream` first waits for its allocation, and its free waits for what `launch`
    /// enqueued (an event recorded after `launch` returns, or unwinds). `launch` runs outside the crate's hold,
    /// as [`DeviceBuffer::use_on`]'s does; launching a kernel stays `unsafe`, and its contract
    /// is `use_on`'s: use the address only in work that `launch` enqueues on `stream` while
    /// `stream` is part of this capture. The race detector sees what those kernels declare
    /// ([`StreamRef::declare_accesses`], or a typed launch's accesses), as for any captured
    /// kernel.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a stream that is not part of this capture, or a capture
    /// buffer of another capture or freed (checked before `launch`, which then does not run);
    /// [`Error::DeviceMismatch`] for a buffer of another device; [`Error::Size`] for a 13th
    /// device buffer; [`Error::InsideHostFn`]; CUDA's errors ordering a capture buffer's use
    /// (if its event cannot be recorded after `launch`, its free fails).
    pub fn use_on<U: CaptureUses, R>(
        &mut self,
        stream: impl AsStream,
        memory: U,
        launch: impl FnOnce(&StreamRef, <U as side::Sides>::Addresses) -> R,
    ) -> Result<R> {
        let stream = stream.as_stream();
        let sides = memory.sides();
        for side in &sides {
            same_device("a capture uses a buffer of its stream's device", stream.device(), side.device)?;
        }
        let allocations: Vec<&CaptureAllocation> = sides.iter().filter_map(|side| side.allocation).collect();
        let used = stream.outside_transitions(InCapture::Captured, || {
            self.refuse_outside(&stream)?;
            let ordered = |allocation: &&CaptureAllocation| before_use(allocation, self.id(), &stream);
            allocations.iter().map(ordered).collect::<Result<Vec<_>>>()
        })?;
        if sides.iter().any(|side| side.held.is_some()) {
            let mut held = HeldMemory::default();
            for side in sides {
                hold_whole(&mut held, Some(self.holds()), side)?;
            }
            held.add_to(self.holds())?;
        }
        // Recorded after `launch`'s work, also when it unwinds (its kernels may be in).
        let notes: Vec<UseNote<'_>> = allocations
            .into_iter()
            .zip(used)
            .map(|(allocation, used)| UseNote { stream: &stream, allocation, used: Some(used) })
            .collect();
        let result = launch(&stream, memory.addresses());
        // Every note is recorded, whatever the others did.
        notes.into_iter().map(UseNote::finish).fold(Ok(()), Result::and)?;
        Ok(result)
    }

    /// Captures `planned`'s operation on `stream`, a stream of this capture, once the capture
    /// holds its memory; the capture buffers in `allocations` (of this capture, checked) are
    /// ordered after their allocation and before their free.
    fn capture_planned(
        &mut self,
        stream: &StreamRef,
        planned: Planned,
        allocations: [Option<&CaptureAllocation>; 2],
    ) -> Result<()> {
        let Planned { memory, operation } = planned;
        stream.outside_transitions(InCapture::Captured, || {
            self.refuse_outside(stream)?;
            allocations.iter().flatten().try_for_each(|allocation| allocation.refuse_unusable(self.id()))
        })?;
        // Held before CUDA has the work. No capture of this crate ends between the check
        // and the enqueue (the hold), and the foreign entry points' contract keeps another
        // library's end of this capture from overlapping a call of this crate on any of its
        // streams (`BorrowedStream::borrow_raw`, `StreamRef::to_cudarc`). Work on the graph's
        // own memory only holds nothing.
        if !memory.is_empty() {
            memory.add_to(self.holds())?;
        }
        // The graph's own memory is not declared to the race detector: nothing outside the
        // graph reaches it (an output is reached through the buffer `take` orders after the
        // launch), and inside the graph CUDA orders it (a free node after its uses, each launch
        // of an executable after the last), which the detector does not model.
        let owned: Vec<Range<u64>> = allocations.iter().flatten().map(|allocation| allocation.byte_range()).collect();
        let uses = move || {
            let declared = |access: &Access| !owned.iter().any(|range| range.contains(&access.address()));
            operation.accesses().into_iter().filter(declared).map(|access| access.as_use()).collect()
        };
        let work = Work::named(operation.call_name()).uses(uses);
        self.enqueue_captured(stream, work, |_| {
            // Under the same hold as the check: the stream is still this capture's.
            let mut used = Vec::with_capacity(2);
            for allocation in allocations.iter().flatten() {
                used.push((allocation, allocation.before_use(stream)?));
            }
            operation.enqueue(stream)?;
            // Every event is recorded (or its buffer marked unordered), whatever the others did.
            used.into_iter().map(|(allocation, used)| allocation.used_on(stream, used)).fold(Ok(()), Result::and)
        })
    }
}

/// [`CaptureAllocation::before_use`], once the allocation is checked to be capture `id`'s.
fn before_use(allocation: &CaptureAllocation, id: u64, stream: &StreamRef) -> Result<crate::event::Event> {
    allocation.refuse_unusable(id)?;
    allocation.before_use(stream)
}

/// The event a capture buffer's use in [`Capture::use_on`] leaves, recorded when the use is
/// finished or unwinds.
struct UseNote<'a> {
    stream: &'a StreamRef,
    allocation: &'a CaptureAllocation,
    used: Option<crate::event::Event>,
}

impl UseNote<'_> {
    fn finish(mut self) -> Result<()> {
        self.record()
    }

    /// Records the event under the enqueue path's hold (if the hold is refused, the free is
    /// refused in turn: see [`CaptureAllocation::used_on`]).
    fn record(&mut self) -> Result<()> {
        let Some(used) = self.used.take() else { return Ok(()) };
        let mut used = Some(used);
        let recorded = self.stream.outside_transitions(InCapture::Captured, || {
            used.take().map_or(Ok(()), |used| self.allocation.used_on(self.stream, used))
        });
        if used.is_some() {
            self.allocation.mark_unordered();
        }
        recorded
    }
}

impl Drop for UseNote<'_> {
    fn drop(&mut self) {
        let _ = self.record();
    }
}

impl GraphExec {
    /// Points memcpy node `node` at other memory: elements `from_range` of `from` copied into
    /// `to_range` of `to`, from the next launch on
    /// ([`cudaGraphExecMemcpyNodeSetParams1D`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// `graph` is the graph this executable was instantiated from (CUDA names the node by that
    /// graph's handle, which must be alive), and `node` a node [`GraphBuilder::add_copy`] added
    /// to it; launches already enqueued copy what they did. The executable holds the new
    /// buffers, and still the old ones until it drops or is updated: its launches stay ordered
    /// with the uses of both, and they count towards its 12 buffers; the race detector replays
    /// both nodes' accesses.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for another graph than the one the executable was instantiated
    /// from (or one whose body capture has not ended), and for a node that is not a
    /// device-to-device memcpy node this crate added to it; otherwise as
    /// [`GraphBuilder::add_copy`]; CUDA's errors (the executable is then unchanged).
    pub fn set_copy<T: DeviceCopy>(
        &mut self,
        graph: &Graph,
        node: GraphNode,
        (to, to_range): (&impl GraphBuffer<Element = T>, impl RangeBounds<usize>),
        (from, from_range): (&impl GraphBuffer<Element = T>, impl RangeBounds<usize>),
    ) -> Result<()> {
        let planned = plan_copy(Growing::Graph(self.memory()), self.device(), (to, to_range), (from, from_range))?;
        self.set_planned(graph, node, planned)
    }

    /// Points memset node `node` ([`GraphBuilder::add_fill_bytes`]) at elements `range` of
    /// `buffer`, set to `byte`, from the next launch on
    /// ([`cudaGraphExecMemsetNodeSetParams`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html);
    /// see [`GraphExec::set_copy`]).
    ///
    /// # Errors
    /// As [`GraphExec::set_copy`], for a memset node.
    pub fn set_fill_bytes<T: DeviceCopy>(
        &mut self,
        graph: &Graph,
        node: GraphNode,
        buffer: &impl GraphBuffer<Element = T>,
        range: impl RangeBounds<usize>,
        byte: u8,
    ) -> Result<()> {
        let planned = plan_fill(Growing::Graph(self.memory()), self.device(), buffer, range, byte)?;
        self.set_planned(graph, node, planned)
    }

    /// Points a host-to-device memcpy node ([`GraphBuilder::add_copy_from_pinned`]) at other
    /// memory, from the next launch on (see [`GraphExec::set_copy`]).
    ///
    /// # Errors
    /// As [`GraphExec::set_copy`] and [`GraphBuilder::add_copy_from_pinned`].
    pub fn set_copy_from_pinned<T: DeviceCopy>(
        &mut self,
        graph: &Graph,
        node: GraphNode,
        to: (&impl GraphBuffer<Element = T>, impl RangeBounds<usize>),
        from: (&Arc<SharedPinned<T>>, impl RangeBounds<usize>),
    ) -> Result<()> {
        let planned = plan_pinned_copy(Growing::Graph(self.memory()), self.device(), to, from, true)?;
        self.set_planned(graph, node, planned)
    }

    /// Points a device-to-host memcpy node ([`GraphBuilder::add_copy_to_pinned`]) at other
    /// memory, from the next launch on (see [`GraphExec::set_copy`]).
    ///
    /// # Errors
    /// As [`GraphExec::set_copy_from_pinned`].
    pub fn set_copy_to_pinned<T: DeviceCopy>(
        &mut self,
        graph: &Graph,
        node: GraphNode,
        to: (&Arc<SharedPinned<T>>, impl RangeBounds<usize>),
        from: (&impl GraphBuffer<Element = T>, impl RangeBounds<usize>),
    ) -> Result<()> {
        let planned = plan_pinned_copy(Growing::Graph(self.memory()), self.device(), from, to, false)?;
        self.set_planned(graph, node, planned)
    }

    /// Changes node `node` to `planned`'s operation, once checked to be a memory node of the
    /// same kind in the graph this executable was made from; then holds its memory.
    fn set_planned(&mut self, graph: &Graph, node: GraphNode, planned: Planned) -> Result<()> {
        let Planned { memory, operation } = planned;
        let origin = self.origin(graph)?.and_then(|origin| origin.as_any().downcast_ref::<HeldMemory>());
        let known = origin.and_then(|origin| origin.nodes.iter().find(|(held, _)| *held == node));
        match known {
            Some((_, kind)) if *kind == operation.kind() => {}
            Some(_) => return Err(Error::GraphMisuse("the node does another kind of memory work")),
            None => {
                return Err(Error::GraphMisuse(
                    "only a memcpy or memset node this crate added to the graph the executable was made from changes its memory",
                ));
            }
        }
        let _current = self.device().make_current()?;
        // It touches no stream: no capture in progress may refuse it.
        uncapturable_call(|| {
            // SAFETY: a live executable borrowed exclusively (`&mut self`); a node of the graph
            // it was made from, which is alive and used by this thread only (`graph`, a `&Graph`
            // of a !Sync type, checked to be that graph), of this operation's kind (checked
            // above); the executable holds the operation's memory once the call succeeded.
            unsafe { operation.set_in(self.as_raw(), node.as_raw()) }
        })?;
        let accesses = CapturedAccesses::of_node(operation.node_name(), &operation.accesses());
        self.hold_memory(Arc::new(memory), accesses);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::ledger::model::Rng;

    /// A buffer as a graph holds it, with no GPU: only its identity and ordering state count.
    #[derive(Debug)]
    struct Held(Uses);

    impl HeldBuffer for Held {
        fn home(&self) -> Result<Option<BorrowedStream<'_>>> {
            Ok(None)
        }

        fn uses(&self) -> &Uses {
            &self.0
        }
    }

    const BYTES: usize = 256;

    fn buffer() -> Arc<dyn HeldBuffer> {
        Arc::new(Held(Uses::allocated(BYTES)))
    }

    fn span(bytes: Range<usize>, writes: bool) -> Span {
        Span { bytes, writes }
    }

    /// What a launch of `held` orders on `buffer`: its parts.
    fn parts(held: &HeldMemory, buffer: &Arc<dyn HeldBuffer>) -> Vec<Span> {
        let mut parts: Vec<Span> = held
            .buffers
            .iter()
            .filter(|(entry, _)| identity(entry) == identity(buffer))
            .map(|(_, span)| span.clone())
            .collect();
        parts.sort_by_key(|part| part.bytes.start);
        parts
    }

    #[test]
    fn parts_of_one_buffer_are_held_apart_and_merged_only_where_they_meet() {
        let (mut held, x) = (HeldMemory::default(), buffer());
        held.hold_buffer(Arc::clone(&x), span(0..4, false)).unwrap();
        held.hold_buffer(Arc::clone(&x), span(100..104, true)).unwrap();
        assert_eq!(parts(&held, &x), [span(0..4, false), span(100..104, true)], "a read and a write, apart");
        // A use of the bytes between conflicts with neither.
        assert!(!parts(&held, &x).iter().any(|part| part.conflicts(&span(50..60, true))));
        held.hold_buffer(Arc::clone(&x), span(2..6, false)).unwrap();
        held.hold_buffer(Arc::clone(&x), span(104..108, false)).unwrap();
        assert_eq!(
            parts(&held, &x),
            [span(0..6, false), span(100..108, true)],
            "overlapping and adjoining parts merge"
        );
        held.hold_buffer(Arc::clone(&x), span(6..100, false)).unwrap();
        assert_eq!(parts(&held, &x), [span(0..108, true)], "a part that meets both joins all three");
    }

    /// Random parts of a few buffers: at most 12 parts, the parts of one buffer never meet, and
    /// every part added is covered by a held part of its buffer that writes where it writes; a
    /// 13th buffer is refused and changes nothing.
    #[test]
    fn a_graph_holds_at_most_12_parts_each_covering_what_its_nodes_touch() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut below = |n: u64| rng.below(n);
        for round in 0..2_000 {
            let buffers: Vec<Arc<dyn HeldBuffer>> = (0..1 + below(12)).map(|_| buffer()).collect();
            let mut held = HeldMemory::default();
            let mut added: Vec<(usize, Span)> = Vec::new();
            for _ in 0..below(40) {
                let which = below(buffers.len() as u64) as usize;
                let start = below(BYTES as u64 - 1) as usize;
                let part = span(start..start + 1 + below((BYTES - start) as u64) as usize, below(2) == 0);
                held.hold_buffer(Arc::clone(&buffers[which]), part.clone()).unwrap();
                added.push((which, part));
                assert!(held.buffers.len() <= MAX_TOUCHED, "round {round}: {} parts", held.buffers.len());
                for (which, part) in &added {
                    let covered = parts(&held, &buffers[*which]).iter().any(|kept| {
                        kept.bytes.start <= part.bytes.start
                            && part.bytes.end <= kept.bytes.end
                            && (kept.writes || !part.writes)
                    });
                    assert!(covered, "round {round}: {part:?} of buffer {which} is not covered");
                }
                for buffer in &buffers {
                    let parts = parts(&held, buffer);
                    assert!(
                        parts.windows(2).all(|two| two[0].bytes.end < two[1].bytes.start),
                        "round {round}: {parts:?}"
                    );
                }
            }
            if buffers.len() == MAX_TOUCHED && (0..MAX_TOUCHED).all(|at| !parts(&held, &buffers[at]).is_empty()) {
                let before = held.buffers.len();
                assert!(matches!(held.hold_buffer(buffer(), span(0..1, true)), Err(Error::Size(_))));
                assert_eq!(held.buffers.len(), before, "round {round}: a refused buffer changed nothing");
            }
        }
    }
}
