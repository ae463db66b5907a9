//! The gate every GPU test starts with: a device, or a loud skip, or (under
//! `CUDA_STREAM_REQUIRE_GPU=1`) a failure.

use cuda_stream::Device;
use std::io::Write;

/// Set to `1` on the GPU host: a missing GPU then fails the test instead of skipping it.
pub const REQUIRE_GPU: &str = "CUDA_STREAM_REQUIRE_GPU";

/// Device 0, or `None` after printing why the test `name` is skipped. Panics instead of
/// skipping when [`REQUIRE_GPU`] is `1`.
pub fn device_or_skip(name: &str) -> Option<Device> {
    let why = match Device::count() {
        _ if !crate::KERNELS_BUILT => "the test kernels were not built (the toolkit has no nvcc)".to_string(),
        Ok(count) if count > 0 => {
            let device = Device::new(0).expect("device 0 exists when count > 0");
            crate::preload_kernels(device).expect("the test kernels load on device 0");
            return Some(device);
        }
        Ok(_) => "no usable CUDA GPU (the driver reports 0 devices)".to_string(),
        Err(error) => format!("no usable CUDA GPU ({error})"),
    };
    if std::env::var(REQUIRE_GPU).as_deref() == Ok("1") {
        panic!("{name}: a GPU and the test kernels are required ({REQUIRE_GPU}=1): {why}");
    }
    // Written to stderr directly: the test harness captures `eprintln!` of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED {name}: {why}");
    None
}

/// Starts a GPU test: binds the device, or returns from the test after a loud skip.
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match $crate::gpu::device_or_skip(::std::thread::current().name().unwrap_or(module_path!())) {
            Some(device) => device,
            None => return,
        }
    };
}

/// Set to `N` on a host with N GPUs: multi-GPU tests then fail instead of skipping with fewer.
pub const REQUIRE_GPUS: &str = "CUDA_STREAM_REQUIRE_GPUS";

/// The first `count` devices, or `None` after printing why the test `name` is skipped. Panics
/// instead of skipping when [`REQUIRE_GPUS`] asks for at least `count` devices.
pub fn devices_or_skip(name: &str, count: i32) -> Option<Vec<Device>> {
    let available = Device::count().unwrap_or(0);
    if !crate::KERNELS_BUILT {
        device_or_skip(name);
        return None;
    }
    if available >= count {
        let devices: Vec<Device> =
            (0..count).map(|ordinal| Device::new(ordinal).expect("ordinal below count")).collect();
        for device in &devices {
            crate::preload_kernels(*device).expect("the test kernels load on every device");
        }
        return Some(devices);
    }
    let required = std::env::var(REQUIRE_GPUS).ok().and_then(|value| value.parse::<i32>().ok()).unwrap_or(0);
    if required >= count {
        panic!("{name}: {count} GPUs are required ({REQUIRE_GPUS}={required}) but {available} are usable");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {name}: needs {count} CUDA GPUs, {available} usable");
    None
}

/// Starts a multi-GPU test: the first N devices, or returns from the test after a loud skip.
#[macro_export]
macro_rules! gpus_or_skip {
    ($count:expr) => {
        match $crate::gpu::devices_or_skip(::std::thread::current().name().unwrap_or(module_path!()), $count) {
            Some(devices) => devices,
            None => return,
        }
    };
}

/// For examples: device 0, or `None` after saying plainly that there is no GPU (examples then
/// exit 0, unless [`REQUIRE_GPU`] is `1`).
pub fn example_device(example: &str) -> Option<Device> {
    device_or_skip(example)
}
