//! Memcpy and memset nodes of graphs built node by node, over memory the graph holds: device
//! buffers shared as `Arc<DeviceBuffer>`, page-locked buffers as `Arc<Mutex<PinnedBuffer>>`
//! ([`cudaGraphAddMemcpyNode1D`, `cudaGraphAddMemsetNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
//!
//! The graph keeps a clone of each `Arc` that a node uses, and so do its clones and every
//! executable made from it: no launch can be enqueued after the memory is gone, whichever is
//! dropped first. Each launch of an executable is one use of that memory, ordered as a copy is:
//! the launch's stream waits for the earlier uses that the nodes conflict with, and the
//! launch's event is left behind for later uses, the buffers' frees and page-locked memory's
//! host access. A buffer whose last `Arc` an executable drops is thus freed on its home stream
//! after the launches that used it.
//!
//! A `Mutex<PinnedBuffer>` is the host's way in between launches (its guard gives
//! `as_mut_slice`, which waits for the launches' copies). The launch takes the lock for as long
//! as it orders and enqueues, with `try_lock`: a lock held elsewhere refuses the launch rather
//! than wait, so no launch blocks behind the host. A node keeps the address it copies to or
//! from, and each launch checks that the buffer in the mutex still has it: a buffer swapped in
//! under the lock refuses the launch, never lets a node write memory that was freed.

use super::ledger::{SharedEvent, Span, Ticket, UseEvent};
use super::page_locked::PageLockedMemory;
use super::page_locked::sealed::Token;
use super::uses::{Hold, MAX_TOUCHED, Touched, Uses, ordered_use};
use super::{DeviceBuffer, DeviceCopy, PinnedBuffer, checked_range, same_length};
use crate::call::race::{Access, AccessKind, CapturedAccesses};
use crate::conditional::{GraphBuilder, GraphNode, dependency_pointer};
use crate::device::same_device;
use crate::ffi::error::{Error, Result, check};
use crate::graph::held::GraphMemory;
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use crate::sys;
use std::any::Any;
use std::ffi::c_void;
use std::fmt;
use std::ops::{Range, RangeBounds};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

/// Why a launch or a node is refused while a page-locked buffer's lock is held.
const LOCKED: &str = "the Mutex<PinnedBuffer> a graph copies to or from is locked (a guard is alive, on this thread or another, or another launch that copies it is being enqueued): a graph is not launched, nor a node added, while the lock is held elsewhere";

/// Why a launch is refused after the buffer in a mutex was swapped.
const SWAPPED: &str =
    "the PinnedBuffer in a Mutex that a graph copies to or from is no longer the one its node was added with";

/// A device buffer a graph holds, its type erased.
trait HeldBuffer: Send + Sync + fmt::Debug {
    fn home(&self) -> Result<BorrowedStream<'_>>;
    fn uses(&self) -> &Uses;
}

impl<T: DeviceCopy, S: AsStream + Send + Sync + 'static> HeldBuffer for DeviceBuffer<T, S> {
    fn home(&self) -> Result<BorrowedStream<'_>> {
        DeviceBuffer::home(self)
    }

    fn uses(&self) -> &Uses {
        DeviceBuffer::uses(self)
    }
}

/// Page-locked memory a graph holds behind the lock the host takes, its type erased.
trait HeldPageLocked: Send + Sync + fmt::Debug {
    /// The memory, locked; [`Error::GraphMisuse`] while the lock is held elsewhere.
    fn lock(&self) -> Result<Box<dyn LockedPageLocked + '_>>;
}

/// Locked page-locked memory: where it is, and its copies in flight.
trait LockedPageLocked {
    /// Its address and length in elements.
    fn place(&self) -> (usize, usize);
    fn order_copy(&mut self, stream: &StreamRef, span: &Span) -> Result<Ticket>;
    fn copied(&mut self, stream: &StreamRef, span: Span, ticket: Ticket, recorded: &mut UseEvent<SharedEvent>);
    /// Never touched or given back again (a copy in flight was not noted).
    fn leak(&mut self);
}

impl<T: DeviceCopy> HeldPageLocked for Mutex<PinnedBuffer<T>> {
    fn lock(&self) -> Result<Box<dyn LockedPageLocked + '_>> {
        match self.try_lock() {
            Ok(guard) => Ok(Box::new(guard)),
            // A panic under the lock leaves plain bytes and a consistent record of copies
            // (every change to it is made by this crate, which does not unwind through it).
            Err(TryLockError::Poisoned(poisoned)) => Ok(Box::new(poisoned.into_inner())),
            Err(TryLockError::WouldBlock) => Err(Error::GraphMisuse(LOCKED)),
        }
    }
}

impl<T: DeviceCopy> LockedPageLocked for MutexGuard<'_, PinnedBuffer<T>> {
    fn place(&self) -> (usize, usize) {
        (self.address() as usize, self.len())
    }

    fn order_copy(&mut self, stream: &StreamRef, span: &Span) -> Result<Ticket> {
        self.page_locked(Token(())).order_copy(stream, span)
    }

    fn copied(&mut self, stream: &StreamRef, span: Span, ticket: Ticket, recorded: &mut UseEvent<SharedEvent>) {
        self.page_locked(Token(())).copied(stream, span, ticket, recorded);
    }

    fn leak(&mut self) {
        self.page_locked(Token(())).mark_leaked();
    }
}

/// The memory a graph's memcpy and memset nodes use (see the [module docs](self)): each buffer
/// once, with the bytes its nodes touch (merged), and each page-locked buffer with the place
/// its nodes were added at.
#[derive(Clone, Debug, Default)]
struct HeldMemory {
    buffers: Vec<(Arc<dyn HeldBuffer>, Span)>,
    page_locked: Vec<HeldPlace>,
}

/// Page-locked memory a graph holds, where its nodes found it, and the bytes they touch.
#[derive(Clone, Debug)]
struct HeldPlace {
    memory: Arc<dyn HeldPageLocked>,
    /// Its address and length in elements when the nodes were added.
    place: (usize, usize),
    span: Span,
}

/// The identity of the value behind an `Arc`.
fn identity<T: ?Sized>(arc: &Arc<T>) -> *const () {
    Arc::as_ptr(arc).cast::<()>()
}

impl HeldMemory {
    /// What `builder`'s graph holds so far.
    fn of(builder: &GraphBuilder<'_>) -> Result<HeldMemory> {
        match builder.memory() {
            None => Ok(HeldMemory::default()),
            Some(memory) => memory
                .as_any()
                .downcast_ref::<HeldMemory>()
                .cloned()
                .ok_or(Error::GraphMisuse("a graph's memory is of a kind this crate does not know")),
        }
    }

    /// Holds `buffer` for a node that touches `span` of it.
    fn hold_buffer(&mut self, buffer: Arc<dyn HeldBuffer>, span: Span) -> Result<()> {
        if let Some((_, held)) = self.buffers.iter_mut().find(|(held, _)| identity(held) == identity(&buffer)) {
            *held = held.merged(&span);
            return Ok(());
        }
        if self.buffers.len() == MAX_TOUCHED {
            return Err(Error::Size("a graph's memory nodes use at most 12 device buffers"));
        }
        self.buffers.push((buffer, span));
        Ok(())
    }

    /// Holds `memory`, at `place`, for a node that touches `span` of it: [`Error::GraphMisuse`]
    /// for a mutex the graph holds at another place already (another buffer was swapped in
    /// between two nodes: no launch could find both).
    fn hold_page_locked(&mut self, memory: Arc<dyn HeldPageLocked>, place: (usize, usize), span: Span) -> Result<()> {
        match self.page_locked.iter_mut().find(|held| identity(&held.memory) == identity(&memory)) {
            Some(held) if held.place != place => Err(Error::GraphMisuse(SWAPPED)),
            Some(held) => {
                held.span = held.span.merged(&span);
                Ok(())
            }
            None => {
                self.page_locked.push(HeldPlace { memory, place, span });
                Ok(())
            }
        }
    }
}

impl GraphMemory for HeldMemory {
    fn ordered_launch(&self, stream: &StreamRef, launch: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let homes = self.buffers.iter().map(|(buffer, _)| buffer.home()).collect::<Result<Vec<_>>>()?;
        let touched: Vec<Touched<'_>> = homes
            .iter()
            .zip(&self.buffers)
            .map(|(home, (buffer, span))| Touched { home, uses: buffer.uses(), span: span.clone() })
            .collect();
        let mut locked = Vec::with_capacity(self.page_locked.len());
        for held in &self.page_locked {
            let memory = held.memory.lock()?;
            if memory.place() != held.place {
                return Err(Error::GraphMisuse(SWAPPED));
            }
            locked.push((memory, &held.span));
        }
        ordered_use(stream, &touched, Hold::Throughout, |recorded| {
            let mut tickets = Vec::with_capacity(locked.len());
            for (memory, span) in &mut locked {
                tickets.push(memory.order_copy(stream, span)?);
            }
            launch()?;
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
            Ok(())
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A device buffer a node uses: its device, the address of element `range.start`, its bytes.
fn device_side<T: DeviceCopy, S: AsStream>(
    buffer: &DeviceBuffer<T, S>,
    range: &Range<usize>,
    writes: bool,
) -> (*mut c_void, Span) {
    (buffer.element(range.start), buffer.span(range.start, range.len(), writes))
}

impl GraphBuilder<'_> {
    /// Adds a node that sets the bytes of elements `range` of `buffer` to `byte` after the
    /// nodes `after`, at every launch of the graph (and every run of the body it is in)
    /// ([`cudaGraphAddMemsetNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// The graph holds `buffer` (a clone of the `Arc`); each launch is ordered with its other
    /// uses as a write of those elements (see [`GraphExec::launch`](crate::GraphExec::launch)).
    ///
    /// # Errors
    /// [`Error::Size`] for an empty range or one outside the buffer, and for a 13th device
    /// buffer in one graph; [`Error::DeviceMismatch`] for a buffer of another device;
    /// [`Error::GraphMisuse`] for a node of another graph or body in `after`, or while a capture
    /// leaked with `mem::forget` writes into this level; [`Error::InsideHostFn`]; CUDA's errors.
    pub fn add_fill_bytes<T: DeviceCopy, S: AsStream + Send + Sync + 'static>(
        &mut self,
        buffer: &Arc<DeviceBuffer<T, S>>,
        range: impl RangeBounds<usize>,
        byte: u8,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        same_device("a graph's memset node uses a buffer of the graph's device", self.device(), buffer.device())?;
        let range = checked_range(&range, buffer.len())?;
        let (address, span) = device_side(buffer, &range, true);
        let bytes = span.bytes.len();
        let mut memory = HeldMemory::of(self)?;
        memory.hold_buffer(Arc::clone(buffer) as Arc<dyn HeldBuffer>, span)?;
        let access = Access::bytes(address as u64, bytes as u64, AccessKind::Write);
        self.add_memory_node(after, memory, "cudaGraphAddMemsetNode", &[access], |graph, dependencies| {
            let params = sys::cudaMemsetParams {
                dst: address,
                pitch: 0,
                value: u32::from(byte),
                elementSize: 1,
                width: bytes,
                height: 1,
            };
            let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
            // SAFETY: this level's live graph, used by nothing else meanwhile (the builder's
            // exclusive borrow); `dependencies` are nodes of it, checked by level; `bytes`
            // bytes of a live allocation of the graph's device, which the graph holds for as
            // long as a launch may run the node; a valid out-pointer.
            let code = unsafe {
                sys::cudaGraphAddMemsetNode(
                    &mut node,
                    graph,
                    dependency_pointer(dependencies),
                    dependencies.len(),
                    &params,
                )
            };
            check(code, "cudaGraphAddMemsetNode")?;
            Ok(node)
        })
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
    pub fn add_copy<T: DeviceCopy, S: AsStream + Send + Sync + 'static, R: AsStream + Send + Sync + 'static>(
        &mut self,
        to: &Arc<DeviceBuffer<T, S>>,
        to_range: impl RangeBounds<usize>,
        from: &Arc<DeviceBuffer<T, R>>,
        from_range: impl RangeBounds<usize>,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        let device = self.device();
        same_device("a graph's memcpy node copies between buffers of the graph's device", device, to.device())?;
        same_device("a graph's memcpy node copies between buffers of the graph's device", device, from.device())?;
        let (to_range, from_range) = (checked_range(&to_range, to.len())?, checked_range(&from_range, from.len())?);
        same_length(to_range.len(), from_range.len())?;
        if identity(to) == identity(from) && to_range.start < from_range.end && from_range.start < to_range.end {
            return Err(Error::Size("the two sides of a copy within one buffer overlap"));
        }
        let (destination, written) = device_side(to, &to_range, true);
        let (source, read) = device_side(from, &from_range, false);
        let bytes = written.bytes.len();
        let mut memory = HeldMemory::of(self)?;
        memory.hold_buffer(Arc::clone(to) as Arc<dyn HeldBuffer>, written)?;
        memory.hold_buffer(Arc::clone(from) as Arc<dyn HeldBuffer>, read)?;
        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice;
        self.add_copy_node(after, memory, destination, source, bytes, kind)
    }

    /// Adds a node that copies elements `from_range` of the page-locked buffer in `from` into
    /// elements `to_range` of `to`, after the nodes `after`, at every launch of the graph
    /// ([`cudaGraphAddMemcpyNode1D`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)):
    /// a host-to-device copy, asynchronous. The graph holds both; each launch is ordered with
    /// the buffer's other uses as a write of `to_range`, and with the page-locked buffer's
    /// copies in flight as a read of `from_range`, which its host access then waits for (lock
    /// the mutex, then [`PinnedBuffer::as_mut_slice`]). A launch is refused while the mutex is
    /// locked, or once the buffer in it is another one (see the
    /// [module docs](crate::memory#graphs)).
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] while the mutex is locked; otherwise as
    /// [`GraphBuilder::add_copy`].
    pub fn add_copy_from_pinned<T: DeviceCopy, S: AsStream + Send + Sync + 'static>(
        &mut self,
        to: &Arc<DeviceBuffer<T, S>>,
        to_range: impl RangeBounds<usize>,
        from: &Arc<Mutex<PinnedBuffer<T>>>,
        from_range: impl RangeBounds<usize>,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        self.add_pinned_copy(to, to_range, from, from_range, after, true)
    }

    /// Adds a node that copies elements `from_range` of `from` into elements `to_range` of the
    /// page-locked buffer in `to`: a device-to-host copy, as
    /// [`GraphBuilder::add_copy_from_pinned`] with the sides swapped. Each launch is ordered as
    /// a read of `from_range`, and as a write of the page-locked elements, whose host access
    /// waits for it.
    ///
    /// # Errors
    /// As [`GraphBuilder::add_copy_from_pinned`].
    pub fn add_copy_to_pinned<T: DeviceCopy, S: AsStream + Send + Sync + 'static>(
        &mut self,
        to: &Arc<Mutex<PinnedBuffer<T>>>,
        to_range: impl RangeBounds<usize>,
        from: &Arc<DeviceBuffer<T, S>>,
        from_range: impl RangeBounds<usize>,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        self.add_pinned_copy(from, from_range, to, to_range, after, false)
    }

    /// A copy between elements `device_range` of `buffer` and `pinned_range` of `pinned`, into
    /// the device (`into_device`) or out of it.
    fn add_pinned_copy<T: DeviceCopy, S: AsStream + Send + Sync + 'static>(
        &mut self,
        buffer: &Arc<DeviceBuffer<T, S>>,
        device_range: impl RangeBounds<usize>,
        pinned: &Arc<Mutex<PinnedBuffer<T>>>,
        pinned_range: impl RangeBounds<usize>,
        after: &[GraphNode],
        into_device: bool,
    ) -> Result<GraphNode> {
        same_device("a graph's memcpy node uses a buffer of the graph's device", self.device(), buffer.device())?;
        let device_range = checked_range(&device_range, buffer.len())?;
        let place = HeldPageLocked::lock(&**pinned)?.place();
        let pinned_range = checked_range(&pinned_range, place.1)?;
        same_length(device_range.len(), pinned_range.len())?;
        let host_address = (place.0 + pinned_range.start * size_of::<T>()) as *mut c_void;
        let host = Span {
            bytes: pinned_range.start * size_of::<T>()..pinned_range.end * size_of::<T>(),
            writes: !into_device,
        };
        let (device_address, device_span) = device_side(buffer, &device_range, into_device);
        let bytes = device_span.bytes.len();
        let mut memory = HeldMemory::of(self)?;
        memory.hold_buffer(Arc::clone(buffer) as Arc<dyn HeldBuffer>, device_span)?;
        memory.hold_page_locked(Arc::clone(pinned) as Arc<dyn HeldPageLocked>, place, host)?;
        let (to, from, kind) = if into_device {
            (device_address, host_address.cast_const(), sys::cudaMemcpyKind::cudaMemcpyHostToDevice)
        } else {
            (host_address, device_address.cast_const(), sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)
        };
        self.add_copy_node(after, memory, to, from, bytes, kind)
    }

    /// A memcpy node of `bytes` from `from` to `to`, holding `memory`.
    fn add_copy_node(
        &mut self,
        after: &[GraphNode],
        memory: HeldMemory,
        to: *mut c_void,
        from: *const c_void,
        bytes: usize,
        kind: sys::cudaMemcpyKind,
    ) -> Result<GraphNode> {
        let accesses = [
            Access::bytes(from as u64, bytes as u64, AccessKind::Read),
            Access::bytes(to as u64, bytes as u64, AccessKind::Write),
        ];
        self.add_memory_node(after, memory, "cudaGraphAddMemcpyNode1D", &accesses, |graph, dependencies| {
            let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
            // SAFETY: this level's live graph, used by nothing else meanwhile (the builder's
            // exclusive borrow); `dependencies` are nodes of it, checked by level; `bytes`
            // bytes at both addresses, of the kinds `kind` names. Adding the node reads no
            // memory; when a launch runs it, a device buffer is one the graph holds, and
            // page-locked memory is the buffer its mutex holds then (each launch checks the
            // address under the lock, which it keeps until the copy is noted, and that buffer's
            // drop waits for the noted copies); a valid out-pointer.
            let code = unsafe {
                sys::cudaGraphAddMemcpyNode1D(
                    &mut node,
                    graph,
                    dependency_pointer(dependencies),
                    dependencies.len(),
                    to,
                    from,
                    bytes,
                    kind,
                )
            };
            check(code, "cudaGraphAddMemcpyNode1D")?;
            Ok(node)
        })
    }

    /// Adds the node `add` makes, and then has the graph hold `memory` (what it held, and what
    /// the node uses) and replay `accesses` to the race detector at each launch.
    fn add_memory_node(
        &mut self,
        after: &[GraphNode],
        memory: HeldMemory,
        operation: &str,
        accesses: &[Access],
        add: impl FnOnce(sys::cudaGraph_t, &[sys::cudaGraphNode_t]) -> Result<sys::cudaGraphNode_t>,
    ) -> Result<GraphNode> {
        let node = self.add_node_with(after, add)?;
        self.hold_memory(Arc::new(memory));
        self.add_race_accesses(CapturedAccesses::of_node(operation, accesses));
        Ok(node)
    }
}
