//! What a stream says of its capture: the status, the capture's id and the graph it builds
//! (`cudaStreamIsCapturing`, `cudaStreamGetCaptureInfo`, the reads CUDA allows on a capturing
//! stream). Beginning and ending captures is the [graph layer](crate::capture)'s.

use super::StreamRef;
use crate::call::live_captures::no_capture_transitions;
use crate::call::uncaptured_calls;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::ffi::c_ulonglong;

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

impl CaptureStatus {
    pub(crate) fn of(raw: sys::cudaStreamCaptureStatus) -> CaptureStatus {
        match raw {
            sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone => CaptureStatus::None,
            sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusActive => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        }
    }
}

/// What `cudaStreamGetCaptureInfo` reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CaptureInfo {
    /// The status.
    pub status: CaptureStatus,
    /// The capture's id, unique in the process (meaningful while not [`CaptureStatus::None`]).
    pub id: u64,
}

/// A capture's status, id and the graph it is building (null when not capturing).
pub(crate) struct CaptureState {
    pub(crate) info: CaptureInfo,
    pub(crate) graph: sys::cudaGraph_t,
}

impl StreamRef {
    /// Whether this stream is being captured
    /// ([`cudaStreamIsCapturing`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// `cudaErrorStreamCaptureImplicit` for the legacy stream while another stream captures in
    /// Global mode.
    #[inline]
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        let status = match self.enter_to_read()? {
            None => driver::stream_is_capturing(self.as_raw())?,
            Some(_current) => {
                let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
                // SAFETY: a special handle of the current device; a valid out-pointer.
                check(unsafe { sys::cudaStreamIsCapturing(self.as_raw(), &mut status) }, "cudaStreamIsCapturing")?;
                status
            }
        };
        Ok(CaptureStatus::of(status))
    }

    /// [`Error::CaptureMisuse`] with `why` while this stream is being captured (or its
    /// capture is invalidated), through `cudaStreamIsCapturing`, a query CUDA allows on a
    /// capturing stream: the check itself never disturbs the capture.
    pub(crate) fn refuse_capturing(&self, why: &'static str) -> Result<()> {
        match self.capture_status()? {
            CaptureStatus::None => Ok(()),
            _ => Err(Error::CaptureMisuse(why)),
        }
    }

    /// Runs `call`, which puts work on this stream: the enqueue under the crate's capture
    /// protocol. While no capture may be in progress, `call` is a fast call (a capture of this
    /// crate does not begin until it has returned: one thread-local store, no lock); otherwise
    /// it holds the read side of the capture-transition lock, so no capture begins, ends or is
    /// joined meanwhile, and no node is added by hand to a capture's graph while CUDA may
    /// capture `call`'s work into it. Refused inside a host function before any lock.
    #[inline(always)]
    pub(crate) fn enqueue<R>(&self, call: impl FnOnce() -> Result<R>) -> Result<R> {
        self.enqueue_with(None, call)
    }

    /// [`StreamRef::enqueue`] for work that must not go into a capture (a graph launch or
    /// upload, which CUDA would refuse by invalidating the capture, a completion's event): on a
    /// capturing stream, [`Error::CaptureMisuse`] with `why`, before CUDA. The per-thread
    /// stream, which another library may capture at any time, is always checked.
    #[inline(always)]
    pub(crate) fn enqueue_uncaptured<R>(&self, why: &'static str, call: impl FnOnce() -> Result<R>) -> Result<R> {
        self.enqueue_with(Some(why), call)
    }

    #[inline(always)]
    fn enqueue_with<R>(&self, refuse_capturing: Option<&'static str>, call: impl FnOnce() -> Result<R>) -> Result<R> {
        let mut call = Some(call);
        if refuse_capturing.is_none() || !self.is_thread_bound() {
            if let Some(Some(done)) = uncaptured_calls::outside_captures(|| call.take().map(|call| call())) {
                return done;
            }
        }
        match call {
            Some(call) => self.enqueue_held(refuse_capturing, call),
            // Taken only by a fast call that ran, and returned above.
            None => Err(Error::CaptureMisuse("a fast call did not return its result")),
        }
    }

    #[cold]
    #[inline(never)]
    fn enqueue_held<R>(&self, refuse_capturing: Option<&'static str>, call: impl FnOnce() -> Result<R>) -> Result<R> {
        // Never blocks a host function behind a waiting writer (CUDA's callback thread would
        // hold up the very work the writer's readers wait for).
        refuse_inside_host_fn()?;
        let _transitions = no_capture_transitions();
        if let Some(why) = refuse_capturing {
            if self.may_be_capturing()? {
                return Err(Error::CaptureMisuse(why));
            }
        }
        call()
    }

    /// The capture status and the capture's unique id
    /// ([`cudaStreamGetCaptureInfo`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// As [`StreamRef::capture_status`].
    pub fn capture_info(&self) -> Result<CaptureInfo> {
        Ok(capture_state(self)?.info)
    }
}

/// [`Error::CaptureMisuse`] with `why` for the legacy stream, which no capture can include.
pub(crate) fn refuse_legacy(stream: &StreamRef, why: &'static str) -> Result<()> {
    match stream.builtin() {
        Some(builtin) if builtin.is_legacy() => Err(Error::CaptureMisuse(why)),
        _ => Ok(()),
    }
}

/// The capture status, id and graph of `stream`
/// ([`cudaStreamGetCaptureInfo`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
pub(crate) fn capture_state(stream: &StreamRef) -> Result<CaptureState> {
    let _current = stream.enter_runtime()?;
    let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
    let mut id: c_ulonglong = 0;
    let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
    let raw = stream.as_raw();
    // SAFETY: a live stream; `status`, `id` and `graph` are valid out-pointers; the outputs we
    // do not want are null, which the API allows. CUDA 13 added the edge-data output.
    #[cfg(cudart_13)]
    let code = unsafe {
        sys::cudaStreamGetCaptureInfo(
            raw,
            &mut status,
            &mut id,
            &mut graph,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    // SAFETY: as above, with CUDA 12's signature.
    #[cfg(not(cudart_13))]
    let code = unsafe {
        sys::cudaStreamGetCaptureInfo(raw, &mut status, &mut id, &mut graph, std::ptr::null_mut(), std::ptr::null_mut())
    };
    check(code, "cudaStreamGetCaptureInfo")?;
    Ok(CaptureState { info: CaptureInfo { status: CaptureStatus::of(status), id }, graph })
}
