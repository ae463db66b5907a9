//! Launching your own kernels: `StreamRef::launch` makes the stream's device current and returns
//! the launch's own error; a refused call of the crate leaves no runtime last error that a
//! user's launcher would then report as its own.

use cuda_stream::{BuiltinStream, Device, Error, capture, sys};
use cuda_stream_tests::ffi::{cs_launch_empty, cs_launch_spin};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{TagLog, gpu_or_skip, gpus_or_skip, take_last_error};

/// Leaves `cudaErrorInvalidDevice` as this thread's last error, as an unchecked call would.
fn leave_a_stale_error() {
    // SAFETY: an invalid ordinal is refused with an error, nothing else happens.
    let code = unsafe { sys::cudaSetDevice(1 << 20) };
    assert_ne!(code, sys::cudaError::cudaSuccess);
}

#[test]
fn launch_returns_its_own_error_and_leaves_none_behind() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    leave_a_stale_error();
    // SAFETY: the launcher takes a live stream of the current device.
    stream
        .launch("cs_launch_empty", |raw| unsafe { cs_launch_empty(raw) })
        .expect("a stale error is not this launch's");
    // 4,096 threads per block is over every GPU's limit (CUDA 13.0 says cudaErrorInvalidValue).
    // SAFETY: as above; the kernel is never launched.
    let error = stream.launch("cs_launch_spin", |raw| unsafe { cs_launch_spin(raw, 0, 1, 4096) }).unwrap_err();
    let code = error.cuda_code().expect("a CUDA error");
    assert!(!code.is_sticky(), "{error}");
    assert!(error.to_string().starts_with("cs_launch_spin failed"), "{error}");
    assert_eq!(take_last_error(), sys::cudaError::cudaSuccess, "the launch left its error behind");
    stream.synchronize().unwrap();
}

#[test]
fn a_refused_call_leaves_no_error_for_the_next_launcher() {
    let device = gpu_or_skip!();
    let owned = stream(device);
    let per_thread = BuiltinStream::per_thread(device);
    let outside = owned.record_event().unwrap();
    owned.synchronize().unwrap();
    for captured in [&*owned, &*per_thread] {
        let capture = captured.begin_capture(capture::ThreadLocal).unwrap();
        // Refused by the crate, before CUDA sees it.
        assert!(matches!(captured.query(), Err(Error::CaptureMisuse(_))));
        // Refused by CUDA (an event recorded outside the capture: cudaErrorStreamCaptureIsolation).
        let isolated = captured.wait_event(&outside).unwrap_err();
        assert!(isolated.cuda_code().is_some(), "{isolated}");
        drop(capture);
        // A launcher of the user's that reports `cudaGetLastError()` after `<<<>>>`.
        // SAFETY: a live stream of the current device.
        let code = unsafe { cs_launch_empty(captured.as_raw()) };
        assert_eq!(code, sys::cudaError::cudaSuccess, "{:?}: a stale error reached the user", captured.ownership());
    }
    owned.synchronize().unwrap();
}

#[test]
fn launch_makes_the_streams_device_current() {
    let devices = gpus_or_skip!(2);
    let on_second = stream(devices[1]);
    let log = TagLog::new(1).unwrap();
    let _first = devices[0].make_current().unwrap();
    // SAFETY: the launcher takes a live stream of the current device; the log outlives it.
    on_second
        .launch("cs_launch_tag", |raw| unsafe { cuda_stream_tests::ffi::cs_launch_tag(raw, log.device_ptr(), 5, 0) })
        .expect("a launch on GPU 1's stream while GPU 0 is current");
    on_second.synchronize().unwrap();
    assert_eq!(log.tags(), [5]);
    assert_eq!(Device::current().unwrap(), devices[0], "the previous device is current again");
}
