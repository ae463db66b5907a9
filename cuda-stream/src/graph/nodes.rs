//! The plain nodes of graphs built node by node, and what is asked of a graph as a whole: host
//! functions, raw nodes adopted under a contract, node counts and clones
//! ([graph management](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
//! Memcpy and memset nodes are the memory layer's (`memory/graph_nodes.rs`), kernel nodes the
//! kernel layer's.

use super::capture::run_repeatable;
use super::conditional::{GraphBuilder, GraphNode};
use super::{Graph, Tree};
use crate::call::capture_mode::uncapturable_call;
use crate::device::keep_alive::keep_alive;
use crate::ffi::error::{Error, Result, check};
use crate::host_fn::Counted;
use crate::stream::capture_node::dependency_pointer;
use crate::sys;
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

impl GraphBuilder<'_> {
    /// Adds a node that runs `f` on a CUDA host thread after the nodes `after`, at every launch
    /// of every executable made from the graph
    /// ([`cudaGraphAddHostNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// It runs at every launch, so it is `Fn`; it is `Sync` because executables made from one
    /// graph may run at the same time. The graph owns it through a CUDA user object, as
    /// [`Capture::launch_host_fn`](super::capture::Capture::launch_host_fn) does: CUDA drops it
    /// once no graph, clone or executable needs it and their launches have completed. Inside
    /// `f`, calls of this crate are refused, as in every host function
    /// ([the rules](crate::host_fn)). `f` must not block on what the host holds while it waits
    /// for the graph, above all the lock of a [`SharedPinned`](crate::SharedPinned) the graph copies (see
    /// [the memory docs](crate::memory#graphs)): the host would wait for `f`, and `f` for it.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] in a conditional node's body (CUDA allows no host node there), for
    /// a node of another graph or body in `after`, or while a capture leaked with
    /// `mem::forget` writes into this level; [`Error::InsideHostFn`]; CUDA's errors (`f` is
    /// then dropped, or kept by the graph until it drops, never run).
    pub fn add_host_fn<F: Fn() + Send + Sync + 'static>(&mut self, f: F, after: &[GraphNode]) -> Result<GraphNode> {
        if self.is_body() {
            return Err(Error::GraphMisuse("a conditional node's body holds no host function (CUDA's rule)"));
        }
        let device = self.device();
        self.add_node_with(after, |graph, dependencies| {
            // The graph owns the closure from here on, whether or not the node is added.
            let data = keep_alive(graph, device, Counted::boxed(f))?;
            let params = sys::cudaHostNodeParams { fn_: Some(run_repeatable::<F>), userData: data.cast_mut().cast() };
            let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
            // SAFETY: the graph's live root level (not a body: checked), used by nothing else
            // meanwhile (the builder's exclusive borrow); `dependencies` are nodes of it,
            // checked by level; `params` names the entry point of `F` with a `Counted<F>` that
            // the graph's user object keeps alive as long as any launch may run it; a valid
            // out-pointer.
            let code = unsafe {
                sys::cudaGraphAddHostNode(
                    &mut node,
                    graph,
                    dependency_pointer(dependencies),
                    dependencies.len(),
                    &params,
                )
            };
            check(code, "cudaGraphAddHostNode")?;
            Ok(node)
        })
    }

    /// Adopts `raw`, a node that raw CUDA calls added to this level's graph
    /// ([`as_raw`](GraphBuilder::as_raw)), as a [`GraphNode`] that later nodes can depend on.
    /// The node's membership is checked (among `cudaGraphGetNodes`); what it does is not.
    ///
    /// # Safety
    /// Everything the node uses (memory its memcpy or memset reads or writes, a kernel's
    /// arguments and what they point to, a host function's data, events) stays valid for every
    /// launch of every graph, clone and executable made from this graph, until those launches
    /// have completed, and no other work touches that memory concurrently in a way the node
    /// does not expect. The graph holds nothing for it and orders nothing around it.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for a node of another graph or body, or while a capture leaked
    /// with `mem::forget` writes into this level; [`Error::InsideHostFn`]; CUDA's errors (for a
    /// handle that is no node).
    pub unsafe fn adopt_node(&mut self, raw: sys::cudaGraphNode_t) -> Result<GraphNode> {
        self.add_node_with(&[], |graph, _| {
            // SAFETY: this level's live graph, which nothing else uses meanwhile (the builder's
            // exclusive borrow; no capture into it is open: `add_node_with`).
            if !unsafe { nodes_of(graph)? }.contains(&raw) {
                return Err(Error::GraphMisuse(
                    "a raw node is adopted only by the builder of the graph or body it is in",
                ));
            }
            Ok(raw)
        })
    }

    /// How many nodes this level's graph (the graph, or this body) has, not counting the nodes
    /// of its conditional nodes' bodies
    /// ([`cudaGraphGetNodes`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] while a capture leaked with `mem::forget` writes into this level;
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn node_count(&self) -> Result<usize> {
        self.refuse_capturing()?;
        let _current = self.device().make_current()?;
        // SAFETY: this level's live graph, which nothing else uses meanwhile (the builder's
        // exclusive borrow; no capture into it is open).
        unsafe { node_count_of(self.as_raw()) }
    }
}

impl Graph {
    /// How many nodes the graph has, not counting the nodes of its conditional nodes' bodies
    /// ([`cudaGraphGetNodes`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] while a capture into the graph or one of its bodies is open (one
    /// leaked with `mem::forget`); [`Error::InsideHostFn`]; CUDA's errors.
    pub fn node_count(&self) -> Result<usize> {
        self.tree().refuse_capturing()?;
        let _current = self.device().make_current()?;
        // SAFETY: a live graph used by this thread only (`&self` of a !Sync type), with no
        // capture into it open.
        unsafe { node_count_of(self.as_raw()) }
    }

    /// A copy of the graph: the same nodes and edges, with their parameters
    /// ([`cudaGraphClone`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// The clone shares what the graph owns (host-function closures through CUDA's user
    /// objects, buffers its memory nodes use through their `Arc`s), so either may be dropped
    /// first; its executables are counted apart from the graph's. Nodes of the graph
    /// ([`GraphNode`]) are not nodes of the clone.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for a graph with conditional nodes (CUDA clones none), for a graph
    /// with outputs ([`Capture::keep`](crate::Capture::keep)), and for a
    /// graph whose body capture has not ended, failed, or was dropped before `end`;
    /// [`Error::InsideHostFn`]; CUDA's errors (CUDA clones no graph with memory allocation or
    /// free nodes either, such as [`Capture::scratch`](crate::Capture::scratch)'s).
    pub fn try_clone(&self) -> Result<Graph> {
        if self.tree().conditional.get() {
            return Err(Error::GraphMisuse("a graph with conditional nodes is not cloned (CUDA's rule)"));
        }
        // Its outputs' state is the graph's, shared by one executable at a time: a clone's
        // executables would be a second (CUDA refuses the clone too, for its allocation nodes).
        if self.tree().memory.borrow().as_ref().is_some_and(|memory| memory.one_executable()) {
            return Err(Error::GraphMisuse(
                "a graph whose allocations outlive its launches (Capture::keep) is not cloned: one executable at a time shares its outputs",
            ));
        }
        self.refuse_incomplete()?;
        let _current = self.device().make_current()?;
        let mut clone: sys::cudaGraph_t = std::ptr::null_mut();
        // It touches no stream: no capture in progress may refuse it.
        uncapturable_call(|| {
            // SAFETY: a live graph used by this thread only (`&self` of a !Sync type), complete
            // and with no capture into it open; a valid out-pointer.
            check(unsafe { sys::cudaGraphClone(&mut clone, self.as_raw()) }, "cudaGraphClone")
        })?;
        let tree = self.tree();
        let cloned = Tree {
            level: super::level_id(),
            capturing: RefCell::new(Vec::new()),
            incomplete: Cell::new(None),
            leak: Cell::new(false),
            conditional: Cell::new(false),
            race_accesses: RefCell::new(tree.race_accesses.borrow().clone()),
            // The same memory, held; none of its nodes (they are the original's).
            memory: RefCell::new(tree.memory.borrow().as_ref().map(|memory| memory.without_nodes())),
        };
        Ok(Graph { raw: clone, device: self.device(), tree: cloned, executables: Arc::new(AtomicUsize::new(0)) })
    }
}

/// How many nodes `graph` has.
///
/// # Safety
/// `graph` is a live graph that no other thread uses during the call.
pub(super) unsafe fn node_count_of(graph: sys::cudaGraph_t) -> Result<usize> {
    let mut count = 0;
    // SAFETY: the caller's contract; a null array asks for the count.
    check(unsafe { sys::cudaGraphGetNodes(graph, std::ptr::null_mut(), &mut count) }, "cudaGraphGetNodes")?;
    Ok(count)
}

/// Whether `graph` has a memory allocation or free node (graph memory: a capture's
/// [`Capture::alloc`](crate::Capture::alloc) and [`Capture::free`](crate::Capture::free),
/// [`Capture::scratch`](crate::Capture::scratch), or raw captured `cudaMallocAsync`).
///
/// # Safety
/// As [`node_count_of`].
pub(super) unsafe fn has_graph_memory_nodes(graph: sys::cudaGraph_t) -> Result<bool> {
    // SAFETY: the caller's contract.
    for node in unsafe { nodes_of(graph)? } {
        let mut kind = sys::cudaGraphNodeType::cudaGraphNodeTypeKernel;
        // SAFETY: a node of the live graph; a valid out-pointer.
        check(unsafe { sys::cudaGraphNodeGetType(node, &mut kind) }, "cudaGraphNodeGetType")?;
        if kind == sys::cudaGraphNodeType::cudaGraphNodeTypeMemAlloc
            || kind == sys::cudaGraphNodeType::cudaGraphNodeTypeMemFree
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The nodes of `graph`.
///
/// # Safety
/// As [`node_count_of`].
pub(super) unsafe fn nodes_of(graph: sys::cudaGraph_t) -> Result<Vec<sys::cudaGraphNode_t>> {
    // SAFETY: the caller's contract.
    let mut count = unsafe { node_count_of(graph)? };
    if count == 0 {
        // An empty graph (a new body, say): CUDA refuses an array for no nodes
        // (`cudaErrorInvalidValue`, CUDA 13.0).
        return Ok(Vec::new());
    }
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: as above; `nodes` has room for `count` handles.
    check(unsafe { sys::cudaGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) }, "cudaGraphGetNodes")?;
    nodes.truncate(count);
    Ok(nodes)
}
