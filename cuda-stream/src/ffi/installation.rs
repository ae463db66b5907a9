//! What is installed: the versions of the driver and of the linked runtime, and why no GPU can
//! be used when an error says so.

use super::error::{Error, Result, check};
use super::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::ffi::c_int;

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
