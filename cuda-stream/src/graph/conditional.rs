//! Graphs built node by node, and conditional nodes: if, if/else, while and switch, whose
//! bodies run or repeat on the GPU as device code decides, with no trip to the host
//! ([conditional graph nodes](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#conditional-graph-nodes);
//! [graph management](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html):
//! `cudaGraphConditionalHandleCreate`, `cudaGraphAddNode` with a `cudaConditionalNodeParams`;
//! CUDA 12.3 or newer for if and while, 12.8 for if/else and switch).
//!
//! ```no_run
//! use cuda_stream::{Device, DeviceBuffer, Graph, LaunchConfig, Stream, StreamOptions, capture};
//! use cuda_stream::ConditionHandle;
//!
//! cuda_stream::kernel! {
//!     /// Decrements `*counter` and keeps the loop going while it is above zero:
//!     /// `cudaGraphSetConditional(handle, --*counter > 0)`.
//!     static COUNTDOWN = fn countdown(handle: ConditionHandle, counter: *mut u32);
//! }
//!
//! # fn main() -> cuda_stream::Result<()> {
//! let device = Device::new(0)?;
//! let stream = Stream::new(device, StreamOptions::non_blocking())?;
//! let mut counter = DeviceBuffer::from_slice(&stream, &[10u32])?;
//! let mut graph = Graph::new(device)?;
//! let mut root = graph.builder();
//! // A condition that is 1 at the start of every launch: the body runs at least once.
//! let keep_going = root.condition(Some(1))?;
//! let (_loop, mut body) = root.add_while(&keep_going, &[])?;
//! // The body, by capture of a stream (or node by node: `body.add_kernel`).
//! let filling = body.capture(&stream, capture::ThreadLocal)?;
//! // SAFETY: `counter` lives on the stream's device until the graph's launches are done.
//! unsafe {
//!     COUNTDOWN.launch(&stream, &LaunchConfig::new(1, 1), (keep_going.handle(), counter.as_mut_ptr()))?
//! };
//! filling.end()?;
//! let exec = graph.instantiate()?;
//! exec.launch(&stream)?; // the body runs 10 times in one launch
//! assert_eq!(counter.to_vec()?, vec![0]);
//! # Ok(()) }
//! ```
//!
//! # The pieces
//! * [`Graph::new`] makes an empty graph, [`Graph::builder`] a [`GraphBuilder`] of it: a view
//!   that adds nodes (empty nodes, dependencies, conditional nodes; kernel nodes with
//!   [`GraphBuilder::add_kernel`]; memcpy and memset nodes over memory the graph holds,
//!   [`GraphBuilder::add_copy`], [`GraphBuilder::add_fill_bytes`] and the page-locked copies;
//!   host functions, [`GraphBuilder::add_host_fn`]; raw nodes adopted under a contract,
//!   [`GraphBuilder::adopt_node`]) and fills a level by capture ([`GraphBuilder::capture`]).
//! * A [`GraphCondition`] ([`GraphBuilder::condition`]) is CUDA's conditional handle: device code
//!   sets its value (`cudaGraphSetConditional(handle, value)`, from
//!   `cuda_device_runtime_api.h`, no `-rdc` needed) through the [`ConditionHandle`] it passes
//!   to kernels, a plain `u64`. With a default (`Some(value)`, CUDA's
//!   `cudaGraphCondAssignDefault`) the value is reset to it at the start of every launch;
//!   without one, CUDA leaves it undefined there: set it before the node reads it.
//! * A conditional node's bodies are graphs that CUDA creates with the node and owns; each is
//!   handed out as a `GraphBuilder` that borrows the builder it came from mutably, so it
//!   cannot outlive the graph, and the graph cannot be instantiated, captured into, moved or
//!   dropped while one is alive. An if runs its body when the value is nonzero; an if/else
//!   its first body then, else its second; a while repeats its body while the value is
//!   nonzero (checked before each run: set it in a node before the while, or give the
//!   condition a default of 1 for a do-while); a switch runs body `n` for the value `n`, and
//!   none for a value of at least its number of cases.
//!
//! # What CUDA allows in a body, and other limits
//! * Bodies hold kernel, empty, memset, memcpy, child-graph and conditional nodes only, all
//!   of one context (NVIDIA's `cudaConditionalNodeParams`); no host functions, event records
//!   or waits, memory allocation or free nodes. Kernels in a body must not use dynamic
//!   parallelism or launch graphs from the device. CUDA refuses the rest when the node is
//!   captured or added, or at instantiation.
//! * A graph with conditional nodes cannot be cloned ([`Graph::try_clone`] refuses it) or used
//!   as a child graph (this crate offers none), and has **one executable at a time**: [`Graph::instantiate`] refuses a
//!   second while the first lives ([`Error::GraphMisuse`]). No instantiation flag is needed.
//! * A condition must be used by exactly one conditional node, of the graph it was made in or
//!   of a body inside it; one that no node uses makes instantiation fail
//!   ([`GraphInstantiateResult::CONDITIONAL_HANDLE_UNUSED`](crate::GraphInstantiateResult::CONDITIONAL_HANDLE_UNUSED)).
//! * Two threads setting one condition at once is undefined behaviour in CUDA's words (device
//!   code: the kernel's contract, see [`GraphBuilder::add_kernel`]).
//!
//! # What safe code cannot do
//! * **Use a body after its graph is gone, or destroy one**: bodies belong to their node (CUDA
//!   destroys them with the graph); a body's builder borrows its parent's, up to the graph,
//!   and nothing here destroys a body or removes a node.
//! * **Use a node or a condition of another graph**: nodes and conditions carry the id of the
//!   level (graph or body) they were made in, unique in the process and never reused, so a
//!   node of another level, or of a graph destroyed since whose handle CUDA may have reused,
//!   is refused before CUDA sees it. A condition is refused by a node outside the graph or body
//!   that made it, and by a second node.
//! * **Leave CUDA capturing into a graph it no longer has**: a [`BuilderCapture`] borrows the
//!   builder it fills. If it is leaked (`mem::forget`), its level stays listed as capturing for
//!   good: the graph is never instantiated, updated from or captured into again, that level
//!   gets no node, and the graph is leaked, not destroyed, when it drops. A capture that fails
//!   to end leaks the graph too (NVIDIA does not say what a failed capture leaves of a graph
//!   it was capturing into); one dropped before `end` leaves its body incomplete. Either way
//!   the graph is no longer instantiated ([`Error::GraphMisuse`]).
//! * **Mutate one graph from two threads**: builders are neither `Send` nor `Sync` (NVIDIA's
//!   graph objects are not thread-safe). The bodies of one node are distinct CUDA graphs, so
//!   one may be captured (by work that any thread enqueues on the capturing stream) while this
//!   thread adds nodes to another, as NVIDIA's rule for distinct graph objects allows.
//!
//! Every CUDA call of a builder runs with the device's primary context current and in the
//! Relaxed capture mode ([`with_thread_mode`](super::capture::with_thread_mode)): none touches a
//! stream, so no capture in progress (this thread's, filling a sibling body, or another
//! thread's Global one) refuses it or is invalidated by it.

use super::capture::{Capture, Ended, Target};
use super::{Graph, Tree, leaves_of, level_id};
use crate::call::capture_mode::{CaptureMode, Relaxed, with_thread_mode};
use crate::call::race;
use crate::device::{Device, same_device};
use crate::ffi::error::{Error, Result, check};
use crate::stream::StreamRef;
use crate::stream::capture_node::dependency_pointer;
use crate::sys;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

/// A node of a graph or body built by a [`GraphBuilder`] (`cudaGraphNode_t`), used to order
/// later nodes after it. A plain value: it names its node and the level it was made in, and is
/// refused by every other level.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct GraphNode {
    raw: usize,
    level: u64,
}

impl GraphNode {
    /// The raw handle (valid while its graph lives).
    pub fn as_raw(self) -> sys::cudaGraphNode_t {
        self.raw as sys::cudaGraphNode_t
    }
}

/// The value device code passes to `cudaGraphSetConditional` (`cudaGraphConditionalHandle`, a
/// 64-bit integer): a kernel argument like any other ([`GraphCondition::handle`]). Passing it is
/// safe; what a kernel does with it is that kernel's launch contract: CUDA sets the value of
/// the launch of the graph that runs the kernel, so call `cudaGraphSetConditional` only from
/// kernels of the graph that holds the handle's node (or of its bodies).
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConditionHandle(sys::cudaGraphConditionalHandle);

impl ConditionHandle {
    /// The raw handle.
    pub fn as_raw(self) -> sys::cudaGraphConditionalHandle {
        self.0
    }
}

/// A conditional handle of a graph ([`GraphBuilder::condition`],
/// [`cudaGraphConditionalHandleCreate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)):
/// the value a conditional node reads, set by device code through [`GraphCondition::handle`]. CUDA
/// has no call to destroy one; the graph owns it. Exactly one conditional node, of the graph or
/// body that made it or of a body inside that one, uses it.
#[derive(Debug)]
#[must_use = "a condition that no conditional node uses makes the graph's instantiation fail"]
pub struct GraphCondition {
    handle: ConditionHandle,
    level: u64,
    default: Option<u32>,
    used: Cell<bool>,
}

impl GraphCondition {
    /// The value kernels take to set the condition from device code.
    pub fn handle(&self) -> ConditionHandle {
        self.handle
    }

    /// The value the condition is reset to at the start of every launch, if it has one.
    pub fn default_value(&self) -> Option<u32> {
        self.default
    }

    /// Whether a conditional node uses it.
    pub fn is_used(&self) -> bool {
        self.used.get()
    }
}

/// Adds nodes to a graph ([`Graph::builder`]) or to a body of one of its conditional nodes.
/// Borrows the graph (or the builder it came from) mutably: see the [module docs](self) for
/// what that guarantees. Neither `Send` nor `Sync`.
#[derive(Debug)]
pub struct GraphBuilder<'g> {
    raw: sys::cudaGraph_t,
    device: Device,
    /// The level ids from the graph's own down to this one's (see [`level_id`]).
    path: Vec<u64>,
    tree: &'g Tree,
    _graph: PhantomData<&'g mut Graph>,
}

impl Graph {
    /// A builder that adds nodes to this graph, conditional nodes among them (see
    /// [`GraphBuilder`]). It borrows the graph mutably: the graph is not instantiated, moved or
    /// dropped while the builder, or the builder of one of its bodies, is alive.
    pub fn builder(&mut self) -> GraphBuilder<'_> {
        let (raw, device) = (self.as_raw(), self.device());
        let tree = self.tree();
        GraphBuilder { raw, device, path: vec![tree.level], tree, _graph: PhantomData }
    }
}

impl<'g> GraphBuilder<'g> {
    /// The device of the graph.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The raw handle of this level's graph (the graph's own, or a body's that its node owns:
    /// never to be destroyed).
    pub fn as_raw(&self) -> sys::cudaGraph_t {
        self.raw
    }

    /// Whether this builder fills a conditional node's body (not the graph itself).
    pub fn is_body(&self) -> bool {
        self.path.len() > 1
    }

    fn level(&self) -> u64 {
        self.path[self.path.len() - 1]
    }

    /// The memory the graph's memory nodes use so far (see [`held`](super::held)).
    pub(crate) fn memory(&self) -> Option<std::sync::Arc<dyn super::held::GraphMemory>> {
        self.tree.memory.borrow().clone()
    }

    /// Has the graph hold `memory` instead of what it held (`memory` holds that too).
    pub(crate) fn hold_memory(&self, memory: std::sync::Arc<dyn super::held::GraphMemory>) {
        *self.tree.memory.borrow_mut() = Some(memory);
    }

    /// Adds accesses declared to the race detector by a node added here.
    pub(crate) fn add_race_accesses(&self, accesses: Option<std::sync::Arc<race::CapturedAccesses>>) {
        self.tree.add_race_accesses(accesses);
    }

    /// [`Error::GraphMisuse`] while a capture into this level is open (one leaked with
    /// `mem::forget`: a live one borrows the builder).
    pub(super) fn refuse_capturing(&self) -> Result<()> {
        if self.tree.capturing.borrow().contains(&self.level()) {
            return Err(Error::GraphMisuse(
                "a capture into this graph or body is still open (its guard was leaked with mem::forget)",
            ));
        }
        Ok(())
    }

    /// The raw handles of `after`, all nodes of this level.
    fn dependencies(&self, after: &[GraphNode]) -> Result<Vec<sys::cudaGraphNode_t>> {
        if after.iter().any(|node| node.level != self.level()) {
            return Err(Error::GraphMisuse(
                "a node depends only on nodes of its own graph or body: this one is of another (or of a graph since destroyed)",
            ));
        }
        Ok(after.iter().map(|node| node.as_raw()).collect())
    }

    /// Adds a node to this level after `after`: `add` gets the level's graph and the
    /// dependencies' handles, is called with the device current and in the Relaxed capture
    /// mode, and returns the new node.
    pub(crate) fn add_node_with(
        &mut self,
        after: &[GraphNode],
        add: impl FnOnce(sys::cudaGraph_t, &[sys::cudaGraphNode_t]) -> Result<sys::cudaGraphNode_t>,
    ) -> Result<GraphNode> {
        self.refuse_capturing()?;
        let dependencies = self.dependencies(after)?;
        let _current = self.device.make_current()?;
        let node = with_thread_mode(Relaxed, || add(self.raw, &dependencies))??;
        Ok(GraphNode { raw: node as usize, level: self.level() })
    }

    /// The nodes of this level that no other node depends on (after a capture into it: the
    /// captured work's last nodes), to order new nodes after everything so far
    /// ([`cudaGraphGetNodes`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html),
    /// `cudaGraphNodeGetDependentNodes`).
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] while a capture leaked with `mem::forget` writes into this level;
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn leaves(&self) -> Result<Vec<GraphNode>> {
        self.refuse_capturing()?;
        let _current = self.device.make_current()?;
        // SAFETY: this level's live graph, which nothing else uses meanwhile (the builder's
        // exclusive borrow; no capture into it is open).
        let leaves = unsafe { leaves_of(self.raw)? };
        Ok(leaves.into_iter().map(|raw| GraphNode { raw: raw as usize, level: self.level() }).collect())
    }

    /// Adds an empty node after `after`: a join point that later nodes can depend on
    /// ([`cudaGraphAddEmptyNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for a node of another graph or body in `after`, or while a
    /// capture leaked with `mem::forget` writes into this level; [`Error::InsideHostFn`];
    /// CUDA's errors (`cudaErrorInvalidValue` for a node listed twice).
    pub fn add_empty_node(&mut self, after: &[GraphNode]) -> Result<GraphNode> {
        self.add_node_with(after, |graph, dependencies| {
            let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
            // SAFETY: this level's live graph, used by nothing else meanwhile (the builder's
            // exclusive borrow); `dependencies` are nodes of it, checked by level; a valid
            // out-pointer.
            let code = unsafe {
                sys::cudaGraphAddEmptyNode(&mut node, graph, dependency_pointer(dependencies), dependencies.len())
            };
            check(code, "cudaGraphAddEmptyNode")?;
            Ok(node)
        })
    }

    /// Makes `to` depend on `from`, two nodes of this level
    /// ([`cudaGraphAddDependencies`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// A cycle is CUDA's to refuse, at instantiation.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for a node of another graph or body, or while a capture leaked
    /// with `mem::forget` writes into this level; [`Error::InsideHostFn`]; CUDA's errors
    /// (`cudaErrorInvalidValue` for an edge that exists already).
    pub fn add_dependency(&mut self, from: GraphNode, to: GraphNode) -> Result<()> {
        self.refuse_capturing()?;
        let pair = self.dependencies(&[from, to])?;
        let _current = self.device.make_current()?;
        let code = with_thread_mode(Relaxed, || {
            // SAFETY: this level's live graph, used by nothing else meanwhile; two of its
            // nodes (checked by level); no edge data means a default edge (CUDA 13's
            // argument).
            #[cfg(cudart_13)]
            let code = unsafe { sys::cudaGraphAddDependencies(self.raw, &pair[0], &pair[1], std::ptr::null(), 1) };
            // SAFETY: as above, with CUDA 12's signature.
            #[cfg(not(cudart_13))]
            let code = unsafe { sys::cudaGraphAddDependencies(self.raw, &pair[0], &pair[1], 1) };
            code
        })?;
        check(code, "cudaGraphAddDependencies")
    }

    /// A new condition of this graph or body, for one conditional node here or in a body
    /// inside this one
    /// ([`cudaGraphConditionalHandleCreate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// With `Some(value)`, CUDA resets it to `value` at the start of every launch
    /// (`cudaGraphCondAssignDefault`); with `None`, its value is undefined at the start of a
    /// launch (CUDA's words): device code must set it before a node reads it.
    ///
    /// # Errors
    /// [`Error::InsideHostFn`]; CUDA's errors (`cudaErrorNotSupported` before CUDA 12.3).
    pub fn condition(&mut self, default: Option<u32>) -> Result<GraphCondition> {
        let _current = self.device.make_current()?;
        let (value, flags) = match default {
            Some(value) => (value, sys::cudaGraphConditionalHandleFlags::cudaGraphCondAssignDefault.0),
            None => (0, 0),
        };
        let mut handle: sys::cudaGraphConditionalHandle = 0;
        // SAFETY: this level's live graph, used by nothing else meanwhile (the builder's
        // exclusive borrow); a valid out-pointer; the flags are CUDA's.
        let code = with_thread_mode(Relaxed, || unsafe {
            sys::cudaGraphConditionalHandleCreate(&mut handle, self.raw, value, flags)
        })?;
        check(code, "cudaGraphConditionalHandleCreate")?;
        Ok(GraphCondition { handle: ConditionHandle(handle), level: self.level(), default, used: Cell::new(false) })
    }

    /// Adds an if node after `after`: its body runs once when `condition` is nonzero
    /// ([`cudaGraphAddNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)
    /// with `cudaGraphCondTypeIf`, size 1; CUDA 12.3 or newer). Returns the node and a builder
    /// of its body.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for a condition used already, or of another graph (or of a body
    /// that does not contain this one), for a node of another graph or body in `after`, or
    /// while a capture leaked with `mem::forget` writes into this level; the condition is then
    /// still unused. [`Error::InsideHostFn`]; CUDA's errors.
    pub fn add_if(&mut self, condition: &GraphCondition, after: &[GraphNode]) -> Result<(GraphNode, GraphBuilder<'_>)> {
        let (node, bodies) =
            self.add_conditional(condition, sys::cudaGraphConditionalNodeType::cudaGraphCondTypeIf, 1, after)?;
        Ok((node, self.body(bodies[0])))
    }

    /// Adds an if/else node after `after`: its first body runs once when `condition` is
    /// nonzero, its second once when it is zero (`cudaGraphCondTypeIf`, size 2; CUDA 12.8 or
    /// newer, driver included). Returns the node and builders of both bodies.
    ///
    /// # Errors
    /// As [`GraphBuilder::add_if`]; an older driver refuses with CUDA's error.
    pub fn add_if_else(
        &mut self,
        condition: &GraphCondition,
        after: &[GraphNode],
    ) -> Result<(GraphNode, GraphBuilder<'_>, GraphBuilder<'_>)> {
        let (node, bodies) =
            self.add_conditional(condition, sys::cudaGraphConditionalNodeType::cudaGraphCondTypeIf, 2, after)?;
        Ok((node, self.body(bodies[0]), self.body(bodies[1])))
    }

    /// Adds a while node after `after`: its body runs again and again while `condition` is
    /// nonzero, checked before each run (`cudaGraphCondTypeWhile`; CUDA 12.3 or newer). Set it
    /// in a node before this one, or give the condition a default of 1 for a do-while; device
    /// code in the body clears it to stop. Returns the node and a builder of its body.
    ///
    /// # Errors
    /// As [`GraphBuilder::add_if`].
    pub fn add_while(
        &mut self,
        condition: &GraphCondition,
        after: &[GraphNode],
    ) -> Result<(GraphNode, GraphBuilder<'_>)> {
        let (node, bodies) =
            self.add_conditional(condition, sys::cudaGraphConditionalNodeType::cudaGraphCondTypeWhile, 1, after)?;
        Ok((node, self.body(bodies[0])))
    }

    /// Adds a switch node of `cases` bodies after `after`: body `n` runs once when
    /// `condition` is `n`; none runs for a value of `cases` or more
    /// (`cudaGraphCondTypeSwitch`; CUDA 12.8 or newer, driver included). Returns the node and
    /// builders of the bodies, in case order.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for no case; otherwise as [`GraphBuilder::add_if`] and
    /// [`GraphBuilder::add_if_else`].
    pub fn add_switch(
        &mut self,
        condition: &GraphCondition,
        cases: u32,
        after: &[GraphNode],
    ) -> Result<(GraphNode, Vec<GraphBuilder<'_>>)> {
        if cases == 0 {
            return Err(Error::GraphMisuse("a switch node needs at least one case"));
        }
        let (node, bodies) =
            self.add_conditional(condition, sys::cudaGraphConditionalNodeType::cudaGraphCondTypeSwitch, cases, after)?;
        let bodies = bodies.into_iter().map(|body| self.body(body)).collect();
        Ok((node, bodies))
    }

    /// A builder of `raw`, a body of a conditional node of this level: a level of its own.
    fn body(&self, raw: sys::cudaGraph_t) -> GraphBuilder<'_> {
        let mut path = self.path.clone();
        path.push(level_id());
        GraphBuilder { raw, device: self.device, path, tree: self.tree, _graph: PhantomData }
    }

    /// Adds a conditional node of `kind` with `size` bodies; returns it and its bodies.
    fn add_conditional(
        &mut self,
        condition: &GraphCondition,
        kind: sys::cudaGraphConditionalNodeType,
        size: u32,
        after: &[GraphNode],
    ) -> Result<(GraphNode, Vec<sys::cudaGraph_t>)> {
        if !self.path.contains(&condition.level) {
            return Err(Error::GraphMisuse(
                "a conditional node takes a condition of its own graph or body, or of one that contains it: this one is of another",
            ));
        }
        if condition.used.get() {
            return Err(Error::GraphMisuse("a condition belongs to one conditional node, and this one has its node"));
        }
        let mut bodies: *mut sys::cudaGraph_t = std::ptr::null_mut();
        let node = self.add_node_with(after, |graph, dependencies| {
            let mut params = sys::cudaGraphNodeParams {
                type_: sys::cudaGraphNodeType::cudaGraphNodeTypeConditional,
                // CUDA requires the unused bytes zeroed (`Default` zeroes the union).
                ..Default::default()
            };
            params.__bindgen_anon_1.conditional = sys::cudaConditionalNodeParams {
                handle: condition.handle.0,
                type_: kind,
                size,
                phGraph_out: std::ptr::null_mut(),
            };
            let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
            // SAFETY: this level's live graph, used by nothing else meanwhile (the builder's
            // exclusive borrow); `dependencies` are nodes of it, checked by level; `params` a
            // conditional node's parameters, all else zero, with a handle of this graph or of
            // one containing it (checked by level); no edge data means default edges (CUDA 13's
            // argument); a valid out-pointer.
            #[cfg(cudart_13)]
            let code = unsafe {
                sys::cudaGraphAddNode(
                    &mut node,
                    graph,
                    dependency_pointer(dependencies),
                    std::ptr::null(),
                    dependencies.len(),
                    &mut params,
                )
            };
            // SAFETY: as above, with CUDA 12's signature.
            #[cfg(not(cudart_13))]
            let code = unsafe {
                sys::cudaGraphAddNode(
                    &mut node,
                    graph,
                    dependency_pointer(dependencies),
                    dependencies.len(),
                    &mut params,
                )
            };
            check(code, "cudaGraphAddNode")?;
            // SAFETY: the union member written above, which CUDA filled in.
            bodies = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
            Ok(node)
        })?;
        condition.used.set(true);
        self.tree.conditional.set(true);
        if bodies.is_null() {
            return Err(Error::GraphMisuse("CUDA added the conditional node but returned no body"));
        }
        // SAFETY: CUDA's array of `size` body graphs, "valid for the lifetime of the
        // conditional node" (cudaConditionalNodeParams): copied out at once.
        Ok((node, unsafe { std::slice::from_raw_parts(bodies, size as usize) }.to_vec()))
    }

    /// Starts capturing `stream`'s work into this graph or body, after the nodes already in it
    /// ([`cudaStreamBeginCaptureToGraph`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html),
    /// CUDA 12.3 or newer): the way to fill a conditional body with kernels launched as usual
    /// (through [`Kernel::launch`](crate::Kernel::launch), or C++ launchers taking the stream).
    /// Work enqueued on `stream` (and on streams that join the capture) until
    /// [`BuilderCapture::end`] becomes nodes of this level; everything a capture refuses is
    /// refused here too (see [`capture`](super::capture)), and a body refuses what CUDA does
    /// not allow in one (see the [module docs](self)).
    ///
    /// The capture borrows this builder mutably until it ends. Dropping it before
    /// [`BuilderCapture::end`] ends the capture but leaves the body incomplete: the graph can
    /// no longer be instantiated. A capture that fails to end leaves the graph leaked and not
    /// instantiable; one leaked with `mem::forget` leaves it so for good.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device; [`Error::GraphMisuse`] while a
    /// capture leaked with `mem::forget` writes into this level; the errors of
    /// [`StreamRef::begin_capture`].
    pub fn capture<'a, M: CaptureMode>(&'a mut self, stream: &'a StreamRef, _mode: M) -> Result<BuilderCapture<'a, M>> {
        same_device("a stream captures into a graph of its own device", self.device, stream.device())?;
        self.refuse_capturing()?;
        // The target's contract: the graph lives (the builder borrows it) and nothing else
        // uses it until CUDA's capture has ended: this builder is borrowed until then, and a
        // capture leaked with `mem::forget` leaves the level listed as capturing, which every
        // other use of the graph refuses and its drop leaks.
        let capture = stream.start_capture::<M>(Some(Target::Borrowed(self.raw as usize)))?;
        self.tree.capturing.borrow_mut().push(self.level());
        Ok(BuilderCapture { capture, tree: self.tree, level: self.level() })
    }
}

/// A capture into a [`GraphBuilder`]'s graph or body ([`GraphBuilder::capture`]). End it with
/// [`BuilderCapture::end`]; `!Send`.
#[must_use = "dropping the capture before `end` leaves the body incomplete: the graph can no longer be instantiated"]
pub struct BuilderCapture<'a, M: CaptureMode> {
    capture: Capture<'a, M>,
    tree: &'a Tree,
    level: u64,
}

/// Why the graph cannot be instantiated after a capture into one of its levels went wrong.
const DROPPED: &str =
    "a capture into this graph or one of its bodies was dropped before `end`: that body is incomplete";
const FAILED: &str = "a capture into this graph or one of its bodies failed to end: that body is incomplete";

impl<M: CaptureMode> fmt::Debug for BuilderCapture<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuilderCapture")
            .field("stream", &self.capture.stream())
            .field("id", &self.capture.id())
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl<'a, M: CaptureMode> BuilderCapture<'a, M> {
    /// The captured stream.
    pub fn stream(&self) -> &'a StreamRef {
        self.capture.stream()
    }

    /// The capture's id, unique in the process (as [`StreamRef::capture_info`] reports it).
    pub fn id(&self) -> u64 {
        self.capture.id()
    }

    /// Ends the capture: its work is now nodes of the builder's graph or body
    /// ([`cudaStreamEndCapture`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// `cudaErrorStreamCaptureInvalidated` if the capture broke (e.g. on work CUDA does not
    /// allow in a body); `cudaErrorStreamCaptureUnjoined` if a forked stream was not joined
    /// back. The graph is then leaked when it drops, and no longer instantiated
    /// ([`Error::GraphMisuse`]).
    pub fn end(mut self) -> Result<()> {
        self.finish(None)
    }

    /// Ends the capture in CUDA (see [`Capture::finish`]) and notes how it went in the graph;
    /// `dropped` says why the body is incomplete even if the capture ends.
    fn finish(&mut self, dropped: Option<&'static str>) -> Result<()> {
        let (ended, race_accesses) = self.capture.finish();
        let ended = match ended {
            Ended::Borrowed(ended) => ended,
            // It stays open in CUDA: the level stays listed as capturing.
            Ended::StillOpen(error) => return Err(error),
            // Another library ended it: the graph is leaked and not instantiated, as after a
            // failed end.
            Ended::Foreign(error) => Err(error),
            // Never: a capture into a borrowed graph ends as `Ended::Borrowed`. Whatever was
            // handed back is not ours to destroy.
            Ended::Graph(graph) => {
                std::mem::forget(graph);
                Err(Error::CaptureMisuse("a capture into a body ended as one into a graph of its own"))
            }
        };
        let mut capturing = self.tree.capturing.borrow_mut();
        if let Some(at) = capturing.iter().position(|&level| level == self.level) {
            capturing.swap_remove(at);
        }
        drop(capturing);
        match (&ended, dropped) {
            (Err(_), _) => {
                self.tree.leak.set(true);
                self.tree.incomplete.set(Some(FAILED));
            }
            (Ok(()), Some(why)) => self.tree.incomplete.set(Some(why)),
            // The captured work is nodes of the graph now: its launches replay its accesses.
            (Ok(()), None) => self.tree.add_race_accesses(race_accesses),
        }
        ended
    }
}

impl<M: CaptureMode> Drop for BuilderCapture<'_, M> {
    fn drop(&mut self) {
        if !self.capture.has_ended() {
            let _ = self.finish(Some(DROPPED));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_nodes_are_plain_values_without_a_gpu() {
        assert_eq!(size_of::<ConditionHandle>(), size_of::<u64>());
        assert_eq!(ConditionHandle(7).as_raw(), 7);
        let node = GraphNode { raw: 0x10, level: 3 };
        assert_eq!(node.as_raw() as usize, 0x10);
        assert_ne!(node, GraphNode { raw: 0x10, level: 4 }, "the same handle in another level is another node");
        let (a, b) = (level_id(), level_id());
        assert!(b > a, "level ids are never reused");
        let condition =
            GraphCondition { handle: ConditionHandle(1), level: a, default: Some(1), used: Cell::new(false) };
        assert_eq!((condition.default_value(), condition.is_used()), (Some(1), false));
    }
}
