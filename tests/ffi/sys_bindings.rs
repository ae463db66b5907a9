//! cuda-stream-sys without a GPU: the hand-written constants match the header, the layout
//! matches C, and calls that need a driver fail with a code instead of crashing.

use cuda_stream::sys;
use cuda_stream_tests::ffi;

#[test]
fn special_handles_match_the_header() {
    // SAFETY: plain constants exported by kernels/header_values.c.
    let (legacy, per_thread) = unsafe { (ffi::cs_header_stream_legacy, ffi::cs_header_stream_per_thread) };
    assert_eq!(sys::cudaStreamLegacy as usize, legacy);
    assert_eq!(sys::cudaStreamPerThread as usize, per_thread);
    assert_ne!(legacy, per_thread);
}

#[test]
fn version_and_error_width_match_the_header() {
    // SAFETY: plain constants exported by kernels/header_values.c.
    let (version, error_size) = unsafe { (ffi::cs_header_cudart_version, ffi::cs_header_error_size) };
    assert_eq!(sys::CUDART_VERSION as i32, version);
    assert_eq!(size_of::<sys::cudaError_t>() as u32, error_size);
}

#[test]
fn the_build_mode_is_the_feature() {
    assert_eq!(sys::PER_THREAD_DEFAULT_STREAM, cfg!(feature = "per-thread-default-stream"));
    assert_eq!(cuda_stream::NULL_STREAM_IS_PER_THREAD, sys::PER_THREAD_DEFAULT_STREAM);
}

#[test]
fn device_count_returns_a_code_without_a_driver() {
    let mut count = -1;
    // SAFETY: `count` is a valid out-pointer.
    let code = unsafe { sys::cudaGetDeviceCount(&mut count) };
    let known_without_gpu = [
        sys::cudaError::cudaErrorNoDevice,
        sys::cudaError::cudaErrorInsufficientDriver,
        sys::cudaError::cudaErrorStubLibrary,
        sys::cudaError::cudaErrorSystemDriverMismatch,
        sys::cudaError::cudaErrorNotSupported,
    ];
    if code == sys::cudaError::cudaSuccess {
        assert!(count >= 0, "success with a negative count");
    } else {
        assert!(known_without_gpu.contains(&code), "unexpected code {code:?}");
    }
    // The same call again returns the same answer: nothing was poisoned.
    let mut again = -1;
    // SAFETY: as above.
    assert_eq!(unsafe { sys::cudaGetDeviceCount(&mut again) }, code);
}

#[test]
fn runtime_version_needs_no_device() {
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    let code = unsafe { sys::cudaRuntimeGetVersion(&mut version) };
    assert_eq!(code, sys::cudaError::cudaSuccess);
    assert_eq!(version, sys::CUDART_VERSION as i32);
}

/// The crate reports a driver call's `CUresult` under the runtime's number for the same error
/// (`cuda-stream/src/ffi/driver.rs`): each pair from the headers must agree, and name the runtime
/// error the crate will show.
#[test]
fn driver_result_codes_have_the_runtimes_numbers() {
    // SAFETY: constant data exported by kernels/header_values.c, of the declared length
    // (checked against its own count).
    let (pairs, count) = unsafe { (&ffi::cs_header_error_pairs, ffi::cs_header_error_pair_count) };
    assert_eq!(count as usize, pairs.len(), "update the array length in src/lib.rs");
    for [driver, runtime] in pairs {
        assert_eq!(driver, runtime, "CUresult {driver} is runtime error {runtime}");
        assert!(cuda_stream::CudaCode(*runtime).name().starts_with("cudaError"), "{runtime}");
    }
}
