//! The capture modes, as types, and the calling thread's capture-interaction mode: which of
//! CUDA's "potentially unsafe" calls a capture in progress forbids, and where. Public as
//! [`cuda_stream::capture`](crate::capture)'s [`Global`], [`ThreadLocal`], [`Relaxed`] and
//! [`with_thread_mode`].

use crate::ffi::error::{Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;

mod sealed {
    pub trait Sealed {}
}

/// A capture mode (`cudaStreamCaptureMode`), as a type: [`Global`], [`ThreadLocal`] or
/// [`Relaxed`].
pub trait CaptureMode: sealed::Sealed + Copy + std::fmt::Debug {
    /// CUDA's value.
    const RAW: sys::cudaStreamCaptureMode;
    /// Makes [`Capture`](crate::Capture) `!Send` for the modes that must end on the thread that began them.
    #[doc(hidden)]
    type Thread;
}

/// CUDA's "potentially unsafe" calls (queries, synchronizes, ...) are forbidden on every thread
/// while the capture lasts (this crate refuses its own: see the [capture docs](crate::capture)). Ends on
/// the thread that began it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Global;

/// CUDA's "potentially unsafe" calls are forbidden on this thread only. Ends on the thread that
/// began it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ThreadLocal;

/// No "potentially unsafe" call is forbidden (the capturing stream's own query and synchronize,
/// and the legacy stream, still are); the capture may end on any thread.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Relaxed;

impl sealed::Sealed for Global {}
impl sealed::Sealed for ThreadLocal {}
impl sealed::Sealed for Relaxed {}

impl CaptureMode for Global {
    const RAW: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal;
    type Thread = *const ();
}

impl CaptureMode for ThreadLocal {
    const RAW: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
    type Thread = *const ();
}

impl CaptureMode for Relaxed {
    const RAW: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed;
    type Thread = ();
}

/// Runs `f` with the calling thread's capture mode set to `mode`, then puts back the mode the
/// thread had, also when `f` panics
/// ([`cudaThreadExchangeStreamCaptureMode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html),
/// called in the push-pop fashion NVIDIA recommends).
///
/// The thread's mode decides which "potentially unsafe" calls (`cudaMalloc`, a device
/// synchronize, ...) CUDA refuses while captures are in progress: in the default, Global, this
/// thread may not make them while it captures or while *any* thread holds a [`Global`]
/// capture; in [`ThreadLocal`], only while it captures itself; in [`Relaxed`], never. So
/// `with_thread_mode(Relaxed, || ..)` lets a library allocate while another thread captures, as
/// PyTorch's and CCCL's allocators do; whether the call is right for the capture (work that
/// depends on it is not recorded) is the caller's to judge.
///
/// A closure rather than a guard: nothing can leak the changed mode (`mem::forget` of a guard
/// would), and nested calls restore in order.
///
/// # Errors
/// [`Error::InsideHostFn`](crate::Error::InsideHostFn) inside a host function; CUDA's error
/// setting the mode, in which case `f` does not run.
pub fn with_thread_mode<M: CaptureMode, R>(_mode: M, f: impl FnOnce() -> R) -> Result<R> {
    /// Puts back the thread's previous mode when dropped: after `f` returns or while it unwinds.
    struct Restore(sys::cudaStreamCaptureMode);

    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: a valid in/out pointer; puts back the mode the thread had. Nothing to report
            // from a drop: the exchange fails only for an invalid mode, and this one came from CUDA.
            let code = unsafe { sys::cudaThreadExchangeStreamCaptureMode(&mut self.0) };
            let _ = check(code, "cudaThreadExchangeStreamCaptureMode");
        }
    }

    refuse_inside_host_fn()?;
    let mut previous = M::RAW;
    // SAFETY: a valid in/out pointer holding a valid mode; CUDA writes back the previous one.
    check(unsafe { sys::cudaThreadExchangeStreamCaptureMode(&mut previous) }, "cudaThreadExchangeStreamCaptureMode")?;
    let _restore = Restore(previous);
    Ok(f())
}
