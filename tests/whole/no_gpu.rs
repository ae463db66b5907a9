//! On a machine without a driver or a GPU (CI): every public constructor returns a typed error
//! that names the cause ([`cuda_stream::Error::gpu_unavailable`]), and nothing panics. Streams,
//! events, pools and guards all need a [`Device`], and `Device::new` / `Device::current` are
//! where the missing GPU is reported; the type system makes the rest unreachable without one.
//! On a GPU host these tests say that they cannot see the no-GPU case.

use cuda_stream::{Device, GpuUnavailable, live_events, live_streams};
use std::io::Write;

/// The cause, or `None` (after saying so) when this machine has a usable GPU.
fn unavailable(test: &str) -> Option<GpuUnavailable> {
    match Device::count() {
        Ok(count) if count > 0 => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: this machine has {count} GPU(s); no-GPU behaviour is not visible"
            );
            None
        }
        Ok(_) => Some(GpuUnavailable::NoDevice),
        Err(error) => Some(error.gpu_unavailable().unwrap_or_else(|| panic!("not a no-GPU error: {error}"))),
    }
}

#[test]
fn device_constructors_name_the_missing_gpu() {
    let Some(cause) = unavailable("device_constructors_name_the_missing_gpu") else { return };
    let (streams, events) = (live_streams(), live_events());
    for (what, result) in [
        ("Device::count", Device::count().map(drop)),
        ("Device::new(0)", Device::new(0).map(drop)),
        ("Device::new(-1)", Device::new(-1).map(drop)),
        ("Device::current", Device::current().map(drop)),
    ] {
        let error = result.expect_err(what);
        assert_eq!(error.gpu_unavailable(), Some(cause), "{what}: {error}");
        assert!(error.to_string().contains("failed: cuda"), "{what}: {error}");
    }
    assert_eq!((live_streams(), live_events()), (streams, events), "nothing was created");
}

#[test]
fn versions_answer_without_a_gpu() {
    let Some(cause) = unavailable("versions_answer_without_a_gpu") else { return };
    assert_eq!(cuda_stream::runtime_version(), Ok(cuda_stream::sys::CUDART_VERSION as i32));
    let driver = cuda_stream::driver_version().expect("the driver version needs no GPU");
    assert_eq!(driver == 0, cause == GpuUnavailable::NoDriver, "driver version {driver} for {cause:?}");
}

#[test]
fn the_tour_and_the_gates_run_without_a_gpu() {
    if unavailable("the_tour_and_the_gates_run_without_a_gpu").is_none() {
        return;
    }
    if std::env::var(cuda_stream_tests::gpu::REQUIRE_GPU).as_deref() == Ok("1") {
        let gate = std::panic::catch_unwind(|| cuda_stream_tests::gpu::device_or_skip("probe"));
        assert!(gate.is_err(), "CUDA_STREAM_REQUIRE_GPU=1 turns the missing GPU into a failure");
    } else {
        assert_eq!(cuda_stream_tests::gpu::device_or_skip("probe"), None);
    }
}
