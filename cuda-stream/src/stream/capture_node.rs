//! Nodes added by hand to the graph a stream's capture builds, for work whose objects that graph
//! must own: a capture's host functions, external event records and external waits.
//!
//! Enqueuing such work stream-ordered after handing its object to the graph leaves a window: a
//! capture that code outside this crate ends in between (cudarc's `end_capture`,
//! `torch.cuda.graph`) turns the enqueue into a real one, which then runs with an object that
//! the graph (now the foreign code's) frees. So the node goes straight into the graph that
//! `cudaStreamGetCaptureInfo` names, after the dependencies it reports, and is then added to
//! the stream's dependencies (`cudaStreamUpdateCaptureDependencies`): the object is reachable
//! only from that graph, and a capture ended meanwhile leaves at worst an unreachable node of
//! it, never a real run. Every step holds the graph-mutation lock of
//! [`keep_alive`](crate::device::keep_alive): the dependency array CUDA hands back is one
//! buffer per stream that the next query with dependencies rewrites (probed on CUDA 13.0),
//! and NVIDIA's graphs must not be changed from two threads at once.
//!
//! The node then becomes the stream's only dependency (`cudaStreamSetCaptureDependencies`): it
//! comes after everything the stream depended on, so nothing is lost from the order, and the
//! next node depends on it alone. The read, the node and the update happen under the write side
//! of the capture-transition lock, which every call of this crate that CUDA captures into a
//! stream holds the read side of: no work of this crate is captured on the stream in between.
//! (Adding the node to the dependencies instead, as this crate once did, made consecutive hand-
//! added nodes each depend on all the ones before: on the GPU, three threads recording external
//! events into one capture slowed `cudaGraphAddEventRecordNode` and the instantiation to a
//! standstill.) Raw work that bypasses the crate (FFI on `as_raw`) onto the stream from another
//! thread at the same moment is the race of two threads enqueuing onto one stream.
//!
//! What CUDA documents, and this relies on: the dependency array is valid "until the next API
//! call which operates on the stream" (this crate's reads of it are serialized; another
//! thread's enqueue on the same capturing stream during the copy is the caller's race, as any
//! two threads enqueuing onto one stream at once). Dependencies with edge data other than the
//! default (a programmatic dependent launch in the capture) are read with it on CUDA 13 and
//! followed through full edges, a stricter order; CUDA 12's call here reads no edge data and
//! answers `cudaErrorLossyQuery` for them, and nothing is added. If the dependency
//! update fails after the node was added (an invalidated capture, a foreign end), the node
//! stays in the graph, ordered after the work before it but not before the work after; the
//! error says so by its call name, and such a capture should not be launched.

use super::StreamRef;
use super::capture_status::{CaptureInfo, CaptureStatus};
use crate::call::transitions::Transition;
use crate::device::keep_alive::{graph_mutations, keep_alive_locked};
use crate::ffi::error::{Result, check};
use crate::sys;
use std::ffi::{c_ulonglong, c_void};

/// The dependency array CUDA's graph calls take: null for none.
pub(crate) fn dependency_pointer(dependencies: &[sys::cudaGraphNode_t]) -> *const sys::cudaGraphNode_t {
    if dependencies.is_empty() { std::ptr::null() } else { dependencies.as_ptr() }
}

/// The node to add, built from the address of the object the graph keeps.
pub(crate) enum CaptureNode {
    /// A host node running `function(data)` at each launch.
    Host(unsafe extern "C" fn(*mut c_void)),
    /// A node that records this event at each launch (as `cudaEventRecordExternal` would).
    EventRecord(sys::cudaEvent_t),
    /// A node that waits for this event's last record at each launch (as
    /// `cudaEventWaitExternal` would).
    EventWait(sys::cudaEvent_t),
}

/// What [`add_to_capture`] did.
pub(crate) enum Added {
    /// The node is in the capture's graph, after the stream's work so far, and the stream's
    /// next captured work depends on it; the graph keeps the object for as long as it or
    /// anything made from it needs it.
    Node,
    /// The stream's capture is not active, or is not the one expected: nothing was added, and
    /// the object is still the caller's.
    NotCapturing,
}

/// Adds `node` to the graph of `stream`'s active capture (of id `expected`,
/// when given), after the stream's current dependencies, hands `object` to that graph (a CUDA
/// user object: freed once no graph or executable made from it needs it), and adds the node to
/// the stream's dependencies. A host node's data is the object. `_transition`, the write side of
/// the capture-transition lock, keeps captures of this crate from beginning, ending or being
/// joined meanwhile (and their graphs from being destroyed), and keeps out every call of this
/// crate that CUDA captures into a stream (records, waits, launches hold the read side while a
/// capture may exist): CUDA adds their nodes to the same graph, which must not be changed from
/// two threads at once (a captured launch beside a node added by hand crashed libcuda). The object is
/// taken out of `object` only when the graph takes it: otherwise the caller drops it, after
/// its locks (a closure's drop may call into this crate).
///
/// # Errors
/// CUDA's errors. The object, once handed to the graph, stays with it on every error: a node
/// that failed to be added, or one added that the stream does not depend on (its capture
/// ended meanwhile, outside this crate), never runs outside that graph.
pub(crate) fn add_to_capture<T: Send + 'static>(
    stream: &StreamRef,
    expected: Option<u64>,
    object: &mut Option<Box<T>>,
    node: CaptureNode,
    _transition: &Transition,
) -> Result<Added> {
    let _current = stream.enter_runtime()?;
    let serialized = graph_mutations();
    let (info, graph, dependencies) = capture_frontier(stream)?;
    if info.status != CaptureStatus::Active || expected.is_some_and(|id| id != info.id) {
        return Ok(Added::NotCapturing);
    }
    let data = keep_alive_locked(graph, stream.device(), object, &serialized)?;
    let dependencies_ptr = dependency_pointer(&dependencies);
    let mut added: sys::cudaGraphNode_t = std::ptr::null_mut();
    let code = match node {
        CaptureNode::Host(function) => {
            let params = sys::cudaHostNodeParams { fn_: Some(function), userData: data.cast_mut().cast() };
            // SAFETY: the live graph of an active capture, changed by no other thread (the
            // lock); `dependencies` are nodes of it; `params` names a function whose data the
            // graph keeps alive.
            unsafe { sys::cudaGraphAddHostNode(&mut added, graph, dependencies_ptr, dependencies.len(), &params) }
        }
        // SAFETY: as above; the graph keeps the event alive.
        CaptureNode::EventRecord(event) => unsafe {
            sys::cudaGraphAddEventRecordNode(&mut added, graph, dependencies_ptr, dependencies.len(), event)
        },
        // SAFETY: as above.
        CaptureNode::EventWait(event) => unsafe {
            sys::cudaGraphAddEventWaitNode(&mut added, graph, dependencies_ptr, dependencies.len(), event)
        },
    };
    check(code, "cudaGraphAddNode")?;
    let set = sys::cudaStreamUpdateCaptureDependenciesFlags::cudaStreamSetCaptureDependencies.0;
    // SAFETY: a live stream; one node of its capture's graph; no edge data (default edges).
    #[cfg(cudart_13)]
    let code =
        unsafe { sys::cudaStreamUpdateCaptureDependencies(stream.as_raw(), &mut added, std::ptr::null(), 1, set) };
    // SAFETY: as above, with CUDA 12's signature.
    #[cfg(not(cudart_13))]
    let code = unsafe { sys::cudaStreamUpdateCaptureDependencies(stream.as_raw(), &mut added, 1, set) };
    check(code, "cudaStreamUpdateCaptureDependencies")?;
    drop(serialized);
    Ok(Added::Node)
}

/// The capture status, id, graph and current dependencies of `stream`, the dependencies copied
/// out of CUDA's buffer at once. The caller holds the graph-mutation lock (every read of the
/// dependencies in this crate does).
fn capture_frontier(stream: &StreamRef) -> Result<(CaptureInfo, sys::cudaGraph_t, Vec<sys::cudaGraphNode_t>)> {
    let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
    let mut id: c_ulonglong = 0;
    let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
    let mut dependencies: *const sys::cudaGraphNode_t = std::ptr::null();
    let mut count: usize = 0;
    // Asked for, so that CUDA does not refuse a frontier with edges other than the default
    // (`cudaErrorLossyQuery`: a programmatic dependent launch in the capture), then not used:
    // the node comes after each dependency through a full (default) edge, an order at least as
    // strict as any other edge type's.
    #[cfg(cudart_13)]
    let mut edges: *const sys::cudaGraphEdgeData = std::ptr::null();
    // SAFETY: a live stream; valid out-pointers.
    #[cfg(cudart_13)]
    let code = unsafe {
        sys::cudaStreamGetCaptureInfo(
            stream.as_raw(),
            &mut status,
            &mut id,
            &mut graph,
            &mut dependencies,
            &mut edges,
            &mut count,
        )
    };
    // SAFETY: as above, with CUDA 12's signature.
    #[cfg(not(cudart_13))]
    let code = unsafe {
        sys::cudaStreamGetCaptureInfo(stream.as_raw(), &mut status, &mut id, &mut graph, &mut dependencies, &mut count)
    };
    check(code, "cudaStreamGetCaptureInfo")?;
    let info = CaptureInfo { status: CaptureStatus::of(status), id };
    let copied = if info.status == CaptureStatus::Active && count > 0 && !dependencies.is_null() {
        // SAFETY: CUDA's array of `count` nodes, valid until the next query of this stream's
        // dependencies, which the caller's lock keeps from happening before this copy.
        unsafe { std::slice::from_raw_parts(dependencies, count) }.to_vec()
    } else {
        Vec::new()
    };
    Ok((info, graph, copied))
}
