//! Inside a host function: whether this thread is running a closure for CUDA (a host function,
//! or a user object's destructor), where CUDA calls are forbidden (they may deadlock), and the
//! panics caught there.
//!
//! Every layer above asks [`refuse_inside_host_fn`] before it reaches CUDA; drops that must
//! destroy a handle go through [`call_outside_host_fn`]. [`run_guarded`] is how every closure
//! CUDA calls is run: flagged, panics caught and queued, never unwinding into the driver.

use super::error::{Error, Result};
use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

thread_local! {
    /// Set while this thread runs (or drops) one of our host functions.
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// Panics caught in host functions, oldest first.
static PANICS: Mutex<Vec<HostFnPanic>> = Mutex::new(Vec::new());

/// A panic caught inside a host function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFnPanic {
    /// The handle of the stream that ran it, as CUDA passed it; `None` for a graph's host node.
    pub stream: Option<usize>,
    /// The panic's message, when it was a string.
    pub message: String,
}

/// Returns (and forgets) the panics caught in host functions so far, oldest first.
pub fn take_host_fn_panics() -> Vec<HostFnPanic> {
    std::mem::take(&mut *PANICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
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

/// Runs `f` on a thread of CUDA's (a host function, or a user object's destructor): flagged as
/// inside a host function, panics caught and queued, the payload dropped while still flagged.
/// Never unwinds.
pub(crate) fn run_guarded(stream: Option<usize>, f: impl FnOnce()) {
    let outer = IN_HOST_FN.replace(true);
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        record_panic(stream, payload.as_ref());
        // Dropping a payload can itself panic; never let that unwind into the driver.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
    IN_HOST_FN.set(outer);
}

fn record_panic(stream: Option<usize>, payload: &(dyn Any + Send)) {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string());
    let place = stream.map_or_else(|| "a graph host node".to_string(), |stream| format!("stream {stream:#x}"));
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("cuda-stream: a host function on {place} panicked: {message}\n").as_bytes(),
    );
    PANICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(HostFnPanic { stream, message });
}
