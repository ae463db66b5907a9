//! What a stream says of its capture: the status, the capture's id and the graph it builds
//! (`cudaStreamIsCapturing`, `cudaStreamGetCaptureInfo`, the reads CUDA allows on a capturing
//! stream). Beginning and ending captures is the [graph layer](crate::capture)'s.

use super::StreamRef;
use super::enqueue::InCapture;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, check};
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
        let current = self.enter_to_read()?;
        // Never beside a capture transition: a read racing another thread's end of the
        // capture crashed libcuda (CUDA 13.0, `cuStreamGetCaptureInfo`).
        let status = self.outside_transitions(InCapture::Captured, || match current {
            None => driver::stream_is_capturing(self.as_raw()),
            Some(_) => {
                let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
                // SAFETY: a special handle of the current device; a valid out-pointer.
                check(unsafe { sys::cudaStreamIsCapturing(self.as_raw(), &mut status) }, "cudaStreamIsCapturing")?;
                Ok(status)
            }
        })?;
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
    // Never beside a capture transition (see `capture_status`).
    stream.outside_transitions(InCapture::Captured, || read_capture_state(stream))
}

fn read_capture_state(stream: &StreamRef) -> Result<CaptureState> {
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
