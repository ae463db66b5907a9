//! Completion futures: `stream.completion().await` resolves once the work enqueued before it
//! has completed, with `Ok(())`, or with the sticky error after a fault. Woken by a host
//! callback; no async runtime is needed or assumed.

use crate::error::Result;
use crate::event::Event;
use crate::stream::{Stream, StreamOptions, StreamRef};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Resolves when the work enqueued on a stream before [`StreamRef::completion`] has completed:
/// `Ok(())`, the stream's error after a fault, or the enqueue's error.
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct Completion {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
enum State {
    Waiting(Option<Waker>),
    Done(Option<Result<()>>),
}

impl Completion {
    fn done(outcome: Result<()>) -> Completion {
        Completion { state: Arc::new(Mutex::new(State::Done(Some(outcome)))) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether the work has completed (without registering a waker).
    pub fn is_complete(&self) -> bool {
        matches!(*self.lock(), State::Done(_))
    }
}

fn fire(state: &Mutex<State>, outcome: Result<()>) {
    let previous = std::mem::replace(
        &mut *state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()),
        State::Done(Some(outcome)),
    );
    if let State::Waiting(Some(waker)) = previous {
        waker.wake();
    }
}

impl StreamRef {
    /// A future that resolves when the work enqueued here so far has completed. Costs one host
    /// callback ([`StreamRef::launch_host_callback`]); later work on the stream waits for it (it
    /// only stores the outcome and wakes a task). After a fault it resolves with the error.
    pub fn completion(&self) -> Completion {
        let state = Arc::new(Mutex::new(State::Waiting(None)));
        let fired = Arc::clone(&state);
        match self.launch_host_callback(move |outcome| fire(&fired, outcome)) {
            Ok(()) => Completion { state },
            Err(error) => Completion::done(Err(error)),
        }
    }
}

impl Event {
    /// A future that resolves when the work before this event's last record has completed.
    /// It waits on a new non-blocking stream of the event's device, created for this call and
    /// released at once (CUDA finishes its pending work): about one stream creation, and no
    /// stream of the caller is held up.
    pub fn completion(&self) -> Completion {
        let waiter = Stream::new(self.device(), StreamOptions::non_blocking());
        match waiter.and_then(|waiter| waiter.wait_event(self).map(|()| waiter)) {
            Ok(waiter) => waiter.completion(),
            Err(error) => Completion::done(Err(error)),
        }
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut state = self.lock();
        match &mut *state {
            State::Done(outcome) => Poll::Ready(outcome.take().unwrap_or(Ok(()))),
            State::Waiting(waker) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
