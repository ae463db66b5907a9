//! Graphs: a captured [`Graph`], instantiated into a [`GraphExec`] that replays it on any stream
//! of its device ([graphs](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
//!
//! What a graph needs at run time (the closures of its host nodes, the events of its external
//! waits) is owned by the graph itself, as CUDA user objects: CUDA releases them once no graph,
//! clone or executable needs them and every launch that used them has completed. So dropping a
//! `Graph` or a `GraphExec` never waits for the device and never frees what a pending launch
//! still uses.
//! [`GraphExec::update`] keeps that promise by CUDA's documented rule for user objects, quoted
//! there: no bookkeeping of our own is needed, and none is kept.
//!
//! Graphs can also be built node by node ([`Graph::new`], [`Graph::builder`]), with
//! conditional nodes (if, if/else, while, switch) whose bodies are filled by capture or node by
//! node: see [`conditional`]. Built graphs take kernel, host-function, memcpy and memset nodes;
//! the memory their memcpy and memset nodes use is held by the graph, its clones
//! ([`Graph::try_clone`]) and its executables, and each launch is ordered with that memory's
//! other uses (see [the memory docs](crate::memory#graphs)).

// Layer 7 of docs/architecture.md, capture and graphs. May use: every layer below (ffi to
// host_fn).

pub mod capture;
pub mod conditional;
pub(crate) mod held;
mod nodes;

use crate::call::capture_mode::uncapturable_call;
use crate::call::race;
use crate::device::Device;
use crate::device::same_device;
use crate::event::Event;
use crate::ffi::error::{Error, GraphExecUpdateResult, GraphInstantiateResult, Result, check};
use crate::ffi::inside_host_fn::{call_outside_host_fn, refuse_inside_host_fn};
use crate::stream::AsStream;
use crate::stream::StreamRef;
use crate::stream::enqueue::{Calls, InCapture, Via, Work};
use crate::sys;
use held::GraphMemory;
use std::cell::{Cell, RefCell};
use std::ffi::c_ulonglong;
use std::ops::BitOr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A graph (`cudaGraph_t`): captured ([`Capture::end`](capture::Capture::end)) or built
/// ([`Graph::new`], [`Graph::builder`]); destroyed on drop.
#[derive(Debug)]
pub struct Graph {
    raw: sys::cudaGraph_t,
    device: Device,
    /// What the builders of this graph and of its bodies share with it.
    tree: Tree,
    /// How many executables made from this graph are alive (a graph with conditional nodes
    /// may have one at a time).
    executables: Arc<AtomicUsize>,
}

/// What a graph's builders, the builders of its conditional bodies and their captures share
/// with the graph: its level id, and what they did that instantiation and the drop must know.
#[derive(Debug)]
pub(crate) struct Tree {
    /// The id of the graph's own level (see [`level_id`]).
    pub(crate) level: u64,
    /// The levels (the graph's own or a body's) with a capture begun into them and not ended
    /// in CUDA, one entry per capture: one leaked with `mem::forget` stays listed for good.
    /// While any is listed, the graph is never instantiated, updated from, or captured into
    /// again, the listed levels get no nodes, and a drop leaks the graph instead of destroying
    /// one CUDA may still capture into.
    pub(crate) capturing: RefCell<Vec<u64>>,
    /// Why the graph may no longer be instantiated: a capture into one of its levels failed,
    /// or was dropped before it ended.
    pub(crate) incomplete: Cell<Option<&'static str>>,
    /// A capture into one of its levels failed to end: NVIDIA does not document what a failed
    /// capture leaves of a graph it was capturing into, so the graph is leaked, not destroyed
    /// (as [`StreamRef::begin_capture_into`] does with the graph it owns).
    pub(crate) leak: Cell<bool>,
    /// A conditional node was added to the graph or to one of its bodies: CUDA allows only
    /// one executable of it at a time.
    pub(crate) conditional: Cell<bool>,
    /// The accesses declared to the race detector by the work captured into the graph and its
    /// bodies, and by its kernel nodes: each launch of an executable made from it replays them.
    pub(crate) race_accesses: RefCell<Option<Arc<race::CapturedAccesses>>>,
    /// The memory its memcpy and memset nodes use, held for them (see [`held`]).
    pub(crate) memory: RefCell<Option<Arc<dyn GraphMemory>>>,
}

impl Tree {
    /// Whether a capture into one of the graph's levels is open.
    pub(crate) fn is_capturing(&self) -> bool {
        !self.capturing.borrow().is_empty()
    }

    /// [`Error::GraphMisuse`] while a capture into one of the graph's levels is open.
    pub(crate) fn refuse_capturing(&self) -> Result<()> {
        if self.is_capturing() {
            return Err(Error::GraphMisuse(
                "a capture into this graph or one of its bodies has not ended (a capture guard leaked with mem::forget keeps it open for good)",
            ));
        }
        Ok(())
    }

    /// Adds accesses declared to the race detector by work that became nodes of the graph.
    pub(crate) fn add_race_accesses(&self, accesses: Option<Arc<race::CapturedAccesses>>) {
        let mut kept = self.race_accesses.borrow_mut();
        *kept = race::CapturedAccesses::append(kept.take(), accesses);
    }

    fn new() -> Tree {
        Tree {
            level: level_id(),
            capturing: RefCell::new(Vec::new()),
            incomplete: Cell::new(None),
            leak: Cell::new(false),
            conditional: Cell::new(false),
            race_accesses: RefCell::new(None),
            memory: RefCell::new(None),
        }
    }
}

/// A new level id: unique in the process and never reused. The graph and each conditional
/// body get one; nodes and conditions carry the id of the level they were made in, so that a
/// node or a condition of another graph (or of a graph destroyed since, whose handle value
/// CUDA may have reused) is refused before CUDA sees it.
pub(crate) fn level_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

// SAFETY: a graph handle may be used from any thread, one call at a time.
unsafe impl Send for Graph {}
// Not Sync, by NVIDIA's graph thread-safety rule: "Graph objects (cudaGraph_t, CUgraph) are not
// internally synchronized and must not be accessed concurrently from multiple threads",
// including calls that look read-only, such as cudaGraphInstantiate and cudaGraphClone.

impl Graph {
    pub(crate) fn from_captured(raw: sys::cudaGraph_t, device: Device) -> Graph {
        Graph { raw, device, tree: Tree::new(), executables: Arc::new(AtomicUsize::new(0)) }
    }

    /// Adds the accesses a capture into the graph declared to the race detector.
    pub(crate) fn with_race_accesses(self, accesses: Option<Arc<race::CapturedAccesses>>) -> Graph {
        self.tree.add_race_accesses(accesses);
        self
    }

    /// An empty graph of `device`, to build node by node ([`Graph::builder`]) or to capture
    /// into ([`StreamRef::begin_capture_into`])
    /// ([`cudaGraphCreate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn new(device: Device) -> Result<Graph> {
        let _current = device.make_current()?;
        let mut raw: sys::cudaGraph_t = std::ptr::null_mut();
        // It touches no stream, so no capture in progress may refuse it.
        // SAFETY: a valid out-pointer; flags must be 0.
        uncapturable_call(|| check(unsafe { sys::cudaGraphCreate(&mut raw, 0) }, "cudaGraphCreate"))?;
        Ok(Graph::from_captured(raw, device))
    }

    /// [`Error::GraphMisuse`] for a graph that may not be read as a whole now: a capture into
    /// one of its levels is still open, or one failed or was dropped before it ended.
    fn refuse_incomplete(&self) -> Result<()> {
        self.tree.refuse_capturing()?;
        match self.tree.incomplete.get() {
            Some(why) => Err(Error::GraphMisuse(why)),
            None => Ok(()),
        }
    }

    /// What may be instantiated now: not an incomplete graph (`refuse_incomplete`), and a
    /// graph with conditional nodes only while no other executable of it is alive (CUDA:
    /// "Only one instantiation of the graph may exist at any point in time"). Counts the
    /// executable about to be made; `instantiated` uncounts it if CUDA refuses.
    fn claim_executable(&self) -> Result<()> {
        self.refuse_incomplete()?;
        let before = self.executables.fetch_add(1, Ordering::AcqRel);
        if self.tree.conditional.get() && before > 0 {
            self.executables.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::GraphMisuse(
                "a graph with conditional nodes has one executable at a time: drop the other one first",
            ));
        }
        if before > 0 && self.tree.memory.borrow().as_ref().is_some_and(|memory| memory.one_executable()) {
            self.executables.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::GraphMisuse(
                "a graph whose allocations outlive its launches has one executable at a time: drop the other one first",
            ));
        }
        Ok(())
    }

    /// The executable `raw` if CUDA made it (`made`), else the claim undone.
    fn instantiated(&self, raw: sys::cudaGraphExec_t, made: Result<()>, flags: InstantiateFlags) -> Result<GraphExec> {
        if let (Ok(()), Some(memory)) = (&made, &*self.tree.memory.borrow()) {
            memory.instantiated(flags.contains(InstantiateFlags::AUTO_FREE_ON_LAUNCH));
        }
        match made {
            Ok(()) => Ok(GraphExec {
                raw,
                device: self.device,
                device_launch: flags.contains(InstantiateFlags::DEVICE_LAUNCH),
                executables: Arc::clone(&self.executables),
                race_accesses: self.tree.race_accesses.borrow().clone(),
                memory: self.tree.memory.borrow().clone(),
                origin: self.tree.memory.borrow().as_ref().map(|memory| memory.nodes_only()),
                source: self.tree.level,
                last_replay: RefCell::new(None),
            }),
            Err(error) => {
                self.executables.fetch_sub(1, Ordering::AcqRel);
                Err(error)
            }
        }
    }

    /// Instantiates the graph for launching
    /// ([`cudaGraphInstantiate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// The executable shares what the graph owns (host-function closures, the buffers its
    /// memory nodes use): both keep it alive.
    /// A graph with conditional nodes needs no flag, but has one executable at a time.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for a graph with conditional nodes whose other executable is
    /// still alive, and for a graph whose body capture has not ended, failed, or was dropped
    /// before `end`; CUDA's errors ([`Graph::instantiate_with`] reports CUDA's reason, e.g. a
    /// [`GraphCondition`](conditional::GraphCondition) that no conditional node uses).
    pub fn instantiate(&self) -> Result<GraphExec> {
        let _current = self.device.make_current()?;
        self.claim_executable()?;
        let mut exec: sys::cudaGraphExec_t = std::ptr::null_mut();
        // Legal during a capture of this thread's, which it leaves intact.
        let made = uncapturable_call(|| {
            // SAFETY: a live graph, used by this thread only (`&self` of a !Sync type, and no
            // capture into it is open: `claim_executable`); `exec` is a valid out-pointer.
            check(unsafe { sys::cudaGraphInstantiate(&mut exec, self.raw, 0) }, "cudaGraphInstantiate")
        });
        self.instantiated(exec, made, InstantiateFlags(0))
    }

    /// Instantiates the graph with `options`: flags, and an upload into a stream
    /// ([`cudaGraphInstantiateWithParams`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// As with [`Graph::instantiate`], the executable shares what the graph owns.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for an upload stream of another device; [`Error::InsideHostFn`];
    /// [`Error::GraphMisuse`] as for [`Graph::instantiate`], and for device launch of a graph
    /// whose memory nodes use buffers (see [the memory docs](crate::memory#graphs));
    /// [`Error::GraphInstantiate`] with CUDA's [`GraphInstantiateResult`] when CUDA refuses,
    /// e.g. [`GraphInstantiateResult::NODE_OPERATION_NOT_SUPPORTED`] for a host node in a graph
    /// instantiated for device launch, [`GraphInstantiateResult::CONDITIONAL_HANDLE_UNUSED`]
    /// for a [`GraphCondition`](conditional::GraphCondition) that no conditional node uses.
    pub fn instantiate_with(&self, options: InstantiateOptions<'_>) -> Result<GraphExec> {
        refuse_inside_host_fn()?;
        if options.flags.contains(InstantiateFlags::DEVICE_LAUNCH) && self.tree.memory.borrow().is_some() {
            return Err(Error::GraphMisuse(DEVICE_LAUNCH_WITH_MEMORY));
        }
        let mut params = sys::cudaGraphInstantiateParams {
            flags: options.flags.0,
            uploadStream: std::ptr::null_mut(),
            errNode_out: std::ptr::null_mut(),
            result_out: sys::cudaGraphInstantiateResult::cudaGraphInstantiateSuccess,
        };
        let _current = match options.upload {
            Some(stream) => {
                same_device("a graph is uploaded to a stream of its own device", self.device, stream.device())?;
                params.uploadStream = stream.as_raw();
                stream.enter_runtime()?
            }
            None => self.device.make_current()?,
        };
        let mut instantiate = || {
            self.claim_executable()?;
            let mut exec: sys::cudaGraphExec_t = std::ptr::null_mut();
            // Legal during a capture of this thread's, which it leaves intact.
            let made = uncapturable_call(|| {
                // SAFETY: a live graph, used by this thread only (`&self` of a !Sync type, and
                // no capture into it is open: `claim_executable`); `exec` and `params` are
                // valid pointers; the upload stream, if any, is live for this call.
                let code = unsafe { sys::cudaGraphInstantiateWithParams(&mut exec, self.raw, &mut params) };
                match check(code, "cudaGraphInstantiateWithParams") {
                    Err(Error::Cuda { code, .. }) => {
                        Err(Error::GraphInstantiate { result: GraphInstantiateResult(params.result_out.0), code })
                    }
                    other => other,
                }
            });
            self.instantiated(exec, made, options.flags)
        };
        match options.upload {
            // An upload is work on its stream, which must not be capturing.
            Some(stream) => stream.outside_transitions(InCapture::Refused(LAUNCH_INTO_CAPTURE), instantiate),
            None => instantiate(),
        }
    }

    /// The graph's leaf nodes: those no other node depends on
    /// ([`cudaGraphGetNodes`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html),
    /// `cudaGraphNodeGetDependentNodes`). Valid while the graph lives and is not changed.
    pub(crate) fn leaves(&self) -> Result<Vec<sys::cudaGraphNode_t>> {
        // SAFETY: a live graph used by this thread only (`&self` of a !Sync type).
        unsafe { leaves_of(self.raw) }
    }

    /// The raw handle.
    pub fn as_raw(&self) -> sys::cudaGraph_t {
        self.raw
    }

    /// The device the graph was captured on (or made for).
    pub fn device(&self) -> Device {
        self.device
    }

    /// What the graph's builders share with it.
    pub(crate) fn tree(&self) -> &Tree {
        &self.tree
    }
}

/// The leaf nodes of `graph` (see [`Graph::leaves`]).
///
/// # Safety
/// `graph` is a live graph that no other thread uses during the call.
pub(crate) unsafe fn leaves_of(graph: sys::cudaGraph_t) -> Result<Vec<sys::cudaGraphNode_t>> {
    // SAFETY: the caller's contract.
    let nodes = unsafe { nodes::nodes_of(graph)? };
    let mut leaves = Vec::with_capacity(nodes.len());
    for node in nodes {
        if dependents(node)? == 0 {
            leaves.push(node);
        }
    }
    Ok(leaves)
}

/// How many nodes depend on `node`.
fn dependents(node: sys::cudaGraphNode_t) -> Result<usize> {
    let mut count = 0;
    // SAFETY: a node of a live graph; null arrays ask for the count only (no edge data is read,
    // so the query cannot be lossy). CUDA 13 added the edge-data argument.
    #[cfg(cudart_13)]
    let code =
        unsafe { sys::cudaGraphNodeGetDependentNodes(node, std::ptr::null_mut(), std::ptr::null_mut(), &mut count) };
    // SAFETY: as above, with CUDA 12's signature.
    #[cfg(not(cudart_13))]
    let code = unsafe { sys::cudaGraphNodeGetDependentNodes(node, std::ptr::null_mut(), &mut count) };
    check(code, "cudaGraphNodeGetDependentNodes")?;
    Ok(count)
}

/// Instantiation flags (`cudaGraphInstantiateFlags`), as [`GraphExec::flags`] reads them back.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct InstantiateFlags(pub u64);

impl InstantiateFlags {
    /// No flag.
    pub const NONE: InstantiateFlags = InstantiateFlags(0);
    /// `cudaGraphInstantiateFlagAutoFreeOnLaunch`: before each relaunch, free the memory the
    /// graph's previous launch allocated (`cudaMallocAsync` captured without a free).
    pub const AUTO_FREE_ON_LAUNCH: InstantiateFlags =
        InstantiateFlags(sys::cudaGraphInstantiateFlags::cudaGraphInstantiateFlagAutoFreeOnLaunch.0 as u64);
    /// `cudaGraphInstantiateFlagUpload`: upload the executable once instantiated. CUDA never
    /// reports it back ([`GraphExec::flags`]): it does not change the executable.
    pub const UPLOAD: InstantiateFlags =
        InstantiateFlags(sys::cudaGraphInstantiateFlags::cudaGraphInstantiateFlagUpload.0 as u64);
    /// `cudaGraphInstantiateFlagDeviceLaunch`: launchable from the device as well as the host.
    pub const DEVICE_LAUNCH: InstantiateFlags =
        InstantiateFlags(sys::cudaGraphInstantiateFlags::cudaGraphInstantiateFlagDeviceLaunch.0 as u64);
    /// `cudaGraphInstantiateFlagUseNodePriority`: kernels run at their nodes' priorities (copied
    /// from the stream's during capture), not the launch stream's.
    pub const USE_NODE_PRIORITY: InstantiateFlags =
        InstantiateFlags(sys::cudaGraphInstantiateFlags::cudaGraphInstantiateFlagUseNodePriority.0 as u64);

    /// Whether every flag of `other` is set here.
    pub fn contains(self, other: InstantiateFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for InstantiateFlags {
    type Output = InstantiateFlags;

    fn bitor(self, other: InstantiateFlags) -> InstantiateFlags {
        InstantiateFlags(self.0 | other.0)
    }
}

/// How [`Graph::instantiate_with`] instantiates: the fields of `cudaGraphInstantiateParams`.
///
/// ```no_run
/// # fn demo(graph: &cuda_stream::Graph, stream: &cuda_stream::StreamRef) -> cuda_stream::Result<()> {
/// use cuda_stream::InstantiateOptions;
/// let exec = graph.instantiate_with(InstantiateOptions::new().upload_to(stream).auto_free_on_launch())?;
/// exec.launch(stream)?;
/// # Ok(())
/// # }
/// ```
#[derive(Copy, Clone, Debug, Default)]
pub struct InstantiateOptions<'a> {
    flags: InstantiateFlags,
    upload: Option<&'a StreamRef>,
}

impl<'a> InstantiateOptions<'a> {
    /// No flag, no upload: what [`Graph::instantiate`] does.
    pub fn new() -> InstantiateOptions<'a> {
        InstantiateOptions::default()
    }

    /// Upload the executable into `stream` once instantiated, ahead of its first launch
    /// ([`InstantiateFlags::UPLOAD`]).
    pub fn upload_to(self, stream: &'a StreamRef) -> InstantiateOptions<'a> {
        InstantiateOptions { flags: self.flags | InstantiateFlags::UPLOAD, upload: Some(stream) }
    }

    /// [`InstantiateFlags::AUTO_FREE_ON_LAUNCH`]. CUDA refuses it together with device launch.
    pub fn auto_free_on_launch(self) -> InstantiateOptions<'a> {
        self.with(InstantiateFlags::AUTO_FREE_ON_LAUNCH)
    }

    /// [`InstantiateFlags::DEVICE_LAUNCH`]. CUDA then accepts only kernel, memcpy, memset and
    /// child-graph nodes of one device.
    pub fn device_launch(self) -> InstantiateOptions<'a> {
        self.with(InstantiateFlags::DEVICE_LAUNCH)
    }

    /// [`InstantiateFlags::USE_NODE_PRIORITY`].
    pub fn use_node_priority(self) -> InstantiateOptions<'a> {
        self.with(InstantiateFlags::USE_NODE_PRIORITY)
    }

    /// The flags passed to CUDA.
    pub fn flags(&self) -> InstantiateFlags {
        self.flags
    }

    fn with(self, flag: InstantiateFlags) -> InstantiateOptions<'a> {
        InstantiateOptions { flags: self.flags | flag, ..self }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let memory = self.tree.memory.take();
        if self.tree.is_capturing() || self.tree.leak.get() {
            // CUDA may still capture into one of its levels (a capture leaked with
            // `mem::forget`), or a capture into one failed: leaked, never destroyed, and the
            // memory its nodes use with it.
            std::mem::forget(memory);
            return;
        }
        let (raw, device) = (self.raw as usize, self.device);
        call_outside_host_fn(move || {
            device.destroy_relaxed(move || {
                // SAFETY: we own the graph and destroy it once, bodies included (no capture
                // into it is open); executables made from it do not need it, and what its
                // nodes use is owned by user objects CUDA releases, or held until after this.
                let _ = check(unsafe { sys::cudaGraphDestroy(raw as sys::cudaGraph_t) }, "cudaGraphDestroy");
            });
            // The memory its memory nodes use goes once the graph is gone (on another thread
            // when the drop was made inside a host function).
            drop(memory);
        });
    }
}

/// Why a graph whose memory nodes use buffers is not made launchable from the device.
const DEVICE_LAUNCH_WITH_MEMORY: &str = "a graph whose memory nodes use buffers is not launched from the device (such a launch would not be ordered with the buffers' other uses)";

/// Why a graph launch or upload onto a capturing stream is refused.
const LAUNCH_INTO_CAPTURE: &str =
    "a graph is not launched or uploaded onto a capturing stream (CUDA would invalidate the capture)";

/// An executable graph, launched on streams of its device; destroyed on drop (CUDA frees an
/// executable that is still running once it completes).
#[derive(Debug)]
pub struct GraphExec {
    raw: sys::cudaGraphExec_t,
    device: Device,
    /// Instantiated for device launch: never updated from a graph that holds memory.
    device_launch: bool,
    /// The live-executable count of the graph it was made from, uncounted once destroyed.
    executables: Arc<AtomicUsize>,
    /// The accesses the graph's capture declared to the race detector, replayed by each launch.
    race_accesses: Option<Arc<race::CapturedAccesses>>,
    /// The memory its memcpy and memset nodes use: each launch is ordered with its other uses.
    memory: Option<Arc<dyn GraphMemory>>,
    /// The memory nodes of the graph it was instantiated from, as they were then, holding no
    /// memory: the nodes whose parameters the executable may change (see
    /// `memory/graph_nodes.rs`).
    origin: Option<Arc<dyn GraphMemory>>,
    /// The level id of the graph it was instantiated from: a change of a node's parameters
    /// needs that graph, alive and on this thread.
    source: u64,
    /// Recorded after its last launch while the race detector tracks: the next launch waits
    /// for it, as CUDA orders an executable's launches.
    last_replay: RefCell<Option<Event>>,
}

// SAFETY: an executable graph handle may be used from any thread, one call at a time.
unsafe impl Send for GraphExec {}
// Not Sync: cudaGraphLaunch and cudaGraphUpload carry NVIDIA's graph thread-safety note, so
// calls on one executable must be serialized; `&GraphExec` therefore stays on one thread. (To
// replay a graph from several threads, instantiate it once per thread.)

impl GraphExec {
    /// Launches the whole graph on `stream`
    /// ([`cudaGraphLaunch`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// Each launch is ordered after the previous launch of this executable.
    ///
    /// A graph whose memcpy and memset nodes use buffers ([`GraphBuilder::add_copy`],
    /// [`GraphBuilder::add_fill_bytes`], ...) launches as one use of them: `stream` first waits
    /// for the earlier uses of their bytes that the nodes conflict with (a node's write for
    /// every use, its read for the writes), whatever their streams, and later uses and the
    /// buffers' frees wait for the launch, as for a copy; page-locked memory's host access
    /// waits for it too.
    ///
    /// # Errors
    /// For a graph whose nodes use buffers: the errors of
    /// [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on); [`Error::DeviceMismatch`] for a
    /// stream of another device; [`Error::GraphMisuse`] while the lock of a
    /// [`SharedPinned`](crate::SharedPinned) the graph copies to or from is held (by any thread)
    /// (nothing is enqueued then): another launch that
    /// copies the same memory, being enqueued on another thread, holds it too. CUDA's errors.
    ///
    /// [`GraphBuilder::add_copy`]: conditional::GraphBuilder::add_copy
    /// [`GraphBuilder::add_fill_bytes`]: conditional::GraphBuilder::add_fill_bytes
    #[inline]
    pub fn launch(&self, stream: impl AsStream) -> Result<()> {
        let stream = stream.as_stream();
        if let Some(memory) = &self.memory {
            return self.launch_holding(&stream, memory.as_ref());
        }
        self.launch_on(&stream, &mut false)
    }

    /// A launch of a graph whose memory nodes use buffers: ordered with their other uses.
    #[cold]
    fn launch_holding(&self, stream: &StreamRef, memory: &dyn GraphMemory) -> Result<()> {
        // Before any ordering: a stream of another device would wait for the buffers' uses,
        // then have CUDA refuse the launch.
        same_device("a graph is launched on a stream of its own device", self.device, stream.device())?;
        memory.ordered_launch(stream, &mut |launched| self.launch_on(stream, launched))
    }

    /// Launches on `stream`; `launched` is set once CUDA took the launch (an error may still
    /// follow).
    #[inline(always)]
    fn launch_on(&self, stream: &StreamRef, launched: &mut bool) -> Result<()> {
        if let Some(accesses) = self.race_accesses.as_deref().filter(|_| race::tracking()) {
            return self.launch_replaying(stream, accesses, launched);
        }
        let work = Work::named("cudaGraphLaunch").refused_in_capture(LAUNCH_INTO_CAPTURE).through_driver();
        stream.enqueue(work, |via| {
            self.launch_via(stream, via)?;
            *launched = true;
            Ok(())
        })
    }

    /// A launch whose capture declared `accesses` to the race detector: the replay is checked
    /// and recorded as those accesses.
    #[cold]
    fn launch_replaying(
        &self,
        stream: &StreamRef,
        accesses: &race::CapturedAccesses,
        launched: &mut bool,
    ) -> Result<()> {
        let (_current, via) = stream.enter_for(Calls::Driver)?;
        stream.outside_transitions(InCapture::Refused(LAUNCH_INTO_CAPTURE), || {
            // CUDA orders an executable's launches one after another, whatever their streams:
            // the detector learns it from a wait for the last launch's marker, recorded after it
            // (a wait CUDA makes anyway; only while the detector tracks).
            let mut last = self.last_replay.borrow_mut();
            if let Some(marker) = &*last {
                stream.wait_raw(marker.as_raw(), 0)?;
            }
            let marker = match last.take() {
                Some(marker) => marker,
                None => Event::internal(self.device)?,
            };
            let checked = stream.race_check_replay(accesses)?;
            self.launch_via(stream, via).map(|()| checked.enqueued())?;
            *launched = true;
            stream.record_raw(marker.as_raw(), 0)?;
            *last = Some(marker);
            Ok(())
        })
    }

    #[inline(always)]
    fn launch_via(&self, stream: &StreamRef, via: Via) -> Result<()> {
        match via {
            // SAFETY: a live executable used by this thread only, and a live real stream.
            Via::Driver => unsafe { crate::ffi::driver::graph_launch(self.raw, stream.as_raw()) },
            // SAFETY: as above, with a special handle of the current device.
            Via::Runtime => check(unsafe { sys::cudaGraphLaunch(self.raw, stream.as_raw()) }, "cudaGraphLaunch"),
        }
    }

    /// Uploads the graph to the device ahead of its first launch
    /// ([`cudaGraphUpload`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn upload(&self, stream: impl AsStream) -> Result<()> {
        let stream = stream.as_stream();
        stream.outside_transitions(InCapture::Refused(LAUNCH_INTO_CAPTURE), || {
            let _current = stream.enter_runtime()?;
            // SAFETY: a live executable used by this thread only, and a live stream.
            check(unsafe { sys::cudaGraphUpload(self.raw, stream.as_raw()) }, "cudaGraphUpload")
        })
    }

    /// Updates the executable in place from `graph`, a graph of the same topology whose nodes
    /// may have other parameters: other kernel arguments, other host functions
    /// ([`cudaGraphExecUpdate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// Later launches run the new parameters; launches already enqueued are not affected.
    ///
    /// What the new nodes use (host-function closures, events: user objects of `graph`) is then
    /// owned by the executable too, so `graph` may be dropped at once; what only the old nodes
    /// used is released once the launches that may use it have completed. This is CUDA's
    /// documented rule (CUDA Programming Guide, "CUDA User Objects"): "If an executable graph
    /// [...] is updated with `cudaGraphExecUpdate` [...], the references in the new source
    /// graph are cloned and replace the references in the target graph. In either case, if
    /// previous launches are not synchronized, any references which would be released are held
    /// until the launches have finished executing."
    ///
    /// Conditional nodes: CUDA does not change their parameters (handle, type, bodies), but
    /// updates the nodes of their bodies by the rules above, and their handles' defaults.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a graph of another device; [`Error::InsideHostFn`];
    /// [`Error::GraphMisuse`] for a graph whose body capture has not ended, failed, or was
    /// dropped before `end`, for a graph whose memory nodes use buffers when the executable
    /// was instantiated for device launch, and for a graph with memory allocation or free
    /// nodes ([`Capture::alloc`](crate::Capture::alloc), [`Capture::scratch`](crate::Capture::scratch));
    /// [`Error::GraphUpdate`] with CUDA's [`GraphExecUpdateResult`] (e.g.
    /// [`GraphExecUpdateResult::TOPOLOGY_CHANGED`]) when CUDA refuses: the executable is then
    /// unchanged and still usable.
    pub fn update(&mut self, graph: &Graph) -> Result<()> {
        // The executable's device, not the runtime's default one on a thread with none current.
        let _current = self.device.make_current()?;
        same_device("an executable graph is updated from a graph of its own device", self.device, graph.device)?;
        graph.refuse_incomplete()?;
        if self.device_launch && graph.tree.memory.borrow().is_some() {
            return Err(Error::GraphMisuse(DEVICE_LAUNCH_WITH_MEMORY));
        }
        // SAFETY: a live graph used by this thread only (`&Graph` of a !Sync type), with no
        // capture into it open (checked above).
        if unsafe { nodes::has_graph_memory_nodes(graph.raw)? } {
            // CUDA keeps an executable's allocation where it was mapped, while the new graph's
            // nodes name the new graph's address.
            return Err(Error::GraphMisuse(
                "an executable is not updated from a graph that allocates or frees graph memory (its nodes would name memory the executable does not map)",
            ));
        }
        let mut info = sys::cudaGraphExecUpdateResultInfo {
            result: sys::cudaGraphExecUpdateResult::cudaGraphExecUpdateSuccess,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        // SAFETY: a live executable we hold exclusively (`&mut self`), a live graph used by this
        // thread only (`&Graph` of a !Sync type), and a valid out-pointer.
        let code = unsafe { sys::cudaGraphExecUpdate(self.raw, graph.raw, &mut info) };
        if let Err(Error::Cuda { code, .. }) = check(code, "cudaGraphExecUpdate") {
            return Err(Error::GraphUpdate { result: GraphExecUpdateResult(info.result.0), code });
        }
        self.race_accesses = graph.tree.race_accesses.borrow().clone();
        // Launches enqueued before hold the old memory's uses; later ones use the new nodes'.
        self.memory = graph.tree.memory.borrow().clone();
        Ok(())
    }

    /// The flags the executable was instantiated with
    /// ([`cudaGraphExecGetFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// Never [`InstantiateFlags::UPLOAD`], which CUDA does not report, and on CUDA 13.0 not
    /// [`InstantiateFlags::USE_NODE_PRIORITY`] either (seen on an H100, driver 580).
    ///
    /// # Errors
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn flags(&self) -> Result<InstantiateFlags> {
        // The executable's device, not the runtime's default one on a thread with none current.
        let _current = self.device.make_current()?;
        let mut flags: c_ulonglong = 0;
        // SAFETY: a live executable used by this thread only; a valid out-pointer.
        check(unsafe { sys::cudaGraphExecGetFlags(self.raw, &mut flags) }, "cudaGraphExecGetFlags")?;
        Ok(InstantiateFlags(flags))
    }

    /// The raw handle.
    pub fn as_raw(&self) -> sys::cudaGraphExec_t {
        self.raw
    }

    /// The memory its nodes use now (see [`held`]).
    pub(crate) fn memory(&self) -> Option<Arc<dyn GraphMemory>> {
        self.memory.clone()
    }

    /// The memory nodes of `graph`, if it is the graph this executable was instantiated from;
    /// [`Error::GraphMisuse`] for another (or one whose body capture has not ended).
    pub(crate) fn origin(&self, graph: &Graph) -> Result<Option<&dyn GraphMemory>> {
        if graph.tree.level != self.source {
            return Err(Error::GraphMisuse(
                "a node's parameters change with the graph the executable was instantiated from, and no other",
            ));
        }
        graph.refuse_incomplete()?;
        Ok(self.origin.as_deref())
    }

    /// Has the executable hold `memory` instead of what it held (`memory` holds that too), and
    /// replay `accesses` too at each launch: a node's parameters changed.
    pub(crate) fn hold_memory(&mut self, memory: Arc<dyn GraphMemory>, accesses: Option<Arc<race::CapturedAccesses>>) {
        self.memory = Some(memory);
        self.race_accesses = race::CapturedAccesses::append(self.race_accesses.take(), accesses);
    }

    /// The device the graph was captured on.
    pub fn device(&self) -> Device {
        self.device
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let (raw, device) = (self.raw as usize, self.device);
        let executables = Arc::clone(&self.executables);
        // Dropped once the executable is destroyed (see `Graph`'s drop).
        let memory = self.memory.take();
        call_outside_host_fn(move || {
            device.destroy_relaxed(move || {
                // SAFETY: we own the executable and destroy it once. CUDA frees it after
                // launches in flight complete, and releases the user objects they use only
                // then: no wait for the device is needed here, and nothing is freed early.
                let code = unsafe { sys::cudaGraphExecDestroy(raw as sys::cudaGraphExec_t) };
                let _ = check(code, "cudaGraphExecDestroy");
            });
            // Only now may a graph with conditional nodes be instantiated again.
            executables.fetch_sub(1, Ordering::AcqRel);
            drop(memory);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_compose_cuda_flags_without_a_gpu() {
        let options = InstantiateOptions::new().auto_free_on_launch().use_node_priority();
        let flags = options.flags();
        assert_eq!(flags, InstantiateFlags::AUTO_FREE_ON_LAUNCH | InstantiateFlags::USE_NODE_PRIORITY);
        assert!(flags.contains(InstantiateFlags::USE_NODE_PRIORITY) && !flags.contains(InstantiateFlags::UPLOAD));
        assert_eq!(InstantiateOptions::new().flags(), InstantiateFlags::NONE);
        assert_eq!(InstantiateFlags::DEVICE_LAUNCH.0 | InstantiateFlags::UPLOAD.0, 4 | 2);
    }
}
