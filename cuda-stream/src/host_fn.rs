//! Host functions: Rust closures that a stream runs on a CUDA-owned host thread once the work
//! before them has completed, holding back the work after them.
//!
//! The rules, each tested:
//! * [`StreamRef::launch_host_fn`] takes a `FnOnce() + Send + 'static`, boxed once and freed
//!   exactly once on every path: after it runs; at once when the enqueue fails; and after a
//!   fault (a sticky error), when it is dropped without running. It is enqueued with
//!   [`cudaStreamAddCallback`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html),
//!   which CUDA refuses atomically on a capturing stream (so the box can never become a graph
//!   node that replays and frees it again) and which, unlike `cudaLaunchHostFunc`, still runs
//!   after a fault, with the error.
//! * A capture that begins or ends through this crate never overlaps such an enqueue: the
//!   driver crashes when `cudaStreamAddCallback` races a capture begin or end on another thread
//!   (probed on CUDA 13.0), so the two are serialized by a lock that enqueues share.
//! * [`StreamRef::launch_host_callback`] gives the closure the stream's status instead: it
//!   runs after a fault too, with the sticky error.
//! * A capturing stream refuses both ([`Error::CaptureMisuse`](crate::Error::CaptureMisuse)); graphs take repeatable host
//!   functions through [`Capture::launch_host_fn`](crate::Capture::launch_host_fn), which the
//!   graph itself keeps alive (CUDA user objects).
//! * A panic inside the closure is caught (it never unwinds into the driver), printed to stderr,
//!   and queued: [`take_host_fn_panics`] returns it. The stream goes on working.
//! * CUDA forbids CUDA calls inside a host function (they may deadlock). Every call of this
//!   crate that reaches the CUDA runtime returns [`Error::InsideHostFn`](crate::Error::InsideHostFn) there instead; drops
//!   that must destroy a handle (streams, events, graphs) do it on another thread after the
//!   host function returns. Not refused, because they touch no device: [`CudaCode::name`] and
//!   [`CudaCode::description`](crate::CudaCode::description) (string tables). The same holds
//!   while a closure is dropped by CUDA (user-object destructors) and while a panic's payload
//!   is dropped.
//!
//! [`CudaCode::name`]: crate::CudaCode::name

// Layer 6 of docs/architecture.md, host functions. May use: ffi, call, device, event, stream.

pub use crate::ffi::inside_host_fn::{HostFnPanic, take_host_fn_panics};

use crate::ffi::error::{Result, check, check_code};
use crate::ffi::inside_host_fn::run_guarded;
use crate::stream::StreamRef;
use crate::stream::enqueue::{Via, Work};
use crate::sys;
use std::ffi::c_void;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Boxed closures not yet run nor freed: `FnOnce` host functions in flight, and the repeatable
/// host functions graphs keep.
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// How many host-function closures are alive: enqueued `FnOnce`s not yet run or dropped, and
/// the closures of graph host nodes that a graph, or an executable made from one, still holds.
/// It returns to its earlier value once the streams are idle and the graphs are dropped, fault
/// included; CUDA drops graph closures on a thread of its own, shortly after the last user is
/// gone. A negative value would mean a closure freed twice.
pub fn live_host_fns() -> isize {
    LIVE.load(Ordering::SeqCst)
}

/// A closure on its way through the driver, counted in [`LIVE`] until this box is freed.
pub(crate) struct Counted<F> {
    pub(crate) f: Option<F>,
}

impl<F> Counted<F> {
    pub(crate) fn boxed(f: F) -> Box<Counted<F>> {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Box::new(Counted { f: Some(f) })
    }
}

impl<F> Drop for Counted<F> {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The C entry point `cudaStreamAddCallback` calls, once, with the stream's status.
///
/// # Safety
/// `data` must come from `Box::into_raw(Counted::<F>::boxed(..))` and be passed here once.
unsafe extern "C" fn run_callback<F: FnOnce(Result<()>) + Send + 'static>(
    stream: sys::cudaStream_t,
    status: sys::cudaError_t,
    data: *mut c_void,
) {
    // SAFETY: the caller's contract: this box was leaked for this one call.
    let mut counted = unsafe { Box::from_raw(data.cast::<Counted<F>>()) };
    let f = counted.f.take();
    run_guarded(Some(stream as usize), move || {
        if let Some(f) = f {
            f(check_code(status, "cudaStreamAddCallback"));
        }
    });
    // Dropping `counted` frees the box and uncounts it; `f` was taken, so this cannot panic.
}

impl StreamRef {
    /// Enqueues `f` to run on a CUDA host thread after the work enqueued here so far; work
    /// enqueued later waits for it
    /// ([`cudaStreamAddCallback`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// After a fault in the stream's context `f` is dropped without running. See the
    /// [module docs](crate::host_fn) for the rules.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) while the stream is being captured; CUDA's enqueue errors. In
    /// every error case `f` is dropped at once and never runs.
    pub fn launch_host_fn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<()> {
        self.launch_host_callback(move |status| {
            if status.is_ok() {
                f();
            }
        })
    }

    /// Enqueues `f` like [`StreamRef::launch_host_fn`], but `f` always runs, with the stream's
    /// status: `Ok(())`, or after a fault the sticky error (CuPy's `add_callback`).
    ///
    /// # Errors
    /// As [`StreamRef::launch_host_fn`]; in every error case `f` is dropped and never runs.
    pub fn launch_host_callback<F: FnOnce(Result<()>) + Send + 'static>(&self, f: F) -> Result<()> {
        // Refused on a capturing stream before CUDA sees it: cudaStreamAddCallback refuses it
        // too (atomically, even if a foreign capture begins between here and there), but only
        // after invalidating the capture.
        let work = Work::named("host function")
            .refused_in_capture(
                "a FnOnce host function cannot be captured (a graph may replay it); use Capture::launch_host_fn",
            )
            .through_driver();
        // `f` is dropped, never run, with the closure when the enqueue is refused before it.
        self.enqueue(work, move |via| {
            let data = Box::into_raw(Counted::boxed(f));
            let callback =
                Some(run_callback::<F> as unsafe extern "C" fn(sys::cudaStream_t, sys::cudaError_t, *mut c_void));
            let enqueued = match via {
                // SAFETY: `run_callback::<F>` honours the contract of `data`: a leaked box it
                // takes back once. A real stream handle.
                Via::Driver => unsafe { crate::ffi::driver::stream_add_callback(self.as_raw(), callback, data.cast()) },
                Via::Runtime => check(
                    // SAFETY: as above, with the special handle's device current; flags must be 0.
                    unsafe { sys::cudaStreamAddCallback(self.as_raw(), callback, data.cast(), 0) },
                    "cudaStreamAddCallback",
                ),
            };
            if enqueued.is_err() {
                // SAFETY: the driver did not take `data`: we still own the box, freed once here.
                drop(unsafe { Box::from_raw(data) });
            }
            enqueued
        })
    }
}
