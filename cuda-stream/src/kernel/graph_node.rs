//! Kernel nodes of graphs built node by node: a typed [`Kernel`] with its [`LaunchConfig`] and
//! arguments, added to a [`GraphBuilder`]'s graph or conditional body
//! ([`cudaGraphAddKernelNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html),
//! `cudaGraphKernelNodeSetAttribute`); and [`ConditionHandle`] as a kernel argument.

use super::{Kernel, KernelArgs, LaunchConfig, UNCHECKED};
use crate::call::race::CapturedAccesses;
use crate::conditional::{ConditionHandle, GraphBuilder, GraphNode};
use crate::ffi::error::{Error, Result, check};
use crate::memory::DeviceCopy;
use crate::stream::capture_node::dependency_pointer;
use crate::sys;
use std::sync::atomic::Ordering;

// SAFETY: a `cudaGraphConditionalHandle`, one 64-bit integer (`repr(transparent)`): plain old
// data that owns nothing.
unsafe impl DeviceCopy for ConditionHandle {}

impl GraphBuilder<'_> {
    /// Adds a node that runs `kernel` with `config` and `args` after the nodes `after`, at
    /// every launch of the graph (and at every run of the body it is in)
    /// ([`cudaGraphAddKernelNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// CUDA copies the arguments into the node ("The kernelParams [...] array, as well as the
    /// argument values it points to, are copied during this call"): `args` need not outlive
    /// the call, and what they point to is the safety contract below. The configuration's
    /// priority, cluster, memory synchronization domain and cooperative attributes become the
    /// node's (`cudaGraphKernelNodeSetAttribute`; a node's priority applies when the graph is
    /// instantiated with [`InstantiateOptions::use_node_priority`](crate::InstantiateOptions::use_node_priority)).
    /// The argument check of [`Kernel::launch`] applies here too.
    ///
    /// # Safety
    /// The kernel runs at every launch of every executable made from this graph (or updated
    /// from it), as many times as its body runs: every pointer it reads or writes through must
    /// be valid for those accesses on the graph's device whenever such a launch runs, and no
    /// other work may access that memory concurrently in a way the kernel does not expect.
    /// A kernel that calls `cudaGraphSetConditional` does so with a [`ConditionHandle`] of this
    /// graph (of the node it steers), and never from two threads at once (undefined in CUDA).
    /// Parameters that differ from `A` in ways the size check cannot see (see the
    /// [module docs](mod@crate::kernel)) read garbage.
    ///
    /// # Errors
    /// [`Error::InvalidLaunch`] for a configuration a kernel node cannot take (a launch
    /// completion event: the graph would not keep the event; programmatic dependent launch,
    /// which graphs express as an edge; more than 4 GiB of dynamic shared memory), and as
    /// [`Kernel::launch`] refuses it before CUDA ([`Error::PriorityOutOfRange`], ...);
    /// [`Error::KernelArguments`]; [`Error::NoKernelImage`]; [`Error::GraphMisuse`] for a node
    /// of another graph or body in `after`, or while a capture leaked with `mem::forget` writes
    /// into this level; [`Error::InsideHostFn`]; CUDA's errors (the node is removed again when
    /// CUDA refuses one of its attributes).
    pub unsafe fn add_kernel<A: KernelArgs>(
        &mut self,
        kernel: &Kernel<A>,
        config: &LaunchConfig<'_>,
        args: A,
        after: &[GraphNode],
    ) -> Result<GraphNode> {
        if config.launch_completion_event().is_some() {
            return Err(Error::InvalidLaunch(
                "a kernel node cannot record a launch completion event (the graph would not keep the event)",
            ));
        }
        if config.is_programmatic() {
            return Err(Error::InvalidLaunch(
                "programmatic dependent launch is an edge of a graph, not an attribute of a kernel node",
            ));
        }
        let device = self.device();
        let node = self.add_node_with(after, |graph, dependencies| {
            // The device is current here (`add_node_with`).
            if kernel.signature.load(Ordering::Acquire) == UNCHECKED {
                kernel.check_signature(device)?;
            }
            config.check(device)?;
            config.with_raw(std::ptr::null_mut(), |raw| {
                let shared = u32::try_from(raw.dynamicSmemBytes)
                    .map_err(|_| Error::InvalidLaunch("a kernel node takes at most 4 GiB of dynamic shared memory"))?;
                args.with_pointers(|pointers| {
                    let params = sys::cudaKernelNodeParams {
                        func: kernel.as_host_stub().cast_mut(),
                        gridDim: raw.gridDim,
                        blockDim: raw.blockDim,
                        sharedMemBytes: shared,
                        kernelParams: pointers,
                        extra: std::ptr::null_mut(),
                    };
                    let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
                    let dependencies_ptr = dependency_pointer(dependencies);
                    // SAFETY: the level's live graph, used by nothing else meanwhile (the
                    // builder's exclusive borrow); `dependencies` are nodes of it, checked by
                    // level; `func` a kernel's host stub (`Kernel::from_host_stub`), and one
                    // pointer per parameter (`KernelArgs`), read and copied by CUDA during the
                    // call; a valid out-pointer. What the kernel does when it runs is the
                    // caller's contract.
                    let code = unsafe {
                        sys::cudaGraphAddKernelNode(&mut node, graph, dependencies_ptr, dependencies.len(), &params)
                    };
                    if code != sys::cudaError::cudaSuccess {
                        return Err(device.launch_error(
                            code,
                            "cudaGraphAddKernelNode",
                            kernel.name(),
                            kernel.built_for(),
                        ));
                    }
                    // SAFETY: `attrs` points to `numAttrs` attributes that live for this call
                    // (`LaunchConfig::with_raw`).
                    let attributes = unsafe { std::slice::from_raw_parts(raw.attrs, raw.numAttrs as usize) };
                    for attribute in attributes {
                        // SAFETY: the node just added; an attribute id and its value, as a
                        // launch takes them.
                        let code = unsafe { sys::cudaGraphKernelNodeSetAttribute(node, attribute.id, &attribute.val) };
                        if let Err(error) = check(code, "cudaGraphKernelNodeSetAttribute") {
                            // SAFETY: the node just added, never handed out: removed once.
                            let _ = check(unsafe { sys::cudaGraphDestroyNode(node) }, "cudaGraphDestroyNode");
                            return Err(error);
                        }
                    }
                    Ok(node)
                })
            })
        })?;
        // Each launch of the graph replays the declared accesses (see `race`).
        self.add_race_accesses(CapturedAccesses::of_node(kernel.name(), config.declared_accesses()));
        Ok(node)
    }
}
