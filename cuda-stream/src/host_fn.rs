//! Host functions: Rust closures that a stream runs on a CUDA-owned host thread once the work
//! before them has completed, holding back the work after them
//! ([`cudaLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EXECUTION.html)).
//!
//! The rules, each tested:
//! * A [`Stream::launch_host_fn`] closure is `FnOnce() + Send + 'static`, boxed once and freed
//!   exactly once: after it runs, or at once when the enqueue fails (it then never runs).
//! * A stream being captured into a graph refuses a `FnOnce` ([`Error::CaptureMisuse`]): a graph
//!   may replay it many times. Captured host functions go through
//!   [`Capture::launch_host_fn`](crate::Capture::launch_host_fn), which takes an
//!   `Fn() + Send + Sync` that the graph and its executables keep alive.
//! * A panic inside the closure is caught (it never unwinds into the driver), printed to stderr,
//!   and queued: [`take_host_fn_panics`] returns it. The stream goes on working.
//! * CUDA forbids CUDA calls inside a host function (they may deadlock). Every call of this
//!   crate made there returns [`Error::InsideHostFn`] instead.

use crate::error::{Error, Result, check};
use crate::stream::Stream;
use crate::sys;
use std::any::Any;
use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    /// Set while this thread runs one of our host functions.
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// Boxed closures not yet run nor freed.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Panics caught in host functions, oldest first.
static PANICS: Mutex<Vec<HostFnPanic>> = Mutex::new(Vec::new());

/// A panic caught inside a host function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFnPanic {
    /// The [`Stream::id`] of the stream that ran it.
    pub stream_id: u64,
    /// The panic's message, when it was a string.
    pub message: String,
}

/// Returns (and forgets) the panics caught in host functions so far, oldest first.
pub fn take_host_fn_panics() -> Vec<HostFnPanic> {
    std::mem::take(&mut *PANICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// How many host-function closures are enqueued but not yet run or freed: 0 once every stream
/// is idle, whatever failed or panicked.
pub fn live_host_fns() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// Refuses CUDA calls made from inside a host function.
#[inline(always)]
pub(crate) fn refuse_inside_host_fn() -> Result<()> {
    if IN_HOST_FN.get() { Err(Error::InsideHostFn) } else { Ok(()) }
}

/// Runs `f` (a CUDA call that cannot fail loudly, such as a destroy in `Drop`) now, or, inside
/// a host function where CUDA calls are forbidden, on a new thread that may make it once the
/// host function has returned.
pub(crate) fn call_outside_host_fn(f: impl FnOnce() + Send + 'static) {
    if IN_HOST_FN.get() {
        std::thread::spawn(f);
    } else {
        f();
    }
}

/// Runs `f` as a host function would: flagged, panics caught and queued. Never unwinds.
pub(crate) fn run_guarded(stream_id: u64, f: impl FnOnce()) {
    IN_HOST_FN.set(true);
    let outcome = catch_unwind(AssertUnwindSafe(f));
    IN_HOST_FN.set(false);
    if let Err(payload) = outcome {
        record_panic(stream_id, payload.as_ref());
        // Dropping a payload can itself panic; never let that unwind into the driver.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

fn record_panic(stream_id: u64, payload: &(dyn Any + Send)) {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string());
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("cuda-stream: a host function on stream {stream_id} panicked: {message}\n").as_bytes(),
    );
    PANICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(HostFnPanic { stream_id, message });
}

/// A boxed `FnOnce` on its way through the driver; counted in [`LIVE`] until dropped.
struct Once<F> {
    f: Option<F>,
    stream_id: u64,
}

impl<F> Once<F> {
    fn new(f: F, stream_id: u64) -> Once<F> {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Once { f: Some(f), stream_id }
    }
}

impl<F> Drop for Once<F> {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The C entry point the driver calls for a `FnOnce`.
///
/// # Safety
/// `data` must come from `Box::into_raw(Box<Once<F>>)` and be passed here once.
unsafe extern "C" fn run_once<F: FnOnce() + Send + 'static>(data: *mut c_void) {
    // SAFETY: the caller's contract: this box was leaked for this one call.
    let mut once = unsafe { Box::from_raw(data.cast::<Once<F>>()) };
    if let Some(f) = once.f.take() {
        run_guarded(once.stream_id, f);
    }
    // Dropping `once` frees the box and uncounts it; `f` was taken, so nothing here can panic.
}

/// The C entry point for a repeatable host function of a graph.
///
/// # Safety
/// `data` must point to an `F` that outlives every run (a graph keeps it in an `Arc`).
pub(crate) unsafe extern "C" fn run_repeatable<F: Fn() + Send + Sync + 'static>(data: *mut c_void) {
    // SAFETY: the caller's contract: `data` points to a live F.
    let f = unsafe { &*data.cast::<F>().cast_const() };
    run_guarded(0, f);
}

impl Stream {
    /// Enqueues `f` to run on a CUDA host thread after the work enqueued here so far; work
    /// enqueued later waits for it. See the [module docs](crate::host_fn) for the rules.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] while the stream is being captured; CUDA's enqueue errors. In
    /// every error case `f` is dropped at once and never runs.
    pub fn launch_host_fn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<()> {
        let data = Box::into_raw(Box::new(Once::new(f, self.id())));
        let enqueued = self.launch_host_fn_raw(run_once::<F>, data.cast());
        if enqueued.is_err() {
            // SAFETY: the driver did not take `data`: we still own the box, freed once here.
            drop(unsafe { Box::from_raw(data) });
        }
        enqueued
    }

    fn launch_host_fn_raw(&self, entry: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> Result<()> {
        if self.is_capturing()? {
            return Err(Error::CaptureMisuse(
                "a FnOnce host function cannot be captured (a graph may replay it); use Capture::launch_host_fn",
            ));
        }
        self.enqueue_host_fn(entry, data)
    }

    /// `cudaLaunchHostFunc` with the crate's checks, for graphs too.
    pub(crate) fn enqueue_host_fn(&self, entry: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> Result<()> {
        let _current = self.enter()?;
        // SAFETY: `entry` honours the contract of `data` (see `run_once` / `run_repeatable`).
        check(unsafe { sys::cudaLaunchHostFunc(self.as_raw(), Some(entry), data) }, "cudaLaunchHostFunc")
    }
}
