//! A future's state, shared by the [`Completion`](crate::Completion) and the reactor that
//! resolves it: below both, so that neither imports the other for it.

use crate::ffi::error::Result;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;

/// A future's state, shared with the reactor.
#[derive(Debug)]
pub(crate) struct Signal {
    state: Mutex<State>,
}

/// Where a future stands.
#[derive(Debug)]
pub(crate) enum State {
    Waiting(Option<Waker>),
    /// The outcome, returned by every poll from then on.
    Done(Result<()>),
}

impl Signal {
    /// A future waiting for the reactor.
    pub(crate) fn waiting() -> Signal {
        Signal { state: Mutex::new(State::Waiting(None)) }
    }

    /// A future resolved at once with `outcome`.
    pub(crate) fn done(outcome: Result<()>) -> Signal {
        Signal { state: Mutex::new(State::Done(outcome)) }
    }

    /// The state, for a poll or a look (never held while waking).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores the outcome and returns the waker to call (outside any lock).
    pub(crate) fn resolve(&self, outcome: Result<()>) -> Option<Waker> {
        match std::mem::replace(&mut *self.lock(), State::Done(outcome)) {
            State::Waiting(waker) => waker,
            State::Done(_) => None,
        }
    }
}
