//! Completion futures: `stream.completion().await` resolves once the work enqueued before it
//! has completed. Woken by a host function; no async runtime is needed or assumed.

use crate::error::Result;
use crate::event::Event;
use crate::stream::{Stream, StreamOptions};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Resolves when the work enqueued on a stream before [`Stream::completion`] has completed.
/// Its output is the enqueue's error, if the host function could not be enqueued.
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct Completion {
    state: State,
}

#[derive(Debug)]
enum State {
    Waiting(Arc<Signal>),
    Failed(Option<crate::Error>),
}

#[derive(Debug, Default)]
struct Signal {
    done: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    fn fire(&self) {
        self.done.store(true, Ordering::Release);
        let waker = self.waker.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Stream {
    /// A future that resolves when the work enqueued here so far has completed. Costs one host
    /// function; later work on the stream waits for it (it only sets a flag and wakes a task).
    pub fn completion(&self) -> Completion {
        let signal = Arc::new(Signal::default());
        let fired = Arc::clone(&signal);
        let state = match self.launch_host_fn(move || fired.fire()) {
            Ok(()) => State::Waiting(signal),
            Err(error) => State::Failed(Some(error)),
        };
        Completion { state }
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
            Err(error) => Completion { state: State::Failed(Some(error)) },
        }
    }
}

impl Completion {
    /// Whether the work has completed (without registering a waker).
    pub fn is_complete(&self) -> bool {
        match &self.state {
            State::Waiting(signal) => signal.done.load(Ordering::Acquire),
            State::Failed(_) => true,
        }
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match &mut self.state {
            State::Failed(error) => Poll::Ready(error.take().map_or(Ok(()), Err)),
            State::Waiting(signal) => {
                if signal.done.load(Ordering::Acquire) {
                    return Poll::Ready(Ok(()));
                }
                *signal.waker.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(cx.waker().clone());
                // Fired between the first check and storing the waker: do not sleep forever.
                if signal.done.load(Ordering::Acquire) { Poll::Ready(Ok(())) } else { Poll::Pending }
            }
        }
    }
}
