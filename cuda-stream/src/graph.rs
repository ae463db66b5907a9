//! Graph capture: record a stream's work into a [`Graph`] once, then replay it as a
//! [`GraphExec`] on any stream
//! ([stream capture](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html),
//! [graphs](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).

use crate::device::Device;
use crate::error::{Error, Result, check};
use crate::host_fn::run_repeatable;
use crate::stream::{Builtin, Ownership, Stream};
use crate::sys;
use std::any::Any;
use std::ffi::c_ulonglong;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// How a capture interacts with unsafe calls on other threads (`cudaStreamCaptureMode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// Unsafe calls (like a legacy-stream synchronize) are refused on every thread.
    Global,
    /// Refused on this thread only.
    ThreadLocal,
    /// Not refused.
    Relaxed,
}

impl CaptureMode {
    fn raw(self) -> sys::cudaStreamCaptureMode {
        match self {
            CaptureMode::Global => sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal,
            CaptureMode::ThreadLocal => sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
            CaptureMode::Relaxed => sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed,
        }
    }
}

/// Whether a stream is being captured.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing: work runs.
    None,
    /// Capturing: work is recorded into a graph.
    Active,
    /// The capture broke (for example by a synchronize); ending it returns an error.
    Invalidated,
}

/// What `cudaStreamGetCaptureInfo` reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CaptureInfo {
    /// The status.
    pub status: CaptureStatus,
    /// The capture's unique id (meaningful while not [`CaptureStatus::None`]).
    pub id: u64,
}

fn status_of(raw: sys::cudaStreamCaptureStatus) -> CaptureStatus {
    match raw {
        sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone => CaptureStatus::None,
        sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusActive => CaptureStatus::Active,
        _ => CaptureStatus::Invalidated,
    }
}

/// Closures a graph's host nodes call: kept alive as long as any graph or executable uses them.
type KeepAlive = Vec<Arc<dyn Any + Send + Sync>>;

impl Stream {
    /// Starts capturing this stream's work into a graph
    /// ([`cudaStreamBeginCapture`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// Work enqueued until [`Capture::end`] is recorded, not run; streams that wait on this
    /// one join the capture. Dropping the guard without `end` ends the capture and discards
    /// the graph.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] on the legacy stream (CUDA cannot capture it); CUDA's
    /// `cudaErrorIllegalState` when the stream is already capturing.
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<Capture<'_>> {
        let legacy = match self.ownership() {
            Ownership::Builtin(Builtin::Legacy) => true,
            Ownership::Builtin(Builtin::Null) => !crate::NULL_STREAM_IS_PER_THREAD,
            _ => false,
        };
        if legacy {
            return Err(Error::CaptureMisuse("the legacy default stream cannot be captured"));
        }
        let _current = self.enter()?;
        // SAFETY: a live stream; the mode is a valid constant.
        check(unsafe { sys::cudaStreamBeginCapture(self.as_raw(), mode.raw()) }, "cudaStreamBeginCapture")?;
        Ok(Capture { stream: self, keep_alive: Vec::new(), ended: false })
    }

    /// Whether this stream is being captured
    /// ([`cudaStreamIsCapturing`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// `cudaErrorStreamCaptureImplicit` for the legacy stream while another stream captures in
    /// global mode.
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        let _current = self.enter()?;
        let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
        // SAFETY: a live stream; `status` is a valid out-pointer.
        check(unsafe { sys::cudaStreamIsCapturing(self.as_raw(), &mut status) }, "cudaStreamIsCapturing")?;
        Ok(status_of(status))
    }

    pub(crate) fn is_capturing(&self) -> Result<bool> {
        Ok(self.capture_status()? != CaptureStatus::None)
    }

    /// The capture status and the capture's unique id
    /// ([`cudaStreamGetCaptureInfo`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// As [`Stream::capture_status`].
    pub fn capture_info(&self) -> Result<CaptureInfo> {
        let _current = self.enter()?;
        let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
        let mut id: c_ulonglong = 0;
        // SAFETY: a live stream; `status` and `id` are valid out-pointers; the outputs we do not
        // want are null, which the API allows. CUDA 13 added the edge-data output.
        #[cfg(cudart_13)]
        let code = unsafe {
            sys::cudaStreamGetCaptureInfo(
                self.as_raw(),
                &mut status,
                &mut id,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        // SAFETY: as above, with CUDA 12's signature.
        #[cfg(not(cudart_13))]
        let code = unsafe {
            sys::cudaStreamGetCaptureInfo(
                self.as_raw(),
                &mut status,
                &mut id,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(code, "cudaStreamGetCaptureInfo")?;
        Ok(CaptureInfo { status: status_of(status), id })
    }
}

/// An active capture of one stream. [`Capture::end`] returns the graph; dropping the guard
/// ends the capture and discards it.
#[derive(Debug)]
#[must_use = "dropping the capture discards the graph"]
pub struct Capture<'a> {
    stream: &'a Stream,
    keep_alive: KeepAlive,
    ended: bool,
}

impl Capture<'_> {
    /// Adds a host function to the graph on `stream` (the captured stream, or one that joined
    /// the capture). It runs at every replay, so it is `Fn`, and the graph and its executables
    /// keep it alive.
    ///
    /// # Errors
    /// CUDA's errors (for example `cudaErrorStreamCaptureIsolation` for a stream that has not
    /// joined this capture: then nothing is kept).
    pub fn launch_host_fn<F: Fn() + Send + Sync + 'static>(&mut self, stream: &Stream, f: F) -> Result<()> {
        let f = Arc::new(f);
        let data = Arc::as_ptr(&f).cast_mut().cast();
        stream.enqueue_host_fn(run_repeatable::<F>, data)?;
        self.keep_alive.push(f);
        Ok(())
    }

    /// Ends the capture and returns the graph
    /// ([`cudaStreamEndCapture`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// `cudaErrorStreamCaptureInvalidated` if the capture broke; `cudaErrorStreamCaptureUnjoined`
    /// if a forked stream was not joined back.
    pub fn end(mut self) -> Result<Graph> {
        self.ended = true;
        let raw = end_capture(self.stream)?;
        let device = self.stream.device();
        Ok(Graph { raw, device, keep_alive: Arc::new(std::mem::take(&mut self.keep_alive)) })
    }
}

fn end_capture(stream: &Stream) -> Result<sys::cudaGraph_t> {
    let _current = stream.enter()?;
    let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
    // SAFETY: a live, capturing stream; `graph` is a valid out-pointer.
    let code = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut graph) };
    if code != sys::cudaError::cudaSuccess && !graph.is_null() {
        // SAFETY: a graph the failed end still handed us; destroyed once.
        let _ = unsafe { sys::cudaGraphDestroy(graph) };
    }
    check(code, "cudaStreamEndCapture")?;
    Ok(graph)
}

impl Drop for Capture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            if let Ok(graph) = end_capture(self.stream) {
                // SAFETY: the graph we just received; destroyed once.
                let _ = unsafe { sys::cudaGraphDestroy(graph) };
            }
        }
    }
}

/// A captured graph (`cudaGraph_t`), destroyed on drop.
#[derive(Debug)]
pub struct Graph {
    raw: sys::cudaGraph_t,
    device: Device,
    keep_alive: Arc<KeepAlive>,
}

// SAFETY: graph handles may be used from any thread, one call at a time; every method that
// touches the graph takes `&self` and CUDA's graph APIs on one graph are not called concurrently
// by this type (instantiate reads it).
unsafe impl Send for Graph {}
// SAFETY: `instantiate` only reads the graph.
unsafe impl Sync for Graph {}

impl Graph {
    /// Instantiates the graph for launching
    /// ([`cudaGraphInstantiate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn instantiate(&self) -> Result<GraphExec> {
        let mut exec: sys::cudaGraphExec_t = std::ptr::null_mut();
        // SAFETY: a live graph; `exec` is a valid out-pointer.
        check(unsafe { sys::cudaGraphInstantiate(&mut exec, self.raw, 0) }, "cudaGraphInstantiate")?;
        Ok(GraphExec {
            raw: exec,
            device: self.device,
            keep_alive: Arc::clone(&self.keep_alive),
            launched: AtomicBool::new(false),
        })
    }

    /// The raw handle.
    pub fn as_raw(&self) -> sys::cudaGraph_t {
        self.raw
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: we own the graph; executables made from it do not need it.
        let _ = unsafe { sys::cudaGraphDestroy(self.raw) };
    }
}

/// An executable graph, launched on any stream of its device; destroyed on drop.
#[derive(Debug)]
pub struct GraphExec {
    raw: sys::cudaGraphExec_t,
    device: Device,
    keep_alive: Arc<KeepAlive>,
    launched: AtomicBool,
}

// SAFETY: executable graphs may be launched from any thread.
unsafe impl Send for GraphExec {}
// SAFETY: launching takes `&self`; CUDA orders launches of one executable itself.
unsafe impl Sync for GraphExec {}

impl GraphExec {
    /// Launches the whole graph on `stream`
    /// ([`cudaGraphLaunch`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// CUDA's errors.
    #[inline]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        let _current = stream.enter()?;
        self.launched.store(true, Ordering::Relaxed);
        // SAFETY: a live executable and stream.
        check(unsafe { sys::cudaGraphLaunch(self.raw, stream.as_raw()) }, "cudaGraphLaunch")
    }

    /// Uploads the graph to the device ahead of its first launch
    /// ([`cudaGraphUpload`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        let _current = stream.enter()?;
        // SAFETY: a live executable and stream.
        check(unsafe { sys::cudaGraphUpload(self.raw, stream.as_raw()) }, "cudaGraphUpload")
    }

    /// How many host-function closures this executable keeps alive.
    pub fn host_fns(&self) -> usize {
        self.keep_alive.len()
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        // CUDA frees an executable that is still running once it finishes, but the closures of
        // its host nodes are ours: if there are any and it ever ran, wait for the device before
        // they can be freed. (Only then does this drop block.)
        if self.launched.load(Ordering::Relaxed) && !self.keep_alive.is_empty() {
            let _ = self.device.synchronize();
        }
        // SAFETY: we own the executable and destroy it once.
        let _ = unsafe { sys::cudaGraphExecDestroy(self.raw) };
    }
}
