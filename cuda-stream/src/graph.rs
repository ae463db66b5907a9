//! Graphs: a captured [`Graph`], instantiated into a [`GraphExec`] that replays it on any stream
//! of its device ([graphs](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
//!
//! What a graph needs at run time (the closures of its host nodes, the events of its external
//! waits) is owned by the graph itself, as CUDA user objects: CUDA releases them once no graph,
//! clone or executable needs them and every launch that used them has completed. So dropping a
//! `Graph` or a `GraphExec` never waits for the device and never frees what a pending launch
//! still uses.

use crate::device::Device;
use crate::error::{Result, check};
use crate::host_fn::{call_outside_host_fn, refuse_inside_host_fn, run_guarded};
use crate::stream::StreamRef;
use crate::sys;
use std::ffi::c_void;

/// Hands `value` to `graph` as a CUDA user object that the graph owns (moved, not retained
/// twice): CUDA drops it when the graph and everything made from it are done with it. Returns
/// where it lives until then.
pub(crate) fn keep_alive<T: Send + 'static>(graph: sys::cudaGraph_t, value: Box<T>) -> Result<*const T> {
    refuse_inside_host_fn()?;
    let data = Box::into_raw(value);
    let mut object: sys::cudaUserObject_t = std::ptr::null_mut();
    // SAFETY: `release::<T>` takes back exactly this box, once, when CUDA drops the object.
    // The flag is the one CUDA requires.
    let code = unsafe {
        sys::cudaUserObjectCreate(
            &mut object,
            data.cast(),
            Some(release::<T>),
            1,
            sys::cudaUserObjectFlags::cudaUserObjectNoDestructorSync.0 as _,
        )
    };
    if let Err(error) = check(code, "cudaUserObjectCreate") {
        // SAFETY: CUDA did not take `data`: we still own the box, freed once here.
        drop(unsafe { Box::from_raw(data) });
        return Err(error);
    }
    // SAFETY: `graph` is the live graph of a capture in progress; our one reference moves to it.
    let code = unsafe {
        sys::cudaGraphRetainUserObject(graph, object, 1, sys::cudaUserObjectRetainFlags::cudaGraphUserObjectMove.0 as _)
    };
    if let Err(error) = check(code, "cudaGraphRetainUserObject") {
        // SAFETY: we still hold the one reference; releasing it makes CUDA run `release`.
        let _ = check(unsafe { sys::cudaUserObjectRelease(object, 1) }, "cudaUserObjectRelease");
        return Err(error);
    }
    Ok(data)
}

/// A user object's destructor: drops the box on CUDA's thread, as a host function would run.
///
/// # Safety
/// `data` must come from `Box::into_raw(Box<T>)` in [`keep_alive`], and be passed here once.
unsafe extern "C" fn release<T>(data: *mut c_void) {
    // SAFETY: the caller's contract.
    let value = unsafe { Box::from_raw(data.cast::<T>()) };
    run_guarded(None, move || drop(value));
}

/// A captured graph (`cudaGraph_t`), destroyed on drop.
#[derive(Debug)]
pub struct Graph {
    raw: sys::cudaGraph_t,
    device: Device,
}

// SAFETY: a graph handle may be used from any thread, one call at a time.
unsafe impl Send for Graph {}
// Not Sync, by NVIDIA's graph thread-safety rule: "Graph objects (cudaGraph_t, CUgraph) are not
// internally synchronized and must not be accessed concurrently from multiple threads",
// including calls that look read-only, such as cudaGraphInstantiate and cudaGraphClone.

impl Graph {
    pub(crate) fn from_captured(raw: sys::cudaGraph_t, device: Device) -> Graph {
        Graph { raw, device }
    }

    /// Instantiates the graph for launching
    /// ([`cudaGraphInstantiate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// The executable shares what the graph owns (host-function closures): both keep it alive.
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn instantiate(&self) -> Result<GraphExec> {
        refuse_inside_host_fn()?;
        let mut exec: sys::cudaGraphExec_t = std::ptr::null_mut();
        // SAFETY: a live graph, used by this thread only (`&self` of a !Sync type); `exec` is a
        // valid out-pointer.
        check(unsafe { sys::cudaGraphInstantiate(&mut exec, self.raw, 0) }, "cudaGraphInstantiate")?;
        Ok(GraphExec { raw: exec, device: self.device })
    }

    /// The raw handle.
    pub fn as_raw(&self) -> sys::cudaGraph_t {
        self.raw
    }

    /// The device the graph was captured on.
    pub fn device(&self) -> Device {
        self.device
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let raw = self.raw as usize;
        destroy_outside_captures(move || {
            // SAFETY: we own the graph and destroy it once; executables made from it do not
            // need it, and what its nodes use is owned by user objects CUDA releases.
            let _ = check(unsafe { sys::cudaGraphDestroy(raw as sys::cudaGraph_t) }, "cudaGraphDestroy");
        });
    }
}

/// Runs `destroy` (of a graph or an executable) outside any host function (see
/// `call_outside_host_fn`), with the thread's capture mode set to Relaxed, then restores the
/// mode ([`cudaThreadExchangeStreamCaptureMode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)):
/// destroying a graph or an executable is a "potentially unsafe" call that CUDA otherwise
/// refuses, invalidating the capture, while another thread holds a Global capture (probed on
/// CUDA 13.0). Nothing of ours is captured by it, so it is safe here.
fn destroy_outside_captures(destroy: impl FnOnce() + Send + 'static) {
    call_outside_host_fn(move || relaxed_capture_mode(destroy));
}

fn relaxed_capture_mode(destroy: impl FnOnce()) {
    let mut mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed;
    // SAFETY: `mode` is a valid in/out pointer.
    let exchanged =
        check(unsafe { sys::cudaThreadExchangeStreamCaptureMode(&mut mode) }, "cudaThreadExchangeStreamCaptureMode")
            .is_ok();
    destroy();
    if exchanged {
        // SAFETY: as above; puts back the mode this thread had.
        let _ = check(
            unsafe { sys::cudaThreadExchangeStreamCaptureMode(&mut mode) },
            "cudaThreadExchangeStreamCaptureMode",
        );
    }
}

/// An executable graph, launched on streams of its device; destroyed on drop (CUDA frees an
/// executable that is still running once it completes).
#[derive(Debug)]
pub struct GraphExec {
    raw: sys::cudaGraphExec_t,
    device: Device,
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
    /// # Errors
    /// CUDA's errors.
    #[inline]
    pub fn launch(&self, stream: &StreamRef) -> Result<()> {
        match stream.enter()? {
            // SAFETY: a live executable used by this thread only, and a live real stream.
            None => unsafe { crate::driver::graph_launch(self.raw, stream.as_raw()) },
            // SAFETY: as above, with a special handle of the current device.
            Some(_current) => check(unsafe { sys::cudaGraphLaunch(self.raw, stream.as_raw()) }, "cudaGraphLaunch"),
        }
    }

    /// Uploads the graph to the device ahead of its first launch
    /// ([`cudaGraphUpload`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn upload(&self, stream: &StreamRef) -> Result<()> {
        let _current = stream.enter()?;
        // SAFETY: a live executable used by this thread only, and a live stream.
        check(unsafe { sys::cudaGraphUpload(self.raw, stream.as_raw()) }, "cudaGraphUpload")
    }

    /// The raw handle.
    pub fn as_raw(&self) -> sys::cudaGraphExec_t {
        self.raw
    }

    /// The device the graph was captured on.
    pub fn device(&self) -> Device {
        self.device
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let raw = self.raw as usize;
        destroy_outside_captures(move || {
            // SAFETY: we own the executable and destroy it once. CUDA frees it after launches
            // in flight complete, and releases the user objects they use only then: no wait for
            // the device is needed here, and nothing is freed early.
            let _ = check(unsafe { sys::cudaGraphExecDestroy(raw as sys::cudaGraphExec_t) }, "cudaGraphExecDestroy");
        });
    }
}
