//! Raw FFI bindings to the CUDA runtime API (`cudart`), generated at build time by bindgen from
//! the toolkit's own `cuda_runtime_api.h`.
//!
//! Everything here is `unsafe` and unchecked; the `cuda-stream` crate is the safe layer.
//!
//! * **Finding the toolkit**: `CUDA_PATH`, `CUDA_HOME`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`, then
//!   the directory above `nvcc` on `PATH`, then `/usr/local/cuda` and `/opt/cuda`, then NVIDIA's
//!   PyPI wheels (`nvidia/cu13`, `nvidia/cuda_runtime`) in the active Python's site-packages
//!   (`PYTHON`, else `python3`). The build log says which step found it.
//! * **Enums** are integer newtypes with associated constants (`cudaError::cudaSuccess`), never
//!   Rust enums, so a code this header did not know is still a valid value.
//! * **Handle 0**: the legacy default stream, or with the `per-thread-default-stream` feature
//!   the calling thread's per-thread default stream (the functions then bind to their
//!   `_ptsz`/`_ptds` symbols under the plain names). [`cudaStreamLegacy`] and
//!   [`cudaStreamPerThread`] name each one explicitly in both modes.
//! * **Linking**: `cudart_static` by default; the `dynamic-linking` feature links `libcudart.so`.
//! * **For build scripts** (`links = "cudart"`): `DEP_CUDART_ROOT`, `DEP_CUDART_INCLUDE`,
//!   `DEP_CUDART_VERSION` (`CUDART_VERSION`), `DEP_CUDART_NVCC` (when the toolkit has nvcc) and
//!   `DEP_CUDART_PER_THREAD` (`1` or `0`).

#![no_std]

/// The generated bindings, with the lints that generated code cannot satisfy allowed here only.
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    missing_debug_implementations,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    rustdoc::all
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

pub use bindings::*;

/// The legacy default stream, whatever handle 0 means in this build.
///
/// `driver_types.h`: `#define cudaStreamLegacy ((cudaStream_t)0x1)`. bindgen drops pointer-cast
/// macros, so it is written here by hand; a test compares it with the header's value.
#[allow(non_upper_case_globals)]
pub const cudaStreamLegacy: cudaStream_t = LEGACY_STREAM_HANDLE as cudaStream_t;

/// The integer value of [`cudaStreamLegacy`].
pub const LEGACY_STREAM_HANDLE: usize = 0x1;

/// The calling thread's per-thread default stream, whatever handle 0 means in this build.
///
/// `driver_types.h`: `#define cudaStreamPerThread ((cudaStream_t)0x2)`. Written by hand like
/// [`cudaStreamLegacy`].
#[allow(non_upper_case_globals)]
pub const cudaStreamPerThread: cudaStream_t = PER_THREAD_STREAM_HANDLE as cudaStream_t;

/// The integer value of [`cudaStreamPerThread`].
pub const PER_THREAD_STREAM_HANDLE: usize = 0x2;

/// Whether this build binds handle 0 to the per-thread default stream
/// (feature `per-thread-default-stream`).
pub const PER_THREAD_DEFAULT_STREAM: bool = cfg!(feature = "per-thread-default-stream");

/// The root of the toolkit these bindings were generated from.
pub const TOOLKIT_ROOT: &str = env!("CUDA_STREAM_SYS_TOOLKIT_ROOT");

mod layout {
    use super::*;
    use static_assertions::{assert_eq_size, const_assert, const_assert_ne};

    // Stream and event handles are opaque pointers, as C passes them.
    assert_eq_size!(cudaStream_t, usize);
    assert_eq_size!(cudaEvent_t, usize);
    assert_eq_size!(cudaGraph_t, usize);
    assert_eq_size!(cudaGraphExec_t, usize);
    // cudaError_t is a C enum: 32 bits.
    assert_eq_size!(cudaError_t, u32);
    // The special handles are distinct from each other and from the null stream.
    const_assert_ne!(LEGACY_STREAM_HANDLE, PER_THREAD_STREAM_HANDLE);
    const_assert_ne!(LEGACY_STREAM_HANDLE, 0);
    const_assert_ne!(PER_THREAD_STREAM_HANDLE, 0);
    // An IPC event handle is the 64 opaque bytes the header promises.
    assert_eq_size!(cudaIpcEventHandle_t, [u8; 64]);
    const_assert!(CUDART_VERSION >= 12000);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_handles_carry_their_integer_values() {
        assert_eq!(cudaStreamLegacy as usize, LEGACY_STREAM_HANDLE);
        assert_eq!(cudaStreamPerThread as usize, PER_THREAD_STREAM_HANDLE);
    }

    #[test]
    fn error_codes_are_integers_not_enums() {
        // A code the header never defined is still a valid value of the newtype.
        let unknown = cudaError(0xdead);
        assert_ne!(unknown, cudaError::cudaSuccess);
        assert_eq!(cudaError::cudaErrorNotReady.0, 600);
    }
}
