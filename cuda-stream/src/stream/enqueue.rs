//! The one enqueue path: every operation that puts work on a stream goes through
//! [`StreamRef::enqueue`], which owns the whole protocol, or, for an operation with its own
//! race-detector bookkeeping (records, graph launches, a buffer's ordered uses), through the
//! hold it is built on, [`StreamRef::outside_transitions`]. The capture-status reads go through
//! that hold too. What an operation writes is only what is specific to it: its CUDA call, as a
//! closure, and a [`Work`] that says what it is.
//!
//! The protocol, in order:
//! 1. the crate's refusals before anything else: inside a host function, another thread's
//!    per-thread stream, the legacy stream while its device captures (sync-debug reports work
//!    on the legacy stream here), through the stream's entry, which also makes the stream's
//!    device current where the call needs it ([`Calls`]);
//! 2. the hold: while no capture may be in progress, a fast call (a capture of this crate does
//!    not begin until it has returned: one thread-local store, no lock); otherwise the read
//!    side of the capture-transition lock, so that no capture begins, ends or is joined, and no
//!    node is added to a capture's graph by hand, until the call has returned;
//! 3. under the hold, for work that must not be captured ([`InCapture::Refused`]), the stream's
//!    capture status ([`Error::CaptureMisuse`] before CUDA); the per-thread stream, which
//!    another library may capture at any time, is always checked;
//! 4. the race detector's check (work going into a capture is noted for the graph's launches);
//! 5. the call, for work going into a capture of this crate under the
//!    [graph-mutation lock](graph_mutations) (a capture's graph is not internally synchronized,
//!    and another thread may be adding to it through another stream of the capture); once CUDA
//!    took it, the race detector records it.
//!
//! Holds nest: a call made inside another's hold (a record inside a wait, a copy inside a
//! buffer's ordered use) takes nothing more, and a capture transition there is refused (it
//! would wait for its own caller). A raw launcher runs inside the hold (it must launch and
//! return); a `use_on` closure runs outside any: it may wait for other threads' calls. The
//! lock order is in `docs/architecture.md`.

use super::StreamRef;
use crate::call::race::model::{Step, Use};
use crate::call::transitions::no_capture_transitions;
use crate::call::{live_captures, uncaptured_calls};
use crate::device::DeviceGuard;
use crate::device::keep_alive::{GraphTurn, graph_mutations};
use crate::ffi::error::{Error, Result, carry, unpack};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;

/// What happens to an operation on a stream that is being captured.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum InCapture {
    /// CUDA captures it into the graph (kernels, copies, fills): it runs at the graph's launches.
    Captured,
    /// It must not be captured (a host function a graph could replay, a graph launch, a
    /// completion's event, an allocation): [`Error::CaptureMisuse`] with this reason, before
    /// CUDA.
    Refused(&'static str),
}

/// How an enqueue reaches CUDA.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Calls {
    /// Through the runtime: the stream's device is made current for the call (on a thread
    /// with no current context the runtime would otherwise bind device 0's).
    Runtime,
    /// Through the driver for a stream handle of its own ([`Via::Driver`]: no context is made
    /// current, none is bound); through the runtime, with the device current, for a built-in
    /// stream ([`Via::Runtime`]).
    Driver,
    /// Through the runtime, with the stream entered by the caller, which needed the device
    /// current for checks of its own before (a typed launch's signature and configuration):
    /// its guard lives until the enqueue has returned.
    Entered,
}

/// Which API the enqueue's closure calls.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    Driver,
    Runtime,
}

/// An operation, as the one enqueue path takes it: its name (in race reports), its step in
/// the race model, the accesses it makes (built only while the detector tracks), what happens
/// to it in a capture, and how it reaches CUDA.
pub(crate) struct Work<U> {
    name: &'static str,
    step: Step,
    uses: U,
    in_capture: InCapture,
    calls: Calls,
}

impl Work<fn() -> Vec<Use>> {
    /// Work named `name` that accesses no memory the detector knows, captured in a capture,
    /// through the runtime.
    #[inline(always)]
    pub(crate) fn named(name: &'static str) -> Self {
        Work { name, step: Step::Work, uses: Vec::new, in_capture: InCapture::Captured, calls: Calls::Runtime }
    }
}

impl<U: FnOnce() -> Vec<Use>> Work<U> {
    /// With the accesses `uses` returns.
    #[inline(always)]
    pub(crate) fn uses<V: FnOnce() -> Vec<Use>>(self, uses: V) -> Work<V> {
        let Work { name, step, in_capture, calls, .. } = self;
        Work { name, step, uses, in_capture, calls }
    }

    /// As step `step` of the race model (a record, a wait) instead of work.
    #[inline(always)]
    pub(crate) fn step(self, step: Step) -> Self {
        Work { step, ..self }
    }

    /// Refused on a capturing stream, with `why`.
    #[inline(always)]
    pub(crate) fn refused_in_capture(self, why: &'static str) -> Self {
        Work { in_capture: InCapture::Refused(why), ..self }
    }

    /// Entered by the caller (see [`Calls::Entered`]).
    #[inline(always)]
    pub(crate) fn entered(self) -> Self {
        Work { calls: Calls::Entered, ..self }
    }

    /// Through the driver where the stream's handle allows it (see [`Calls::Driver`]).
    #[inline(always)]
    pub(crate) fn through_driver(self) -> Self {
        Work { calls: Calls::Driver, ..self }
    }
}

impl StreamRef {
    /// Enqueues `work` here: `call` makes its CUDA call, through the API [`Via`] says, and
    /// everything else is the protocol of the [module docs](self).
    ///
    /// # Errors
    /// The crate's refusals ([`Error::InsideHostFn`], [`Error::WrongThread`],
    /// [`Error::CaptureMisuse`]), the race detector's [`Error::Race`] under `Fail`, and what
    /// `call` returns.
    #[inline(always)]
    pub(crate) fn enqueue<R, U: FnOnce() -> Vec<Use>>(
        &self,
        work: Work<U>,
        call: impl FnOnce(Via) -> Result<R>,
    ) -> Result<R> {
        let Work { name, step, uses, in_capture, calls } = work;
        let (_current, via) = self.enter_for(calls)?;
        self.outside_transitions(in_capture, || {
            self.race_checked(name, step, uses, || {
                let _turn = self.graph_turn_if_capturing(in_capture);
                call(via)
            })
        })
    }

    /// Steps 4 and 5 of the [protocol](self) around `call`: the race detector's check before
    /// it, and its record once CUDA took the work.
    #[inline(always)]
    fn race_checked<R>(
        &self,
        name: &'static str,
        step: Step,
        uses: impl FnOnce() -> Vec<Use>,
        call: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let checked = self.race_check(step, uses, || name.to_owned())?;
        let done = call()?;
        checked.enqueued();
        Ok(done)
    }

    /// [`StreamRef::enqueue`] as a fast call only, for operations with a path of their own
    /// while captures may exist (a record marks its event first, a wait may join a capture):
    /// while no capture may be in progress and `premise` (read inside the fast call, after its
    /// flag) holds, the protocol's steps 1, 4 and 5 in a fast call (no capture of this crate
    /// takes the work); otherwise `None`, nothing done. As in
    /// [`StreamRef::outside_transitions`], work refused in a capture takes no fast call on the
    /// per-thread stream, which another library may capture at any time.
    #[inline(always)]
    pub(crate) fn enqueue_outside_captures<R, U: FnOnce() -> Vec<Use>>(
        &self,
        work: Work<U>,
        premise: impl FnOnce() -> bool,
        call: impl FnOnce(Via) -> Result<R>,
    ) -> Option<Result<R>> {
        let Work { name, step, uses, in_capture, calls } = work;
        if in_capture != InCapture::Captured && self.is_thread_bound() {
            return None;
        }
        uncaptured_calls::outside_captures(|| {
            premise().then(|| {
                carry(
                    self.enter_for(calls).and_then(|(_current, via)| self.race_checked(name, step, uses, || call(via))),
                )
            })
        })
        .flatten()
        .map(unpack)
    }

    /// Step 5's lock: the [graph-mutation lock](graph_mutations) for work that goes into a
    /// capture of this crate (another thread may be adding to the same graph through another
    /// stream of the capture); nothing while no capture of this crate is in progress (one
    /// load), nor for work that no capture takes. Called under the hold, so the stream joins or
    /// leaves no capture before the call; a status that cannot be read takes the lock.
    #[inline(always)]
    fn graph_turn_if_capturing(&self, in_capture: InCapture) -> Option<GraphTurn> {
        if in_capture != InCapture::Captured || !live_captures::any() {
            return None;
        }
        self.capturing_graph_turn()
    }

    #[cold]
    #[inline(never)]
    fn capturing_graph_turn(&self) -> Option<GraphTurn> {
        self.may_be_capturing().unwrap_or(true).then(graph_mutations)
    }

    /// Step 1 of the [protocol](self): the crate's refusals, and the device made current where
    /// `calls` needs it (its guard, to hold until the enqueue has returned); and the API the
    /// enqueue then calls.
    ///
    /// # Errors
    /// [`Error::InsideHostFn`], [`Error::WrongThread`], [`Error::CaptureMisuse`] (the legacy
    /// stream while its device captures), the errors of making the device current.
    #[inline(always)]
    pub(crate) fn enter_for(&self, calls: Calls) -> Result<(Option<DeviceGuard>, Via)> {
        Ok(match calls {
            Calls::Runtime => (Some(self.enter_runtime()?), Via::Runtime),
            Calls::Entered => (None, Via::Runtime),
            Calls::Driver => match self.enter()? {
                None => (None, Via::Driver),
                Some(current) => (Some(current), Via::Runtime),
            },
        })
    }

    /// Runs `call` where no capture transition overlaps it (steps 2 and 3 of the
    /// [protocol](self)): as a fast call while no capture may be in progress, else under the
    /// read side of the capture-transition lock, after refusing a capturing stream when
    /// `in_capture` says so. Refused inside a host function before any lock.
    #[inline(always)]
    pub(crate) fn outside_transitions<R>(&self, in_capture: InCapture, call: impl FnOnce() -> Result<R>) -> Result<R> {
        let mut call = Some(call);
        if in_capture == InCapture::Captured || !self.is_thread_bound() {
            if let Some(Some(done)) = uncaptured_calls::outside_captures(|| call.take().map(|call| carry(call()))) {
                return unpack(done);
            }
        }
        match call {
            Some(call) => self.held(in_capture, call),
            // Taken only by a fast call that ran, and returned above.
            None => Err(Error::CaptureMisuse("a fast call did not return its result")),
        }
    }

    #[cold]
    #[inline(never)]
    fn held<R>(&self, in_capture: InCapture, call: impl FnOnce() -> Result<R>) -> Result<R> {
        // Never blocks a host function behind a waiting writer (CUDA's callback thread would
        // hold up the very work the writer's readers wait for).
        refuse_inside_host_fn()?;
        let _transitions = no_capture_transitions();
        if let InCapture::Refused(why) = in_capture {
            if self.may_be_capturing()? {
                return Err(Error::CaptureMisuse(why));
            }
        }
        call()
    }
}
