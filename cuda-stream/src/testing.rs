//! Support for GPU tests of your own kernels (feature `testing`): the gate a GPU test starts
//! with. Without a usable GPU a test says plainly that it skipped (`SKIPPED <test>: <why>` on
//! stderr, which the test harness does not capture) and passes; on a GPU host, set
//! `CUDA_STREAM_REQUIRE_GPU=1` (or `CUDA_STREAM_REQUIRE_GPUS=N` for tests of N GPUs) and a
//! missing GPU fails the test instead.
//!
//! ```no_run
//! #[test]
//! fn my_kernel_fills_the_buffer() {
//!     let device = cuda_stream::gpu_or_skip!();
//!     // ...
//! #   let _ = device;
//! }
//! ```
//!
//! Launch your kernels with [`StreamRef::launch`](crate::StreamRef::launch). To avoid lazy
//! module loading in tests (a first launch that waits behind a kernel already running), build
//! them with `cuda-stream-build`, which loads them eagerly in the package's tests.

// Test support (docs/architecture.md). May use: device, ffi.

use crate::device::Device;
use crate::ffi::error::Error;
use crate::ffi::installation::{GpuUnavailable, driver_version, runtime_version};
use crate::sys;
use std::io::Write;

/// Set to `1` on a GPU host: a missing GPU then fails a gated test instead of skipping it.
pub const REQUIRE_GPU: &str = "CUDA_STREAM_REQUIRE_GPU";

/// Set to `N` on a host with N GPUs: tests that need up to N GPUs fail instead of skipping.
pub const REQUIRE_GPUS: &str = "CUDA_STREAM_REQUIRE_GPUS";

fn required(variable: &str) -> i32 {
    std::env::var(variable).ok().and_then(|value| value.trim().parse().ok()).unwrap_or(0)
}

/// Skips the test `test` for the reason `why`: prints `SKIPPED <test>: <why>` to stderr, or
/// panics when `CUDA_STREAM_REQUIRE_GPU=1` says a GPU is required.
///
/// # Panics
/// Under `CUDA_STREAM_REQUIRE_GPU=1`: that is the test's failure.
pub fn skip(test: &str, why: &str) {
    if required(REQUIRE_GPU) >= 1 {
        panic!("{test}: a GPU is required ({REQUIRE_GPU}=1): {why}");
    }
    // Written to stderr directly: the test harness captures `eprintln!` of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Device 0, or `None` after [`skip`]ping the test `test` with the reason.
///
/// # Panics
/// Without a GPU under `CUDA_STREAM_REQUIRE_GPU=1`.
pub fn device_or_skip(test: &str) -> Option<Device> {
    match Device::count() {
        Ok(count) if count > 0 => return Some(Device::new(0).expect("device 0 exists when count > 0")),
        Ok(_) => skip(test, "no usable CUDA GPU (the driver reports 0 devices)"),
        Err(error) => skip(test, &format!("no usable CUDA GPU: {}", unavailable(&error))),
    }
    None
}

/// Why `error` leaves no GPU to test on, in the words a person looks for: cudart reports a
/// missing driver as "driver version is insufficient" (`cudaErrorInsufficientDriver`).
fn unavailable(error: &Error) -> String {
    let version = |v: i32| format!("{}.{}", v / 1000, v % 1000 / 10);
    match error.gpu_unavailable() {
        Some(GpuUnavailable::NoDriver)
            if error.cuda_code().is_some_and(|code| code.raw() == sys::cudaError::cudaErrorStubLibrary) =>
        {
            "no NVIDIA driver: the libcuda.so found is the toolkit's stub".to_string()
        }
        Some(GpuUnavailable::NoDriver) => "no NVIDIA driver (libcuda.so.1 not found)".to_string(),
        Some(GpuUnavailable::InsufficientDriver) => match (driver_version(), runtime_version()) {
            (Ok(driver), Ok(runtime)) => {
                format!(
                    "the NVIDIA driver is too old: it supports CUDA {}, this binary's runtime is {}",
                    version(driver),
                    version(runtime)
                )
            }
            _ => format!("the NVIDIA driver is too old ({error})"),
        },
        Some(other) => format!("{other} ({error})"),
        None => error.to_string(),
    }
}

/// The first `count` devices, or `None` after saying why the test `test` is skipped.
///
/// # Panics
/// With fewer GPUs than `count` when `CUDA_STREAM_REQUIRE_GPUS` asks for at least `count`, or
/// with none under `CUDA_STREAM_REQUIRE_GPU=1`.
pub fn devices_or_skip(test: &str, count: i32) -> Option<Vec<Device>> {
    let available = Device::count().unwrap_or(0);
    if available >= count {
        return Some((0..count).map(|ordinal| Device::new(ordinal).expect("ordinal below count")).collect());
    }
    let wanted = required(REQUIRE_GPUS);
    if wanted >= count {
        panic!("{test}: {count} GPUs are required ({REQUIRE_GPUS}={wanted}) but {available} are usable");
    }
    if available == 0 {
        device_or_skip(test);
    } else {
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs {count} CUDA GPUs, {available} usable");
    }
    None
}

/// Starts a GPU test: evaluates to device 0, or returns from the test after a loud skip (see
/// [`testing`](crate::testing)). Feature `testing`.
#[macro_export]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
macro_rules! gpu_or_skip {
    () => {
        match $crate::testing::device_or_skip(::std::thread::current().name().unwrap_or(module_path!())) {
            Some(device) => device,
            None => return,
        }
    };
}

/// Starts a test of `N` GPUs: evaluates to the first `N` devices, or returns from the test
/// after a loud skip. Feature `testing`.
#[macro_export]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
macro_rules! gpus_or_skip {
    ($count:expr) => {
        match $crate::testing::devices_or_skip(::std::thread::current().name().unwrap_or(module_path!()), $count) {
            Some(devices) => devices,
            None => return,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_is_named_as_such() {
        // What cudart calls an insufficient driver, on a machine without one (CI).
        let Err(error) = Device::count() else { return };
        if driver_version() == Ok(0) && error.gpu_unavailable() == Some(GpuUnavailable::NoDriver) {
            assert_eq!(unavailable(&error), "no NVIDIA driver (libcuda.so.1 not found)", "{error}");
        }
    }
}
