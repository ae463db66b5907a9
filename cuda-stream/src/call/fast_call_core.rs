//! The host-side core of the fast-call protocol: the word a fast call reads (the count of
//! captures in progress, with the foreign-handle mark) and the per-thread flags that a
//! capture's begin waits for, the two halves of their Dekker pair. What the protocol is for, and
//! its limits, are told in [`uncaptured_calls`](super::uncaptured_calls) and
//! [`live_captures`](super::live_captures), which re-export what the crate calls.
//!
//! No CUDA, and no path of the crate but [`shim`](super::shim), where its atomics, lock, `Arc`,
//! `Once`, thread-locals, statics and `membarrier` come from: the crate builds it with std's,
//! and the loom model `cuda-stream/tests/loom_fast_calls.rs` includes this same file (`#[path]`)
//! beside a `shim` of loom's, in which `membarrier` is a `SeqCst` fence on the fast side. It
//! checks that a fast call that read no capture in progress never is in CUDA while a capture
//! that was counted meanwhile begins.

use super::shim::{
    Arc, AtomicBool, AtomicU8, AtomicUsize, MEMBARRIER_CMD_PRIVATE_EXPEDITED,
    MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, Mutex, Once, Ordering, PoisonError, compiler_fence, fence, membarrier,
    shared_statics, spin_loop, thread_local, yield_now,
};
use std::cell::{Cell, RefCell};

shared_statics! {
    /// How many captures begun by this crate are in progress (and uncounted joins: see
    /// [`live_captures`](super::live_captures)), and the [`FOREIGN`] bit. The only thing the hot
    /// path reads. Changed under the lock of the captures (`live_captures`'s `CAPTURES`) only.
    static IN_PROGRESS: AtomicUsize = AtomicUsize::new(0);

    /// The flags of the threads that made a fast call, set while one is in progress.
    static FLAGS: Mutex<Vec<Arc<AtomicBool>>> = Mutex::new(Vec::new());

    /// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is registered for this process:
    /// [`UNKNOWN`] until the first thread registers its flag, then [`YES`] or [`NO`].
    static ASYMMETRIC: AtomicU8 = AtomicU8::new(UNKNOWN);
}

/// Set in [`IN_PROGRESS`] once a foreign handle was wrapped: captures this crate does not count
/// may exist from then on.
const FOREIGN: usize = 1 << (usize::BITS - 1);

/// Stores `count`, the captures and uncounted joins in progress, keeping the [`FOREIGN`] bit.
/// Called under the lock of the captures, which every change of the word holds. SeqCst: a
/// record made after a capture began (in CUDA's order) reads the count that includes it (see
/// [`may_capture`]).
pub(crate) fn publish_count(count: usize) {
    let foreign = IN_PROGRESS.load(Ordering::SeqCst) & FOREIGN;
    IN_PROGRESS.store(count | foreign, Ordering::SeqCst);
}

/// Sets the [`FOREIGN`] bit for good, under the lock of the captures, which `lock` takes and
/// which every change of the word holds; once it is set, one relaxed load.
pub(crate) fn mark_foreign<Held>(lock: impl FnOnce() -> Held) {
    if IN_PROGRESS.load(Ordering::Relaxed) & FOREIGN == 0 {
        let _held = lock();
        IN_PROGRESS.fetch_or(FOREIGN, Ordering::SeqCst);
    }
}

/// Whether a handle this crate did not create was ever wrapped (the [`FOREIGN`] bit): from then
/// on no call assumes that no capture exists.
pub(crate) fn foreign() -> bool {
    IN_PROGRESS.load(Ordering::SeqCst) & FOREIGN != 0
}

/// Whether any capture begun by this crate is in progress: one relaxed load. Every refusal
/// of [`live_captures`](super::live_captures) is asked only when this is true.
#[inline(always)]
pub(crate) fn any() -> bool {
    IN_PROGRESS.load(Ordering::Relaxed) & !FOREIGN != 0
}

/// Whether any stream may be capturing: a capture of this crate is in progress, or a foreign
/// handle was seen, whose owner may capture it (see [`live_captures`](super::live_captures)).
/// One load; while false, no stream of the process is capturing.
#[inline(always)]
pub(crate) fn may_capture() -> bool {
    IN_PROGRESS.load(Ordering::SeqCst) != 0
}

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

/// How many threads have a registered flag (the loom model waits until its ended threads have
/// left the registry).
#[cfg(test)]
pub(crate) fn registered_threads() -> usize {
    FLAGS.lock().unwrap_or_else(PoisonError::into_inner).len()
}

/// Clears a thread's flag when its fast call ends.
struct ClearOnDrop(&'static AtomicBool);

impl Drop for ClearOnDrop {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
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
            spin_loop();
            yield_now();
        }
    }
}

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

fn asymmetric_fence_available() -> bool {
    shared_statics! {
        static REGISTER: Once = Once::new();
    }
    REGISTER.call_once(|| {
        let registered = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
        ASYMMETRIC.store(if registered { YES } else { NO }, Ordering::SeqCst);
    });
    ASYMMETRIC.load(Ordering::SeqCst) == YES
}
