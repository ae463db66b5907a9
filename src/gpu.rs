//! The gate every GPU test of this workspace starts with: `cuda_stream::testing`'s (a device,
//! or a loud skip, or under `CUDA_STREAM_REQUIRE_GPU=1` a failure), plus this workspace's own
//! condition, the test kernels, which it loads on each device it hands out.

use cuda_stream::Device;
pub use cuda_stream::testing::{REQUIRE_GPU, REQUIRE_GPUS};

const NO_KERNELS: &str = "the test kernels were not built (the toolkit has no nvcc)";

/// Device 0 with the test kernels loaded, or `None` after printing why the test `name` is
/// skipped. Panics instead of skipping when [`REQUIRE_GPU`] is `1`.
pub fn device_or_skip(name: &str) -> Option<Device> {
    if !crate::KERNELS_BUILT {
        cuda_stream::testing::skip(name, NO_KERNELS);
        return None;
    }
    let device = cuda_stream::testing::device_or_skip(name)?;
    crate::preload_kernels(device).expect("the test kernels load on device 0");
    Some(device)
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

/// The first `count` devices with the test kernels loaded, or `None` after printing why the
/// test `name` is skipped. Panics instead of skipping when [`REQUIRE_GPUS`] asks for at least
/// `count` devices.
pub fn devices_or_skip(name: &str, count: i32) -> Option<Vec<Device>> {
    if !crate::KERNELS_BUILT {
        cuda_stream::testing::skip(name, NO_KERNELS);
        return None;
    }
    let devices = cuda_stream::testing::devices_or_skip(name, count)?;
    for device in &devices {
        crate::preload_kernels(*device).expect("the test kernels load on every device");
    }
    Some(devices)
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
