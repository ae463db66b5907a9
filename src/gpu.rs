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
        Ok(count) if count > 0 => return Some(Device::new(0).expect("device 0 exists when count > 0")),
        Ok(_) => "the driver reports 0 devices".to_string(),
        Err(error) => error.to_string(),
    };
    if std::env::var(REQUIRE_GPU).as_deref() == Ok("1") {
        panic!("{name}: a GPU is required ({REQUIRE_GPU}=1) but none is usable: {why}");
    }
    // Written to stderr directly: the test harness captures `eprintln!` of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED {name}: no usable CUDA GPU ({why})");
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
