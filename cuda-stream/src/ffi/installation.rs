//! What is installed: the versions of the driver and of the linked runtime, and why no GPU can
//! be used when an error says so.

use super::error::{Error, Result, check};
use super::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::ffi::c_int;
use std::fmt;

/// The version of the installed driver, e.g. 13000 for CUDA 13.0
/// ([`cudaDriverGetVersion`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART____VERSION.html)).
/// 0 when no driver is installed.
///
/// # Errors
/// Hardly ever: the call needs no device.
pub fn driver_version() -> Result<i32> {
    refuse_inside_host_fn()?;
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid out-pointer.
    check(unsafe { sys::cudaDriverGetVersion(&mut version) }, "cudaDriverGetVersion")?;
    Ok(version)
}

/// The version of the CUDA runtime linked into this binary, e.g. 13000
/// ([`cudaRuntimeGetVersion`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART____VERSION.html)).
///
/// # Errors
/// Hardly ever: the call needs no device.
pub fn runtime_version() -> Result<i32> {
    refuse_inside_host_fn()?;
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid out-pointer.
    check(unsafe { sys::cudaRuntimeGetVersion(&mut version) }, "cudaRuntimeGetVersion")?;
    Ok(version)
}

/// Why no GPU can be used, read from the code CUDA returned.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GpuUnavailable {
    /// No NVIDIA driver is installed (`libcuda.so` is missing, or only its stub is there).
    NoDriver,
    /// The driver is older than this binary's CUDA runtime.
    InsufficientDriver,
    /// The driver's kernel module and its user-space library disagree.
    DriverMismatch,
    /// A driver, but no CUDA device (or none visible through `CUDA_VISIBLE_DEVICES`).
    NoDevice,
}

impl fmt::Display for GpuUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuUnavailable::NoDriver => "no NVIDIA driver (libcuda.so.1 not found, or only the toolkit's stub)",
            GpuUnavailable::InsufficientDriver => "the NVIDIA driver is older than this binary's CUDA runtime",
            GpuUnavailable::DriverMismatch => {
                "the NVIDIA driver's kernel module and its user-space library are of different versions"
            }
            GpuUnavailable::NoDevice => "no CUDA device (none installed, or none visible through CUDA_VISIBLE_DEVICES)",
        })
    }
}

impl std::error::Error for GpuUnavailable {}

impl Error {
    /// Whether this error means the machine has no usable GPU, and why. Every constructor in
    /// this crate returns such an error on a machine without a driver or a device.
    pub fn gpu_unavailable(&self) -> Option<GpuUnavailable> {
        let code = self.cuda_code()?.raw();
        match code {
            sys::cudaError::cudaErrorNoDevice => Some(GpuUnavailable::NoDevice),
            sys::cudaError::cudaErrorStubLibrary => Some(GpuUnavailable::NoDriver),
            sys::cudaError::cudaErrorSystemDriverMismatch => Some(GpuUnavailable::DriverMismatch),
            sys::cudaError::cudaErrorInsufficientDriver => match driver_version() {
                Ok(0) => Some(GpuUnavailable::NoDriver),
                _ => Some(GpuUnavailable::InsufficientDriver),
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GpuUnavailable;

    #[test]
    fn each_reason_for_no_gpu_says_what_to_look_at() {
        let reasons = [
            (GpuUnavailable::NoDriver, "libcuda.so.1"),
            (GpuUnavailable::InsufficientDriver, "older than"),
            (GpuUnavailable::DriverMismatch, "kernel module"),
            (GpuUnavailable::NoDevice, "CUDA_VISIBLE_DEVICES"),
        ];
        for (reason, words) in reasons {
            let text = reason.to_string();
            assert!(text.contains(words), "{reason:?}: {text}");
        }
    }
}
