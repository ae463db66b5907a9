//! Calls made on the strength of "no capture can be in progress" (an event record's fast path),
//! announced per thread so that a capture of this crate waits for them before it begins.
//!
//! A record that read no capture in progress goes to CUDA without any lock. Another thread
//! could then begin a capture, record the same event into it and end it while that record is
//! still in CUDA: a real record overlapping a captured record of one event, or the end of its
//! capture, crashed libcuda (CUDA 13.0, `cuEventRecord`, fault address 0x110; once in about
//! thirty runs of `crash_free`). So the fast path sets a flag of its thread before it reads the
//! count of captures and clears it after the call, and a capture's begin, once counted, waits
//! until every flag set before the count was visible has cleared. The two sides form a Dekker
//! pair (flag, then count; count, then flags) with the fence on the begin's side only: a
//! process-wide `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` makes every running thread of
//! the process pass a full barrier, so the fast path pays a thread-local store and no fence.
//! Where the kernel refuses `membarrier`, the fast path fences itself (`SeqCst`).
//!
//! Limits: the begin waits under the capture-transition lock, so a fast record that blocks
//! inside CUDA (a stream whose queue is full, behind work that waits for the host) holds every
//! capture begin and end, and every call that takes that lock, until the device makes room; a
//! forked child inherits the flags of threads it does not have (CUDA is not usable after
//! `fork` anyway). Marking a foreign handle ([`foreign_handle_seen`]) waits for the fast calls
//! once, as a begin does.
//!
//! Event queries are fast calls too: they check the event's captured mark inside the call,
//! after the flag, so a record into a capture (which marks the event, then waits for the fast
//! calls when no begin of this crate announced its capture) and a query never overlap in CUDA,
//! without the two atomic read-modify-writes of a counted call (see
//! [`RecordState::marker_call`](crate::event::record_state::RecordState::marker_call)).

use super::live_captures::{self, may_capture};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering, compiler_fence, fence};
use std::sync::{Arc, Mutex, Once, PoisonError};

/// The flags of the threads that made a fast call, set while one is in progress.
static FLAGS: Mutex<Vec<Arc<AtomicBool>>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's flag (null until its first fast call, and again once the thread's
    /// registration is gone): a constant thread-local without a destructor, one load to reach.
    static FLAG: Cell<*const AtomicBool> = const { Cell::new(std::ptr::null()) };
    /// What keeps [`FLAG`] alive and registered in [`FLAGS`]; taken out when the thread ends.
    static REGISTERED: RefCell<Option<Registered>> = const { RefCell::new(None) };
}

struct Registered(Arc<AtomicBool>);

impl Drop for Registered {
    fn drop(&mut self) {
        // Later fast calls of this ending thread register nothing: they take the slow path.
        let _ = FLAG.try_with(|flag| flag.set(std::ptr::null()));
        let mut flags = FLAGS.lock().unwrap_or_else(PoisonError::into_inner);
        flags.retain(|flag| !Arc::ptr_eq(flag, &self.0));
    }
}

/// This thread's flag, registered on first use; `None` while the thread is being torn down.
#[inline(always)]
fn this_threads_flag() -> Option<&'static AtomicBool> {
    let flag = FLAG.try_with(Cell::get).ok()?;
    if flag.is_null() {
        return register();
    }
    // SAFETY: `REGISTERED` keeps the flag alive until it drops, and its drop nulls `FLAG`
    // first; the reference is used within one fast call of this thread.
    Some(unsafe { &*flag })
}

#[cold]
#[inline(never)]
fn register() -> Option<&'static AtomicBool> {
    // Decided before this thread's first fast call: the fast path then knows whether it must
    // fence itself.
    let _ = asymmetric_fence_available();
    let flag = Arc::new(AtomicBool::new(false));
    REGISTERED
        .try_with(|registered| {
            FLAGS.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::clone(&flag));
            *registered.borrow_mut() = Some(Registered(Arc::clone(&flag)));
        })
        .ok()?;
    FLAG.try_with(|cell| cell.set(Arc::as_ptr(&flag))).ok()?;
    // SAFETY: as in `this_threads_flag`: `REGISTERED` now holds it.
    Some(unsafe { &*Arc::as_ptr(&flag) })
}

/// Runs `call` if no capture may be in progress (see [`may_capture`]) and returns its result;
/// `None`, without running it, when one may. A capture of this crate that is counted meanwhile
/// does not begin until `call` has returned.
#[inline(always)]
pub(crate) fn outside_captures<R>(call: impl FnOnce() -> R) -> Option<R> {
    // A thread being torn down (its thread-locals gone) takes the slow path.
    let flag = this_threads_flag()?;
    if flag.load(Ordering::Relaxed) {
        // Nested in a fast call of this thread (a record inside a wait): a capture's begin
        // waits for the outer one, but this thread itself may have changed the premise since
        // (a foreign handle wrapped): the count is read again, and a caller that finds a
        // capture possible takes its held path (which takes no lock inside a fast call).
        return (!may_capture()).then(call);
    }
    flag.store(true, Ordering::Relaxed);
    // Cleared however the call ends (a panic too: a flag left set would hold every capture's
    // begin for good).
    let _clear = ClearOnDrop(flag);
    if ASYMMETRIC.load(Ordering::Relaxed) == YES {
        // The begin's membarrier orders this store before the load below.
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
    if may_capture() { None } else { Some(call()) }
}

/// Whether this thread is inside a fast call (a closure that one runs).
pub(crate) fn in_fast_call() -> bool {
    let flag = FLAG.try_with(Cell::get).unwrap_or(std::ptr::null());
    // SAFETY: as in `this_threads_flag`: non-null only while `REGISTERED` keeps it alive.
    !flag.is_null() && unsafe { &*flag }.load(Ordering::Relaxed)
}

/// Clears a thread's flag when its fast call ends.
struct ClearOnDrop(&'static AtomicBool);

impl Drop for ClearOnDrop {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Marks the process as holding a foreign handle ([`live_captures::foreign_handle_seen`]):
/// from now on a capture this crate cannot count may be in progress, so no call is fast any
/// more. Until the fast calls that read the mark unset are known to have returned, waits for
/// them: a record of the foreign owner's (or one of ours into its capture) never overlaps one
/// of them. Every caller waits until then, not only the first: a second thread wrapping a
/// handle while the first still waits would otherwise hand it out early.
///
/// Inside a fast call (a raw launcher's closure) it only marks: waiting there could wait for
/// another thread's fast call that waits for this one, and this thread's own call goes on
/// under the old premise anyway. The functions that wrap foreign handles are `unsafe` and
/// keep out of raw launchers in their contracts.
#[inline]
pub(crate) fn foreign_handle_seen() {
    /// Set once a wait that began after the mark was visible, outside any fast call, has
    /// returned.
    static SETTLED: AtomicBool = AtomicBool::new(false);
    live_captures::foreign_handle_seen();
    if !SETTLED.load(Ordering::Acquire) && !in_fast_call() {
        wait_for_uncaptured_calls();
        SETTLED.store(true, Ordering::Release);
    }
}

/// Waits until every fast call that may have read no capture in progress, or no mark made
/// before this, has returned. Called by a capture's begin after it was counted, under the
/// capture-transition lock, and by a record into a capture that no begin of this crate
/// announced (another library's capture of the per-thread stream) after it marked its event.
pub(crate) fn wait_for_uncaptured_calls() {
    if !(asymmetric_fence_available() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)) {
        // Refused now (it never is once registered, but a forked child, say): later fast calls
        // fence themselves. One that skipped its fence before this is still a window.
        ASYMMETRIC.store(NO, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
    // Not this thread's own flag: a transition refuses to begin inside a fast call, and a record
    // made inside one (nested in a wait) waits for the other threads' calls only.
    let own = FLAG.try_with(Cell::get).unwrap_or(std::ptr::null());
    let flags: Vec<Arc<AtomicBool>> = FLAGS.lock().unwrap_or_else(PoisonError::into_inner).clone();
    for flag in flags.iter().filter(|flag| !std::ptr::eq(Arc::as_ptr(flag), own)) {
        while flag.load(Ordering::Acquire) {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }
}

/// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is registered for this process:
/// [`UNKNOWN`] until the first thread registers its flag, then [`YES`] or [`NO`].
static ASYMMETRIC: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

fn asymmetric_fence_available() -> bool {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        let registered = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
        ASYMMETRIC.store(if registered { YES } else { NO }, Ordering::SeqCst);
    });
    ASYMMETRIC.load(Ordering::SeqCst) == YES
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 4;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const SYS_MEMBARRIER: std::ffi::c_long = 324;
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
const SYS_MEMBARRIER: std::ffi::c_long = 283;

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe extern "C" {
    /// glibc's `syscall`.
    fn syscall(number: std::ffi::c_long, ...) -> std::ffi::c_long;
}

/// `membarrier(command, 0)`; whether it succeeded.
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
fn membarrier(command: std::ffi::c_long) -> bool {
    // SAFETY: the membarrier system call with a command and zero flags touches no memory of ours.
    unsafe { syscall(SYS_MEMBARRIER, command, 0 as std::ffi::c_long) == 0 }
}

/// No `membarrier` known for this target: the fast path fences itself.
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
fn membarrier(_command: std::ffi::c_long) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::live_captures::{self, tests::SERIAL};
    use crate::sys;
    use std::sync::atomic::{AtomicU32, AtomicU64};

    /// Two threads make fast calls all along while captures are counted and uncounted: once a
    /// counted capture has waited, no fast call is in progress until it is uncounted (each call
    /// marks itself in `in_call` while it runs).
    #[test]
    fn a_counted_capture_waits_for_the_fast_calls_that_read_none() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let (in_call, stop) = (AtomicU32::new(0), AtomicBool::new(false));
        let (fast, slow) = (AtomicU64::new(0), AtomicU64::new(0));
        let relaxed = sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed;
        /// Stops the callers however the checks end (a failed assertion too, or the scope
        /// would wait for them forever).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        std::thread::scope(|scope| {
            let stopping = StopOnDrop(&stop);
            for _ in 0..2 {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let ran = outside_captures(|| {
                            in_call.fetch_add(1, Ordering::SeqCst);
                            for _ in 0..1_000 {
                                std::hint::spin_loop();
                            }
                            in_call.fetch_sub(1, Ordering::SeqCst);
                        });
                        let counter = if ran.is_some() { &fast } else { &slow };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            while fast.load(Ordering::Relaxed) < 100 {
                std::thread::yield_now();
            }
            for round in 0..2_000 {
                let entry = live_captures::begun(0, relaxed);
                wait_for_uncaptured_calls();
                for _ in 0..20 {
                    assert_eq!(in_call.load(Ordering::SeqCst), 0, "round {round}: a fast call ran during a capture");
                    std::hint::spin_loop();
                }
                live_captures::ended(entry);
                // Fast calls resume meanwhile.
                let resumed = fast.load(Ordering::Relaxed) + 2;
                while fast.load(Ordering::Relaxed) < resumed {
                    std::hint::spin_loop();
                }
            }
            drop(stopping);
        });
        let (fast, slow) = (fast.into_inner(), slow.into_inner());
        assert!(fast > 0 && slow > 0, "the calls met both states: {fast} fast, {slow} slow");
    }
}
