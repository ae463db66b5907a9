//! The captures begun through this crate that are in progress, and the calls they forbid: the
//! bookkeeping behind the refusals listed in [the capture docs](crate::capture#calls-refused-during-a-capture).
//!
//! The hot path reads one relaxed atomic, the number of captures in progress; only when it is
//! not zero does a call take the lock and look at the captures themselves (device, mode, thread).
//!
//! The same word has one more bit, `FOREIGN` (the word and its bit are kept in
//! [`fast_call_core`](super::fast_call_core)): set for good once a stream or event handle this
//! crate did not create has been wrapped ([`foreign_handle_seen`]). From then on a capture this
//! crate cannot count may be in progress on any stream: a foreign stream can be captured by its
//! owner (`torch.cuda.graph`, cudarc), and a stream of ours that waits on it joins that capture.
//! [`may_capture`] says whether any capture is possible at all; while it is false (the common
//! case of a program that only uses its own streams and has no capture in progress), the calls
//! whose meaning changes during a capture (records, `wait_stream`, pool returns) skip reading
//! the stream's capture status.

use super::fast_call_core::{mark_foreign, publish_count};
use crate::ffi::error::{Error, Result};
use crate::sys;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

// The word the hot path reads (`CAPTURES.len()` plus the uncounted joins, readable without the
// lock, and the foreign-handle bit) is kept in the fast-call core, which the loom model checks.
pub(crate) use super::fast_call_core::{any, foreign, may_capture};

/// One entry per capture in progress.
static CAPTURES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Joins of captures this crate did not count, in progress ([`uncounted_join`]): counted in
/// the word that [`may_capture`] reads beside the captures, changed under the [`CAPTURES`] lock.
static UNCOUNTED_JOINS: AtomicUsize = AtomicUsize::new(0);

/// A capture in progress: where (the device's ordinal: this layer sits below devices), in
/// which mode, and (for the modes that end on the thread that began them) by which thread. Its [`Capture`](crate::Capture) keeps it, to uncount it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    device: i32,
    mode: sys::cudaStreamCaptureMode,
    /// The thread identity that began it; 0 for a Relaxed capture, which may change threads.
    thread: u64,
    /// CUDA's id of the capture once begun ([`identified`]); 0 before.
    id: u64,
}

impl Entry {
    fn new(device: i32, mode: sys::cudaStreamCaptureMode) -> Entry {
        let relaxed = mode == sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed;
        Entry { device, mode, thread: if relaxed { 0 } else { super::thread::thread_identity() }, id: 0 }
    }
}

fn captures() -> MutexGuard<'static, Vec<Entry>> {
    CAPTURES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts a capture of the device of ordinal `device` in `mode` that this thread is about to
/// begin, under the capture-transition lock: counted before CUDA begins it, so a record that
/// CUDA orders after the begin sees the count. [`ended`] takes the entry back, also when the
/// begin fails.
pub(crate) fn begun(device: i32, mode: sys::cudaStreamCaptureMode) -> Entry {
    let entry = Entry::new(device, mode);
    let mut captures = captures();
    captures.push(entry);
    publish(&captures);
    entry
}

/// Uncounts a capture that [`begun`] counted: called once per capture, whether or not CUDA
/// ended it cleanly, on any thread.
pub(crate) fn ended(entry: Entry) {
    let mut captures = captures();
    if let Some(index) = captures.iter().position(|counted| *counted == entry) {
        captures.swap_remove(index);
    }
    publish(&captures);
}

/// Records CUDA's id of the capture that `entry` counts, once it has begun (under the
/// capture-transition lock, before any stream can join it); returns the entry as it is now
/// kept, for [`ended`].
pub(crate) fn identified(entry: Entry, id: u64) -> Entry {
    let mut captures = captures();
    let identified = Entry { id, ..entry };
    if let Some(counted) = captures.iter_mut().find(|counted| **counted == entry) {
        *counted = identified;
    }
    identified
}

/// Whether the capture of CUDA's id `id` is one this crate counts.
pub(crate) fn is_counted(id: u64) -> bool {
    captures().iter().any(|capture| capture.id == id)
}

/// Counts a wait that may join a capture this crate did not count (another library's capture
/// of its thread's per-thread stream, seen through a captured event or that stream) while it
/// is made: [`may_capture`] is true meanwhile, so no call takes the fast path that assumes no
/// capture exists. Uncounted when the returned guard drops.
pub(crate) fn uncounted_join() -> UncountedJoin {
    let captures = captures();
    UNCOUNTED_JOINS.fetch_add(1, Ordering::SeqCst);
    publish(&captures);
    UncountedJoin(())
}

/// A join counted by [`uncounted_join`].
pub(crate) struct UncountedJoin(());

impl Drop for UncountedJoin {
    fn drop(&mut self) {
        let captures = captures();
        UNCOUNTED_JOINS.fetch_sub(1, Ordering::SeqCst);
        publish(&captures);
    }
}

/// Stores the count of captures and uncounted joins (under the lock, whose guard `captures`
/// is), keeping the foreign-handle bit. SeqCst: a record made after a capture began (in CUDA's
/// order) reads the count that includes it (see [`may_capture`]).
fn publish(captures: &MutexGuard<'static, Vec<Entry>>) {
    publish_count(captures.len() + UNCOUNTED_JOINS.load(Ordering::SeqCst));
}

/// Marks the process as holding a handle this crate did not create (a borrowed stream or
/// event, a stream taken over or lent to another library): captures this crate does not count
/// may be in progress from now on. Never cleared. Every caller goes through
/// [`uncaptured_calls::foreign_handle_seen`](super::uncaptured_calls::foreign_handle_seen),
/// which then waits for the fast calls that read it unset.
#[inline]
pub(crate) fn foreign_handle_seen() {
    mark_foreign(captures);
}

/// Refuses an operation on the legacy stream of the device of ordinal `device` while a capture of that device is in
/// progress.
#[cold]
#[inline(never)]
pub(crate) fn refuse_legacy_stream(device: i32) -> Result<()> {
    if captures().iter().any(|capture| capture.device == device) {
        return Err(Error::CaptureMisuse(
            "the legacy default stream cannot be used while a stream of its device is being captured \
             (CUDA would invalidate the capture)",
        ));
    }
    Ok(())
}

/// Refuses a query or synchronize (CUDA's "potentially unsafe" calls) on this thread while it
/// has a Global or ThreadLocal capture in progress, or while any thread has a Global one.
#[cold]
#[inline(never)]
pub(crate) fn refuse_unsafe_call() -> Result<()> {
    let captures = captures();
    let thread = super::thread::thread_identity();
    if captures.iter().any(|capture| capture.thread == thread) {
        return Err(Error::CaptureMisuse(
            "a query or synchronize on the thread of a Global or ThreadLocal capture in progress \
             would invalidate the capture",
        ));
    }
    if captures.iter().any(|capture| capture.mode == sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal) {
        return Err(Error::CaptureMisuse(
            "a query or synchronize on any thread while a Global capture is in progress would invalidate the capture",
        ));
    }
    Ok(())
}

/// Refuses [`Device::synchronize`](crate::Device::synchronize): while a capture of the device of
/// ordinal `device` is in progress, and wherever
/// [`refuse_unsafe_call`] refuses.
#[cold]
#[inline(never)]
pub(crate) fn refuse_device_synchronize(device: i32) -> Result<()> {
    if captures().iter().any(|capture| capture.device == device) {
        return Err(Error::CaptureMisuse(
            "Device::synchronize while a stream of the device is being captured would invalidate the capture",
        ));
    }
    refuse_unsafe_call()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Serializes the tests that change the process-wide counts.
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

    fn device(ordinal: i32) -> i32 {
        ordinal
    }

    const GLOBAL: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal;
    const THREAD_LOCAL: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
    const RELAXED: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed;

    fn on_another_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| scope.spawn(f).join().unwrap())
    }

    #[test]
    fn the_rules_follow_the_counted_captures_without_a_gpu() {
        let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (gpu0, gpu1) = (device(0), device(1));
        assert!(!any());
        assert_eq!(refuse_device_synchronize(gpu0), Ok(()));

        let relaxed = begun(gpu0, RELAXED);
        assert!(any());
        assert!(matches!(refuse_legacy_stream(gpu0), Err(Error::CaptureMisuse(_))));
        assert_eq!(refuse_legacy_stream(gpu1), Ok(()), "another device's legacy stream is free");
        assert!(matches!(refuse_device_synchronize(gpu0), Err(Error::CaptureMisuse(_))));
        assert_eq!(refuse_device_synchronize(gpu1), Ok(()));
        assert_eq!(refuse_unsafe_call(), Ok(()), "a Relaxed capture forbids no query");
        // A Relaxed capture may end on another thread.
        on_another_thread(|| ended(relaxed));
        assert!(!any());

        let thread_local = begun(gpu1, THREAD_LOCAL);
        assert!(matches!(refuse_unsafe_call(), Err(Error::CaptureMisuse(_))), "on its own thread");
        assert!(matches!(refuse_device_synchronize(gpu0), Err(Error::CaptureMisuse(_))), "on its own thread");
        assert_eq!(on_another_thread(refuse_unsafe_call), Ok(()), "ThreadLocal: other threads are free");
        assert_eq!(on_another_thread(|| refuse_device_synchronize(gpu0)), Ok(()));
        ended(thread_local);

        let global = begun(gpu1, GLOBAL);
        assert!(matches!(on_another_thread(refuse_unsafe_call), Err(Error::CaptureMisuse(_))), "Global: every thread");
        assert_eq!(refuse_legacy_stream(gpu0), Ok(()));
        ended(global);
        assert!(!any());
        assert_eq!(refuse_unsafe_call(), Ok(()));
    }

    #[test]
    fn an_uncounted_join_turns_the_fast_paths_off_while_it_lasts_and_refuses_nothing() {
        let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        assert!(!may_capture());
        let join = uncounted_join();
        assert!(may_capture() && any(), "no call assumes that no capture exists meanwhile");
        assert_eq!(refuse_unsafe_call(), Ok(()));
        assert_eq!(refuse_legacy_stream(0), Ok(()));
        assert_eq!(refuse_device_synchronize(0), Ok(()));
        let global = begun(device(0), GLOBAL);
        drop(join);
        assert!(any(), "the capture begun meanwhile is still counted");
        ended(global);
        assert!(!may_capture());
    }

    #[test]
    fn an_identified_capture_is_known_by_its_id_until_it_ends() {
        let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (first, second) = (begun(device(0), GLOBAL), begun(device(0), GLOBAL));
        assert!(!is_counted(7), "not identified yet");
        let first = identified(first, 7);
        let second = identified(second, 8);
        assert!(is_counted(7) && is_counted(8) && !is_counted(9));
        ended(first);
        assert!(!is_counted(7) && is_counted(8), "its end removes the identified entry");
        ended(second);
        assert!(!is_counted(8) && !any());
    }

    #[test]
    fn an_end_removes_one_entry_of_its_kind() {
        let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let first = begun(device(0), GLOBAL);
        let second = begun(device(0), GLOBAL);
        ended(first);
        assert!(any(), "one of two equal captures is still in progress");
        ended(second);
        assert!(!any());
    }
}
