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
//!
//! The flags, the waits and the fast path itself are written in
//! [`fast_call_core`](super::fast_call_core), with no CUDA, so that the loom model
//! (`cuda-stream/tests/loom_fast_calls.rs`) checks that same source; this module re-exports them.

use super::live_captures;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a wait for the fast calls that began after the foreign mark was visible, outside
/// any fast call, has returned ([`foreign_handle_seen`]): no fast call that read the mark unset
/// is in progress any more.
static SETTLED: AtomicBool = AtomicBool::new(false);

/// Whether fast calls that read no capture possible may still be in progress: while none may
/// be (new ones begin), and, once the foreign mark is set, until [`SETTLED`]. (A capture of this
/// crate waits for them at its begin; while one is counted, no new one begins.) A join, or a
/// record into a capture no begin announced, made meanwhile waits for them.
pub(crate) fn fast_calls_may_be_in_progress() -> bool {
    !live_captures::may_capture() || (live_captures::foreign() && !SETTLED.load(Ordering::Acquire))
}

pub(crate) use super::fast_call_core::{in_fast_call, outside_captures, wait_for_uncaptured_calls};

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
    live_captures::foreign_handle_seen();
    if !SETTLED.load(Ordering::Acquire) && !in_fast_call() {
        wait_for_uncaptured_calls();
        SETTLED.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::fast_call_core::registered_threads;
    use crate::call::live_captures::tests::SERIAL;
    use crate::sys;
    use std::sync::PoisonError;
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
            // A caller that made a fast call is registered while it lives (the other may not
            // have begun yet; other tests' threads may add theirs).
            assert!(registered_threads() >= 1);
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
