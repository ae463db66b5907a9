//! The gate every GPU test of this workspace starts with: `cuda_stream::testing`'s (a device,
//! or a loud skip, or under `CUDA_STREAM_REQUIRE_GPU=1` a failure), plus this workspace's own
//! condition, the test kernels, which it loads on each device it hands out.

use cuda_stream::Device;
pub use cuda_stream::testing::{REQUIRE_GPU, REQUIRE_GPUS};
use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard, PoisonError};

const NO_KERNELS: &str = "the test kernels were not built (the toolkit has no nvcc)";

/// Held by the test thread that runs a GPU test, from its gate until the thread exits: the GPU
/// tests of one binary run one at a time, also under the harness's default threads. They
/// must: a test's Global capture makes CUDA refuse (or, racing its end, crash on) another
/// test's queries and raw calls, and tests count process-wide handles and closures. Tests
/// written to race others (the fuzzer) start with [`concurrent_device_or_skip`] instead.
static GPU_TESTS: Mutex<()> = Mutex::new(());

thread_local! {
    /// This thread's hold on [`GPU_TESTS`], released when the test's thread exits (libtest runs
    /// each test on a thread of its own, or all of them on one thread with `--test-threads=1`).
    static HOLD: RefCell<Option<MutexGuard<'static, ()>>> = const { RefCell::new(None) };
}

fn hold_gpu_tests() {
    HOLD.with(|hold| {
        let mut hold = hold.borrow_mut();
        if hold.is_none() {
            *hold = Some(GPU_TESTS.lock().unwrap_or_else(PoisonError::into_inner));
        }
    });
}

/// Device 0 with the test kernels loaded, or `None` after printing why the test `name` is
/// skipped. From here on the calling test thread holds the binary's GPU-test turn until it
/// exits: the GPU tests of one binary run one at a time, also under the harness's default
/// threads (a test's Global capture makes CUDA refuse, or racing its end crash on, another
/// test's queries and raw calls).
/// Panics instead of skipping when [`REQUIRE_GPU`] is `1`.
pub fn device_or_skip(name: &str) -> Option<Device> {
    let device = concurrent_device_or_skip(name)?;
    hold_gpu_tests();
    Some(device)
}

/// [`device_or_skip`] for a test written to run beside the binary's other GPU tests: it takes
/// no turn.
pub fn concurrent_device_or_skip(name: &str) -> Option<Device> {
    if !crate::KERNELS_BUILT {
        cuda_stream::testing::skip(name, NO_KERNELS);
        return None;
    }
    let device = cuda_stream::testing::device_or_skip(name)?;
    crate::preload_kernels(device).expect("the test kernels load on device 0");
    Some(device)
}

/// Starts a GPU test: binds the device and waits for the binary's other GPU tests (see
/// [`device_or_skip`]), or returns from the test after a loud skip.
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match $crate::gpu::device_or_skip(::std::thread::current().name().unwrap_or(module_path!())) {
            Some(device) => device,
            None => return,
        }
    };
}

/// Starts a GPU test that runs beside the binary's other GPU tests (see
/// [`concurrent_device_or_skip`]), or returns from the test after a loud skip.
#[macro_export]
macro_rules! concurrent_gpu_or_skip {
    () => {
        match $crate::gpu::concurrent_device_or_skip(::std::thread::current().name().unwrap_or(module_path!())) {
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
    hold_gpu_tests();
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
