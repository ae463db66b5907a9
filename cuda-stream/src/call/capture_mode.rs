//! The capture modes, as types, and the calling thread's capture-interaction mode: which of
//! CUDA's "potentially unsafe" calls a capture in progress forbids, and where. Public as
//! [`cuda_stream::capture`](crate::capture)'s [`Global`], [`ThreadLocal`], [`Relaxed`] and
//! [`with_thread_mode`].

use crate::ffi::driver;
use crate::ffi::error::Result;
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::cell::Cell;

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
/// This crate moves a thread still in the default mode to [`ThreadLocal`] before the thread's
/// first query or synchronize (so that another thread's Global capture, this crate's or
/// foreign, neither refuses them nor is invalidated by them). Inside `f` the mode given here
/// holds, for this crate's calls too: `with_thread_mode(Global, ..)` gets CUDA's default
/// behaviour back.
///
/// A closure rather than a guard: nothing can leak the changed mode (`mem::forget` of a guard
/// would), and nested calls restore in order.
///
/// # Errors
/// [`Error::InsideHostFn`](crate::Error::InsideHostFn) inside a host function; CUDA's error
/// setting the mode, in which case `f` does not run.
pub fn with_thread_mode<M: CaptureMode, R>(_mode: M, f: impl FnOnce() -> R) -> Result<R> {
    /// Puts back the thread's previous mode, and what this crate knew of it, when dropped:
    /// after `f` returns or while it unwinds.
    struct Restore(sys::cudaStreamCaptureMode, ThreadMode);

    impl Drop for Restore {
        fn drop(&mut self) {
            // Puts back the mode the thread had. Nothing to report from a drop: the exchange
            // fails only for an invalid mode, and this one came from CUDA.
            let _ = driver::thread_exchange_capture_mode(self.0);
            THREAD_MODE.set(self.1);
        }
    }

    refuse_inside_host_fn()?;
    // The driver's exchange: the runtime's would make device 0's primary context current on a
    // thread that has none (hundreds of MiB on a GPU the program may never use).
    let previous = driver::thread_exchange_capture_mode(M::RAW)?;
    let _restore = Restore(previous, THREAD_MODE.replace(ThreadMode::Chosen));
    Ok(f())
}

/// Makes `call`, one of CUDA's "potentially unsafe" calls that puts no work on any stream (a
/// host or pool allocation or free, an instantiation), in the [`Relaxed`] capture mode, and
/// returns its result: no capture in progress forbids it then, neither this thread's own
/// (Global or ThreadLocal, of this crate or another library) nor another thread's Global one,
/// so none is invalidated by it (CUDA invalidates a capture to refuse such a call). Nothing of
/// the call is captured: it enqueues nothing. PyTorch's allocator makes `cudaMalloc` during a
/// capture the same way.
///
/// # Errors
/// [`Error::InsideHostFn`](crate::Error::InsideHostFn), and the error setting the mode, before
/// `call` runs; then `call`'s.
pub(crate) fn uncapturable_call<R>(call: impl FnOnce() -> Result<R>) -> Result<R> {
    with_thread_mode(Relaxed, call)?
}

/// [`uncapturable_call`] for a stream-ordered call (an allocation, a free) on a stream the
/// caller found outside any capture, under the enqueue path's hold: CUDA refuses it during the
/// calling thread's own Global or ThreadLocal capture (`cudaErrorStreamCaptureUnsupported` for
/// `cudaMallocAsync` on another stream, probed on CUDA 13.0), although nothing of it goes into
/// that capture. While no capture may be in progress, the call as it is (one load).
///
/// # Errors
/// As [`uncapturable_call`].
#[inline(always)]
pub(crate) fn uncaptured_stream_call<R>(call: impl FnOnce() -> Result<R>) -> Result<R> {
    if super::live_captures::may_capture() { uncapturable_call(call) } else { call() }
}

/// What this crate knows of the calling thread's capture interaction mode.
#[derive(Copy, Clone, PartialEq, Eq)]
enum ThreadMode {
    /// Not looked at yet: CUDA's default (Global), or whatever raw code set.
    Unknown,
    /// Looked at once: now ThreadLocal or Relaxed, unless raw code changed it since.
    Settled,
    /// Inside [`with_thread_mode`]: the mode its caller chose, left alone.
    Chosen,
}

thread_local! {
    static THREAD_MODE: Cell<ThreadMode> = const { Cell::new(ThreadMode::Unknown) };
}

/// Before a "potentially unsafe" call (a query, a synchronize, an allocation): makes sure another thread's
/// [`Global`] capture does not forbid it. Once per thread, a thread still in CUDA's default
/// mode, Global, is moved to [`ThreadLocal`], whose one difference is that captures of other
/// threads no longer forbid this thread's calls (its own captures still do); a mode chosen by
/// the thread's owner (ThreadLocal, Relaxed, or any inside [`with_thread_mode`]) is kept.
///
/// Without it, a query on any thread invalidates a Global capture that code outside this crate
/// began (`torch.cuda.graph`, cudarc's safe `begin_capture` on a stream of its own), and a
/// query racing that capture's end crashed libcuda (CUDA 13.0, driver 580: 4 of 4 probe runs;
/// in ThreadLocal or Relaxed mode 0 of 8, and the capture stays valid). One thread-local load
/// on every later call.
#[inline(always)]
pub(crate) fn ignore_other_threads_captures() {
    if THREAD_MODE.get() == ThreadMode::Unknown {
        settle_thread_mode();
    }
}

/// [`ignore_other_threads_captures`], then whether this thread's mode is the one it settled
/// (ThreadLocal or Relaxed, unless raw code changed it since): not inside
/// [`with_thread_mode`], whose caller may have chosen Global. A call that cannot be refused by
/// a capture another thread begins meanwhile (it takes no fast call that a begin waits for)
/// asks this first.
#[inline(always)]
pub(crate) fn other_threads_captures_ignored() -> bool {
    ignore_other_threads_captures();
    THREAD_MODE.get() == ThreadMode::Settled
}

#[cold]
#[inline(never)]
fn settle_thread_mode() {
    THREAD_MODE.set(ThreadMode::Settled);
    // The driver's exchange binds no context. A failure (no driver) leaves the mode as it was;
    // the call that follows reports the driver's error itself.
    if let Ok(previous) = driver::thread_exchange_capture_mode(ThreadLocal::RAW) {
        if previous != Global::RAW {
            // Relaxed (or ThreadLocal) was the owner's choice, and forbids no less: put it back.
            let _ = driver::thread_exchange_capture_mode(previous);
        }
    }
}
