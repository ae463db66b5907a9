//! Completion futures: `stream.completion().await` resolves once the work enqueued before it
//! has completed, with `Ok(())`, or with the error after a fault. No async runtime is needed
//! or assumed: any executor's `Waker` works.
//!
//! # What wakes them: an event-polling reactor
//! * [`StreamRef::completion`] records an internal event on the stream (no timing; reused from
//!   a small free list, so steady use creates none) and hands it to the reactor.
//!   [`Event::completion`] hands the reactor the user's own event: no stream and no event are
//!   created.
//! * The reactor is one thread per process, named [`REACTOR_THREAD_NAME`], started on the
//!   first future. While anything is pending it queries each pending event
//!   ([`cuEventQuery`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html),
//!   through the driver entry points, from a thread of ours: no CUDA callback thread is
//!   involved, so nothing calls CUDA inside a host function). How it waits between passes is
//!   [`set_reactor_wait`]'s: by default ([`ReactorWait::AsDevice`]) as the device's own
//!   synchronize waits, by its `cudaDeviceSchedule*` flag: under CUDA's default (Auto) and
//!   Spin it queries without pause while a future is pending, so a completion is seen about as
//!   soon as a thread spinning on `cudaEventQuery` sees it, for one busy core while anything
//!   waits; under BlockingSync it spins for a short hot window ([`DEFAULT_HOT_WINDOW`]) after
//!   each arrival or resolution, yields for as long again, then naps a sixteenth of the time
//!   since (20 µs growing to 1 ms), woken early by any arrival. With nothing pending it blocks
//!   on a condition variable and uses no CPU at all, whatever the setting.
//! * Measured (`benches/completion_latency.rs`, H100): the waker is called 1.2× as late after
//!   the work ends as a thread spinning on `cudaEventQuery` notices it (9.0 µs against 7.4 µs).
//!   A task whose executor thread is parked also waits for that thread to wake up (about
//!   30 µs there, whoever wakes it); backing off, completions are seen about 150 to 190 µs
//!   late after a 3 ms wait.
//! * A query that fails resolves its future with that [`Error::Cuda`](crate::Error::Cuda)
//!   (`cudaEventQuery` and the code). A sticky error poisons the context: every pending future
//!   of that device resolves with it, also those whose event still reads as not ready.
//!
//! # Guarantees
//! * Each future resolves exactly once. Its state and waker sit behind one lock, which both
//!   `poll` (storing the waker, replaced on every poll unless it would wake the same task) and
//!   the reactor (storing the outcome, taking the waker) take: a completion between a poll and
//!   its waker's registration cannot be missed. Arrivals are registered under the lock the
//!   reactor checks before it parks, and a parked reactor is woken.
//! * The reactor owns what it queries: an internal event lives in the reactor's entry until
//!   the entry is gone, then returns to the free list; for [`Event::completion`] the entry
//!   holds a clone of the user's `Arc<Event>`, so the handle cannot be destroyed while it may
//!   be queried. The reactor releases the event before it resolves the future.
//! * Dropping a [`Completion`] early is harmless: the drop waits for a polling pass in progress,
//!   so the reactor queries its event no more once the drop returns; it releases the event at
//!   its next pass (at most about 1 ms later). [`pending_completions`] counts what it watches.
//! * Polled again after it resolved, a future returns the same outcome (never turns an error
//!   into `Ok`).
//! * At process exit the reactor makes no further CUDA call: a C `atexit` hook, registered
//!   when the reactor starts (after CUDA's own teardown was registered), waits for a pass in
//!   progress and stops it. Pending futures then never resolve, and nothing hangs.
//!
//! # Limits
//! * A future whose work never completes (or a `Completion` leaked with `mem::forget`) keeps
//!   the reactor polling until the process exits: spinning under a device that spins, about a
//!   thousand times a second when backing off.
//! * Wakers run on the reactor thread, which is in CUDA's Relaxed capture-interaction mode
//!   (so that its queries never break a capture): a task an inline executor polls there makes
//!   its own CUDA calls in that mode too (this crate's calls are still refused as anywhere).
//! * A reset of a device's primary context (`cudaDeviceReset` through `sys`) is not supported:
//!   idle events in the free list and a device's sticky error outlive it.
//! * After `fork`, the child has no reactor thread (and CUDA does not support a child of a
//!   process that initialized it): its new futures resolve at once with
//!   [`Error::ReactorUnavailable`](crate::Error::ReactorUnavailable), and its exit, and drops
//!   of futures it inherited, wait for nothing. Inherited futures never resolve.
//!
//! [`Event::completion`]: crate::Event::completion

// Layer 8 of docs/architecture.md, the reactor and its futures. May use: every layer below
// (ffi to graph).

mod reactor;
mod signal;

use self::reactor::Watched;
use self::signal::{Signal, State};
use crate::event::Event;
use crate::ffi::error::Result;
use crate::stream::StreamRef;
use crate::stream::enqueue::InCapture;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use self::reactor::{
    DEFAULT_HOT_WINDOW, REACTOR_THREAD_NAME, ReactorWait, pending_completions, reactor_wait, set_reactor_wait,
};

/// Resolves when the work before it has completed: `Ok(())`, the error after a fault, or the
/// error that kept it from being registered (see the [module docs](crate::completion)).
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct Completion {
    /// `None` only while dropping.
    signal: Option<Arc<Signal>>,
}

impl Completion {
    fn done(outcome: Result<()>) -> Completion {
        Completion { signal: Some(Arc::new(Signal::done(outcome))) }
    }

    /// A future the reactor resolves when `watched` completes.
    fn watching(watched: Watched) -> Completion {
        let signal = Arc::new(Signal::waiting());
        match reactor::watch(watched, Arc::clone(&signal)) {
            Ok(()) => Completion { signal: Some(signal) },
            Err(error) => Completion::done(Err(error)),
        }
    }

    fn signal(&self) -> &Signal {
        self.signal.as_ref().expect("a completion has its signal until it drops")
    }

    /// Whether the future has resolved (without registering a waker).
    pub fn is_complete(&self) -> bool {
        matches!(*self.signal().lock(), State::Done(_))
    }
}

impl Drop for Completion {
    /// Dropped before it resolved, the future is forgotten by the reactor's next pass; a pass
    /// in progress is waited for, so that once this returns the reactor queries its event no
    /// more (an event from [`Event::from_raw`] may be destroyed by its owner from then on).
    fn drop(&mut self) {
        let Some(signal) = self.signal.take() else { return };
        let pending = !matches!(*signal.lock(), State::Done(_));
        drop(signal);
        if pending {
            crate::call::reactor_passes::wait_for_pass();
        }
    }
}

impl StreamRef {
    /// A future that resolves when the work enqueued here so far has completed. It records an
    /// internal event here ([`cudaEventRecord`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html),
    /// an idle event reused when there is one) for the reactor to poll; later work on the
    /// stream waits for nothing. After a fault it resolves with the sticky error.
    ///
    /// # Errors
    /// Never returned here: the future resolves with them. [`Error::CaptureMisuse`] while the
    /// stream is being captured (the event would become a graph node); [`Error::WrongThread`],
    /// [`Error::InsideHostFn`] and CUDA's record errors as for [`StreamRef::record`];
    /// [`Error::ReactorUnavailable`].
    ///
    /// [`Error::CaptureMisuse`]: crate::Error::CaptureMisuse
    /// [`Error::WrongThread`]: crate::Error::WrongThread
    /// [`Error::InsideHostFn`]: crate::Error::InsideHostFn
    /// [`Error::ReactorUnavailable`]: crate::Error::ReactorUnavailable
    pub fn completion(&self) -> Completion {
        match self.record_internal() {
            Ok(event) => Completion::watching(Watched::Internal(event)),
            Err(error) => Completion::done(Err(error)),
        }
    }

    fn record_internal(&self) -> Result<Event> {
        crate::ffi::inside_host_fn::refuse_inside_host_fn()?;
        let event = reactor::internal_event(self.device())?;
        // Never into a capture: no capture begins, ends or is joined by this stream between
        // the check and the record.
        self.outside_transitions(
            InCapture::Refused("a completion cannot wait on a capturing stream (its event would become a graph node)"),
            || {
                // A failed record may mean a dead event (its context reset, say): destroyed, not
                // handed to the next future.
                let ticket = event.records().before_record();
                self.record_raw(event.as_raw(), 0)?;
                event.records().note_uncaptured_record(ticket);
                Ok(())
            },
        )?;
        Ok(event)
    }
}

impl Event {
    /// A future that resolves when the work before this event's latest record has completed,
    /// as [`cudaEventQuery`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)
    /// reports it at each of the reactor's polls. No stream and no event are created.
    ///
    /// It takes the `Arc` because the reactor queries this very event: its entry holds a clone
    /// until the future resolves (released before the task is woken) or, if the future is
    /// dropped first, until the reactor's next pass. So the handle is never destroyed while it
    /// may be queried, whatever the caller drops. For an event from the unsafe
    /// [`Event::from_raw`], the event is in use (its safety contract) while any clone lives.
    ///
    /// Recording the event again while the future is pending moves its target: a CUDA event
    /// has only its latest record, so the future resolves when that one completes (or at once
    /// if a poll saw the earlier one complete first). An event never recorded is complete:
    /// the future resolves `Ok(())` at the first poll. An event last recorded inside a stream
    /// capture is a graph node, not a marker: the reactor never queries it (CUDA would
    /// invalidate the capture), and the future resolves with [`Error::CaptureMisuse`](crate::Error::CaptureMisuse),
    /// at once or, if the event is recorded into a capture while the future is pending, at the
    /// reactor's next pass.
    ///
    /// # Errors
    /// Never returned here: the future resolves with them. CUDA's errors of the query (the
    /// sticky error after a fault); [`Error::ReactorUnavailable`](crate::Error::ReactorUnavailable);
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) for a captured event.
    pub fn completion(self: &Arc<Self>) -> Completion {
        if let Err(captured) = self.refuse_captured() {
            return Completion::done(Err(captured));
        }
        Completion::watching(Watched::User(Arc::clone(self)))
    }
}

impl Future for Completion {
    type Output = Result<()>;

    /// Polled again after it returned `Ready`, it returns the same outcome again.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut state = self.signal().lock();
        let replaced = match &mut *state {
            State::Done(outcome) => return Poll::Ready(outcome.clone()),
            State::Waiting(Some(waker)) if waker.will_wake(cx.waker()) => return Poll::Pending,
            State::Waiting(waker) => waker.replace(cx.waker().clone()),
        };
        // The executor's old waker is dropped outside the lock the reactor takes.
        drop(state);
        drop(replaced);
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use std::task::Waker;

    #[test]
    fn a_resolved_future_polled_again_returns_the_same_outcome() {
        let mut future = Completion::done(Err(Error::NotCurrent));
        let mut context = Context::from_waker(Waker::noop());
        for _ in 0..2 {
            assert_eq!(Pin::new(&mut future).poll(&mut context), Poll::Ready(Err(Error::NotCurrent)));
        }
        assert!(future.is_complete());
    }
}
