//! The few driver API entry points that the runtime API has no equivalent for, fetched once
//! through the runtime
//! ([`cudaGetDriverEntryPointByVersion`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DRIVER__ENTRY__POINT.html)),
//! so that nothing links against `libcuda` directly.
//!
//! Driver result codes (`CUresult`) are reported as [`Error::Cuda`] under the driver
//! function's name; for the codes these calls return they have the runtime's numbers.

use crate::error::{Error, Result, check};
use crate::sys;
use std::ffi::{CStr, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// A driver context handle (`CUcontext`); null means "no context".
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Context(pub(crate) *mut c_void);

type CtxGetCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type CtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type PrimaryCtxGetState = unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> c_int;

/// The entry points, with the signatures of `cuda.h` (CUDA 12.0 and later).
struct Driver {
    ctx_get_current: CtxGetCurrent,
    ctx_set_current: CtxSetCurrent,
    device_get: DeviceGet,
    primary_ctx_get_state: PrimaryCtxGetState,
}

fn driver() -> Result<&'static Driver> {
    static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: each symbol has the signature of its type alias in cuda.h (as of 12.0,
            // the version asked for).
            unsafe {
                Ok(Driver {
                    ctx_get_current: std::mem::transmute::<*mut c_void, CtxGetCurrent>(entry(c"cuCtxGetCurrent")?),
                    ctx_set_current: std::mem::transmute::<*mut c_void, CtxSetCurrent>(entry(c"cuCtxSetCurrent")?),
                    device_get: std::mem::transmute::<*mut c_void, DeviceGet>(entry(c"cuDeviceGet")?),
                    primary_ctx_get_state: std::mem::transmute::<*mut c_void, PrimaryCtxGetState>(entry(
                        c"cuDevicePrimaryCtxGetState",
                    )?),
                })
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn entry(symbol: &CStr) -> Result<*mut c_void> {
    let mut function: *mut c_void = std::ptr::null_mut();
    let mut status = sys::cudaDriverEntryPointQueryResult::cudaDriverEntryPointSuccess;
    // SAFETY: `symbol` is NUL-terminated; both out-pointers are valid.
    let code = unsafe { sys::cudaGetDriverEntryPointByVersion(symbol.as_ptr(), &mut function, 12000, 0, &mut status) };
    check(code, "cudaGetDriverEntryPointByVersion")?;
    if function.is_null() {
        return Err(Error::Cuda {
            api: "cudaGetDriverEntryPointByVersion",
            code: crate::CudaCode(sys::cudaError::cudaErrorSymbolNotFound.0 as i32),
        });
    }
    Ok(function)
}

fn check_driver(code: c_int, api: &'static str) -> Result<()> {
    check(sys::cudaError(code as u32), api)
}

/// The calling thread's current context (`cuCtxGetCurrent`), null when there is none.
pub(crate) fn current_context() -> Result<Context> {
    let mut context: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    check_driver(unsafe { (driver()?.ctx_get_current)(&mut context) }, "cuCtxGetCurrent")?;
    Ok(Context(context))
}

/// Makes `context` current on the calling thread (`cuCtxSetCurrent`); null unbinds.
pub(crate) fn set_current_context(context: Context) -> Result<()> {
    // SAFETY: `context` was current on this thread before (or is null); a context destroyed
    // since is reported as an error.
    check_driver(unsafe { (driver()?.ctx_set_current)(context.0) }, "cuCtxSetCurrent")
}

/// Whether the device's primary context is active (`cuDevicePrimaryCtxGetState`).
pub(crate) fn primary_context_active(ordinal: i32) -> Result<bool> {
    let driver = driver()?;
    let mut device: c_int = 0;
    // SAFETY: a valid out-pointer; an invalid ordinal is reported as an error.
    check_driver(unsafe { (driver.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
    let (mut flags, mut active): (c_uint, c_int) = (0, 0);
    // SAFETY: valid out-pointers; `device` came from cuDeviceGet.
    let code = unsafe { (driver.primary_ctx_get_state)(device, &mut flags, &mut active) };
    check_driver(code, "cuDevicePrimaryCtxGetState")?;
    Ok(active != 0)
}
