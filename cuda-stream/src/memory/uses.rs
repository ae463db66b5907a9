//! The order of a buffer's uses across streams, byte range by byte range: a use waits for the
//! earlier uses it conflicts with (a write for every use of its bytes, a read for the writes),
//! whatever their streams, and leaves an event behind it that later uses and the free wait for
//! (a [`Ledger`]). The allocation is a write of every byte on the home stream.
//!
//! The home stream's uses cost nothing while the buffer is used nowhere else: they are kept
//! as one span, unmarked, and the first use elsewhere that conflicts with it records one event
//! on the home stream then. From the first use elsewhere on, home uses are marked like any
//! other, so a later use elsewhere waits for exactly the home uses it conflicts with.

use super::ledger::{Ledger, On, Queue, Shared, SharedEvent, Span, Ticket, UseEvent};
use crate::call::thread::thread_identity;
use crate::call::transitions::no_capture_transitions;
use crate::call::uncaptured_calls::outside_captures;
use crate::ffi::error::{Error, Result};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::graph::held::{CaptureHolds, holds_of};
use crate::stream::StreamRef;
use crate::stream::capture_status::CaptureStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Why a buffer one of whose uses could not be noted refuses every later use.
const UNTRACKED: &str = "a use of this buffer could not be noted: it is never used again (and leaked)";

/// Why a graph does not hold, or launch with, a buffer whose address was handed out.
pub(super) const EXPORTED: &str = "the buffer's address was handed out (as_ptr, as_mut_ptr) for work on its home stream that a graph's launch cannot be ordered with: a graph holds a borrowed buffer whose uses go through use_on, views and typed launches only (or an Arc<DeviceBuffer>)";

/// A buffer's ordering state, with events `E` (the crate's events, shared; the ledger's model check
/// simulates its own).
#[derive(Debug)]
pub(super) struct Uses<E = SharedEvent> {
    /// A use could not be ordered before the free: the drop leaks the memory.
    leak: AtomicBool,
    /// The address was handed out for work on the home stream that the buffer does not see:
    /// every use elsewhere waits for the home stream's work so far.
    exported: AtomicBool,
    /// A stream other than the home stream has used the buffer: home uses are marked from then
    /// on (until then, the free has nothing to wait for). Set under the state's lock.
    shared: AtomicBool,
    state: Mutex<State<E>>,
}

#[derive(Debug)]
struct State<E> {
    /// The bytes the whole buffer covers.
    bytes: usize,
    /// What the home stream's uses not yet marked touched (the allocation first).
    home_unmarked: Option<Span>,
    ledger: Ledger<E>,
    /// The uses between their checks and their notes: enqueued or being enqueued, their marks
    /// not in the ledger yet.
    in_flight: Vec<InFlight>,
    /// The number of the next use in flight.
    next_flight: u64,
}

impl<E> State<E> {
    /// The use in flight, if any, that a use of `span` on `on` cannot pass: one of bytes it
    /// conflicts with, on another stream.
    #[inline(always)]
    fn in_the_way(&self, on: On, span: &Span) -> Option<&InFlight> {
        self.in_flight.iter().find(|flight| flight.span.conflicts(span) && !flight.on.same_stream(&on))
    }
}

/// A use between its checks ([`Uses::before`]) and its notes ([`Uses::after`]). A later use
/// of bytes it conflicts with, on another stream, would find no mark of it to wait for: it
/// waits until the use is noted, or is refused (see [`Uses::clear_of_flights`]).
#[derive(Debug)]
struct InFlight {
    /// Its number among the buffer's uses (its ticket's [`Ticket::flight`]).
    id: u64,
    user: User,
    on: On,
    span: Span,
}

/// Who makes a use, as a use that finds it in flight sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct User {
    /// The thread ([`thread_identity`]).
    thread: u64,
    /// What runs between the use's checks and its notes may wait for anything, another thread
    /// included (a caller's closure, a copy through pageable memory that CUDA makes wait for
    /// the stream): no use waits for it.
    blocks: bool,
}

impl User {
    /// A use of thread `thread` (for the model check).
    #[cfg(test)]
    pub(super) fn of_thread(thread: u64, blocks: bool) -> User {
        User { thread, blocks }
    }

    /// A use made on this thread; `blocks` as [`User::blocks`] says.
    pub(super) fn on_this_thread(blocks: bool) -> User {
        User { thread: thread_identity(), blocks }
    }
}

/// Why a use inside a closure of a conflicting use of this thread is refused.
const IN_FLIGHT_HERE: &str = "a use of a buffer's bytes (a graph's launch that holds it) inside a use of the same bytes on another stream on this thread (its use_on closure): it cannot be ordered after a use whose mark does not exist yet; make it on the closure's stream, or after the closure";

/// Why a use is refused while another thread's conflicting use that may block is in progress.
const IN_FLIGHT_BLOCKING: &str = "another thread's use of the same bytes is in progress on another stream and may wait for the GPU (a use_on closure, a copy through pageable memory): this use (a graph's launch that holds the buffer) would not be ordered after it; make it once that use has returned";

impl<E: Shared> Uses<E> {
    /// The state of a buffer of `bytes` just allocated on its home stream.
    pub(super) fn allocated(bytes: usize) -> Uses<E> {
        let state = State {
            bytes,
            home_unmarked: Some(Span::write(0..bytes)),
            ledger: Ledger::default(),
            in_flight: Vec::new(),
            next_flight: 1,
        };
        let flag = || AtomicBool::new(false);
        Uses { leak: flag(), exported: flag(), shared: flag(), state: Mutex::new(state) }
    }

    /// How many uses the ledger holds (for the model check).
    #[cfg(test)]
    pub(super) fn marks(&self) -> usize {
        self.state().ledger.len()
    }

    /// How many times the ledger collapsed (for the model check).
    #[cfg(test)]
    pub(super) fn collapses(&self) -> usize {
        self.state().ledger.collapses()
    }

    /// Whether the memory must be leaked rather than freed.
    pub(super) fn leaked(&self) -> bool {
        self.leak.load(Ordering::Acquire)
    }

    pub(super) fn mark_leaked(&self) {
        self.leak.store(true, Ordering::Release);
    }

    /// The address was handed out for work on the home stream: from now on, every use
    /// elsewhere waits for the home stream's work up to that use.
    pub(super) fn exported(&self) {
        self.exported.store(true, Ordering::Release);
    }

    fn state(&self) -> MutexGuard<'_, State<E>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before work on `stream` (where `on` says, computed once per use) that touches `span`:
    /// orders it after the earlier uses it conflicts with. Returns where the use stands in the ledger (for [`Uses::after`]).
    pub(super) fn before<Q: Queue<Event = E>>(
        &self,
        home: &Q,
        stream: &Q,
        user: User,
        on: On,
        span: &Span,
    ) -> Result<Ticket> {
        let mut state = self.clear_of_flights(user, on, span)?;
        let ticket = self.order(&mut state, home, stream, on, span)?;
        Ok(Self::take_off(&mut state, ticket, user, on, span))
    }

    /// Notes the use that `ticket` orders as in flight, and gives the ticket its number.
    #[inline(always)]
    fn take_off(state: &mut State<E>, ticket: Ticket, user: User, on: On, span: &Span) -> Ticket {
        let id = state.next_flight;
        state.next_flight += 1;
        state.in_flight.push(InFlight { id, user, on, span: span.clone() });
        ticket.in_flight(id)
    }

    /// The state, once no use of bytes that `span` conflicts with is in flight on another
    /// stream (its mark not yet in the ledger, see [`InFlight`]): such a use of the crate's own
    /// calls (which enqueue and note without waiting for anything) is waited for; one that may
    /// block ([`User::blocks`]), or one of this thread's (this use is inside its closure),
    /// refuses this one.
    /// Uses on one stream are ordered by it, and never wait for each other here.
    ///
    /// Waiting for another use, a use holds its place in the parts it checked before this
    /// one, never in one after: [`ordered_use`] checks a use's parts in one order
    /// ([`checking_order`]), so no two uses wait for each other.
    ///
    /// # Errors
    /// [`Error::Size`] for a buffer a use of which could not be noted; [`Error::GraphMisuse`]
    /// where the use in flight may block or is this thread's.
    #[inline(always)]
    fn clear_of_flights(&self, user: User, on: On, span: &Span) -> Result<MutexGuard<'_, State<E>>> {
        let state = self.state_unless_leaked()?;
        if state.in_the_way(on, span).is_none() {
            return Ok(state);
        }
        drop(state);
        self.wait_for_flights(user, on, span)
    }

    /// [`Uses::clear_of_flights`] where a use in flight was in the way.
    #[cold]
    #[inline(never)]
    fn wait_for_flights(&self, user: User, on: On, span: &Span) -> Result<MutexGuard<'_, State<E>>> {
        let mut waited = 0u32;
        loop {
            let state = self.state_unless_leaked()?;
            match state.in_the_way(on, span) {
                None => return Ok(state),
                Some(flight) if flight.user.thread == user.thread => return Err(Error::GraphMisuse(IN_FLIGHT_HERE)),
                Some(flight) if flight.user.blocks => return Err(Error::GraphMisuse(IN_FLIGHT_BLOCKING)),
                Some(_) => {}
            }
            drop(state);
            // The other use is in CUDA's enqueue call: microseconds.
            waited += 1;
            if waited < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The state, locked, unless a use could not be noted: that use is not in the ledger, and
    /// nothing may come after it. The leak is read under the lock, which a failed note holds
    /// when it marks the leak (or before it lets its entry go), so that no use passes between
    /// the two.
    #[inline(always)]
    fn state_unless_leaked(&self) -> Result<MutexGuard<'_, State<E>>> {
        let state = self.state();
        if self.leaked() {
            return Err(Error::Size(UNTRACKED));
        }
        Ok(state)
    }

    /// Forgets the use in flight that `ticket` orders (its checks done, its notes never to be
    /// made: another buffer of the same use failed its checks, or its stream began a capture).
    pub(super) fn abandon(&self, ticket: Ticket) {
        Self::landed(&mut self.state(), ticket);
    }

    /// Takes the use that `ticket` orders out of those in flight.
    #[inline(always)]
    fn landed(state: &mut State<E>, ticket: Ticket) {
        let flights = &mut state.in_flight;
        if let Some(at) = flights.iter().position(|flight| flight.id == ticket.flight()) {
            flights.swap_remove(at);
        }
    }

    /// [`Uses::before`]'s order, under the state's lock: marks the home stream's unmarked
    /// uses that the use conflicts with, then waits for the marks it conflicts with.
    fn order<Q: Queue<Event = E>>(
        &self,
        state: &mut State<E>,
        home: &Q,
        stream: &Q,
        on: On,
        span: &Span,
    ) -> Result<Ticket> {
        if on.home {
            // A use of a part after a use of every byte (the allocation): the home stream's
            // work so far is marked, so that uses elsewhere of other parts wait for it only.
            let whole = Span::write(0..state.bytes);
            if !self.shared.load(Ordering::Acquire)
                && state.home_unmarked.as_ref() == Some(&whole)
                && span.bytes != whole.bytes
            {
                state.ledger.mark(home, On::stream(home, true), whole)?;
                state.home_unmarked = None;
            }
        } else {
            if self.exported.load(Ordering::Acquire) {
                let whole = Span::write(0..state.bytes);
                state.home_unmarked =
                    Some(state.home_unmarked.as_ref().map_or(whole.clone(), |old| old.merged(&whole)));
            }
            if let Some(unmarked) = state.home_unmarked.take_if(|unmarked| unmarked.conflicts(span)) {
                if let Err(error) = state.ledger.mark(home, On::stream(home, true), unmarked.clone()) {
                    state.home_unmarked = Some(unmarked);
                    return Err(error);
                }
            }
        }
        state.ledger.order_before(stream, on, span)
    }

    /// After work on `stream` that touched `span`: on the home stream of a buffer used nowhere
    /// else, notes it unmarked; otherwise marks it with an event recorded after it: `recorded`'s,
    /// where another buffer of the same use recorded one, else one recorded now (and put in
    /// `recorded` if the use's other buffers take it).
    pub(super) fn after<Q: Queue<Event = E>>(
        &self,
        stream: &Q,
        on: On,
        span: Span,
        ticket: Ticket,
        recorded: &mut UseEvent<E>,
    ) -> Result<()> {
        let mut state = self.state();
        // Whatever the note does: a use that waits for this one finds its mark, or the leak.
        Self::landed(&mut state, ticket);
        if on.home && !self.shared.load(Ordering::Acquire) {
            state.home_unmarked = Some(match state.home_unmarked.take() {
                Some(unmarked) => unmarked.merged(&span),
                None => span,
            });
            return Ok(());
        }
        if !self.shared.load(Ordering::Relaxed) {
            self.shared.store(true, Ordering::Release);
        }
        let noted = state.ledger.note(stream, on, span, ticket, recorded);
        if noted.is_err() {
            self.mark_leaked();
        }
        noted
    }

    /// Makes the buffer ready to be held by graphs whose launches cannot reach its home stream
    /// (a borrowed buffer's memory, which may outlive its owner): the home stream's unmarked
    /// uses are marked on `home`, and its later uses are marked like any other, so that a use
    /// with no home ([`Uses::before_homeless`]) waits for exactly those it conflicts with.
    /// [`Error::GraphMisuse`] for a buffer whose address was handed out: the home stream's
    /// work on it is seen only by a use that can mark the home stream.
    /// `may_mark` is asked before a mark is recorded on `home` (the caller's capture check).
    pub(super) fn prepare_for_graphs<Q: Queue<Event = E>>(
        &self,
        home: &Q,
        may_mark: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if self.leaked() {
            return Err(Error::Size(UNTRACKED));
        }
        let mut state = self.state();
        let state = &mut *state;
        if self.exported.load(Ordering::Acquire) {
            return Err(Error::GraphMisuse(EXPORTED));
        }
        if let Some(unmarked) = state.home_unmarked.take() {
            let marked = may_mark().and_then(|()| state.ledger.mark(home, On::stream(home, true), unmarked.clone()));
            if let Err(error) = marked {
                state.home_unmarked = Some(unmarked);
                return Err(error);
            }
        }
        // Set under the lock: every home use noted from now on is marked.
        self.shared.store(true, Ordering::Release);
        Ok(())
    }

    /// [`Uses::before`] for a use that cannot reach the home stream (a graph's launch of a
    /// borrowed buffer's memory, prepared by [`Uses::prepare_for_graphs`]): it is never on
    /// the home stream, and it is refused where it would have to mark the home stream's work.
    pub(super) fn before_homeless<Q: Queue<Event = E>>(
        &self,
        stream: &Q,
        user: User,
        on: On,
        span: &Span,
    ) -> Result<Ticket> {
        let mut state = self.clear_of_flights(user, on, span)?;
        if self.exported.load(Ordering::Acquire) {
            return Err(Error::GraphMisuse(EXPORTED));
        }
        if state.home_unmarked.as_ref().is_some_and(|unmarked| unmarked.conflicts(span)) {
            return Err(Error::GraphMisuse("a buffer's home uses are unmarked where a graph holds it"));
        }
        let ticket = state.ledger.order_before(stream, on, span)?;
        Ok(Self::take_off(&mut state, ticket, user, on, span))
    }

    /// The home stream waits for every use on other streams (before the free). On failure,
    /// the uses not yet waited for are kept.
    pub(super) fn home_waits_for_others<Q: Queue<Event = E>>(&self, home: &Q) -> Result<()> {
        // Only the home stream's own marks, if no other stream has used the buffer.
        if !self.shared.load(Ordering::Acquire) {
            return Ok(());
        }
        self.state().ledger.home_waits_for_all(home)
    }
}
/// How many buffers one use may touch (a kernel takes at most 12 arguments).
pub(super) const MAX_TOUCHED: usize = 12;

/// How much of [`ordered_use`] holds the capture-transition lock.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum Hold {
    /// From the checks to the last record, the enqueue included (this crate's own CUDA calls,
    /// which return without waiting for the GPU).
    Throughout,
    /// As [`Hold::Throughout`], for an enqueue that CUDA may make wait for the stream (a copy
    /// through pageable host memory): a use that finds it in flight does not wait for it.
    ThroughoutBlocking,
    /// The checks and the waits before, then the checks and the records after, each under
    /// it; not the enqueue (a caller's closure, which may take the lock itself).
    ChecksAndWaits,
}

/// What a use on a stream that a capture of this crate captures does.
#[derive(Copy, Clone)]
pub(super) enum InCaptures<'a> {
    /// Refused, with why ([`CAPTURED`] for the buffers' own calls).
    Refused(&'static str),
    /// Captured, once the function has made the capture's graph hold the buffers' memory
    /// (given the capture's holds; the memory layer's `hold_in_capture`): each launch of the
    /// graph is then ordered with their other uses. The crate's own copies, fills and typed
    /// launches, under [`Hold::Throughout`] only: the capture cannot end between the check and
    /// the enqueue.
    Held(&'a dyn Fn(&CaptureHolds) -> Result<()>),
}

/// One buffer a use touches: its home stream (none for a graph's launch of memory it holds
/// apart from its owner), its ordering state, and the bytes the use reads or writes.
pub(super) struct Touched<'a> {
    pub(super) home: Option<&'a StreamRef>,
    pub(super) uses: &'a Uses,
    pub(super) span: Span,
}

/// What a use touches of one buffer, as [`ordered_use`] reads it: a [`Touched`], or a launch
/// argument's use (`launch_args.rs`), which need not be copied into one.
pub(super) trait Touches {
    fn home(&self) -> Option<&StreamRef>;
    fn uses(&self) -> &Uses;
    fn span(&self) -> &Span;

    /// Where a use on `stream` stands (computed where needed: a copy per buffer would make
    /// every use move a large array).
    #[inline(always)]
    fn on(&self, stream: &StreamRef) -> On {
        On::stream(stream, self.home() == Some(stream))
    }
}

impl Touches for Touched<'_> {
    #[inline(always)]
    fn home(&self) -> Option<&StreamRef> {
        self.home
    }

    #[inline(always)]
    fn uses(&self) -> &Uses {
        self.uses
    }

    #[inline(always)]
    fn span(&self) -> &Span {
        &self.span
    }
}

/// Runs `enqueue` (work on `stream` that uses the buffers `touched`), ordered after each
/// buffer's earlier uses and noted for its later ones and its free, also when `enqueue`
/// panics. No capture of this crate begins or ends meanwhile (as `hold` says): CUDA captures
/// allocations, copies and fills rather than refusing them, and this crate's refusals come
/// first. A use that cannot be noted afterwards marks its buffer leaked. On a stream of a
/// capture of this crate, a use `in_captures` lets through is captured, its buffers held by
/// the capture's graph (`in_captures`' function), and orders nothing now: each launch of the
/// graph is ordered instead.
pub(super) fn ordered_use<R, T: Touches>(
    stream: &StreamRef,
    touched: &[T],
    hold: Hold,
    in_captures: InCaptures<'_>,
    enqueue: impl FnOnce(&mut UseEvent<SharedEvent>) -> Result<R>,
) -> Result<R> {
    // Refused inside a host function before the lock: a host function blocked behind a
    // waiting writer would hold up the work that the writer's readers wait for.
    refuse_inside_host_fn()?;
    if touched.len() > MAX_TOUCHED {
        return Err(Error::Size("one use touches at most 12 buffers and views"));
    }
    // Another library may capture the per-thread stream at any time: never a fast call then.
    let thread_bound =
        stream.is_thread_bound() || touched.iter().any(|buffer| buffer.home().is_some_and(StreamRef::is_thread_bound));
    // A use that may block is one no other use waits for (see `Uses::clear_of_flights`).
    let user = User::on_this_thread(hold != Hold::Throughout);
    // Captured only where the enqueue is held too.
    let held_in_captures = match in_captures {
        InCaptures::Held(hold_in_capture) if hold != Hold::ChecksAndWaits => Some(hold_in_capture),
        _ => None,
    };
    // The tickets of an ordered use, or `None` for a use a capture takes (its graph holding
    // the buffers).
    let checks_and_waits = || -> Result<Option<[Ticket; MAX_TOUCHED]>> {
        if stream.may_be_captured_now() {
            if let Some(hold_in_capture) = held_in_captures {
                if let Some(holds) = holding_capture(stream)? {
                    hold_in_capture(&holds)?;
                    return Ok(None);
                }
            } else {
                stream.refuse_capturing(match in_captures {
                    InCaptures::Refused(why) => why,
                    InCaptures::Held(_) => CAPTURED,
                })?;
            }
        }
        for home in touched.iter().filter_map(Touches::home) {
            refuse_capture(home)?;
        }
        let tickets = before_each(stream, touched, user)?;
        Ok(Some(tickets))
    };
    let uses = |tickets| After { touched, stream, tickets, recorded: UseEvent::default(), thread_bound, done: false };
    match hold {
        Hold::Throughout | Hold::ThroughoutBlocking => {
            without_transitions(thread_bound, || match checks_and_waits()? {
                Some(tickets) => {
                    let mut after = uses(tickets);
                    let result = enqueue(&mut after.recorded);
                    after.finish()?;
                    result
                }
                // Captured under the same hold as the check: the graph holds the buffers, and its
                // launches note the uses.
                None => enqueue(&mut UseEvent::default()),
            })?
        }
        Hold::ChecksAndWaits => {
            let checked = without_transitions(thread_bound, checks_and_waits)??;
            // Never captured here (`held_in_captures`).
            let tickets = checked.ok_or(Error::CaptureMisuse(CAPTURED))?;
            let mut after = uses(tickets);
            let result = enqueue(&mut after.recorded);
            after.finish()?;
            result
        }
    }
}

/// Each buffer's [`Uses::before`] (`before_homeless` for memory a graph holds apart from its
/// owner) for a use on `stream` by `user`: the tickets, in `touched`'s order. The parts are
/// checked in one order for every use ([`checking_order`]), so that a use waiting for another
/// in flight never holds a place the other waits for; on a failure, those already checked are
/// abandoned.
#[inline(always)]
fn before_each<T: Touches>(stream: &StreamRef, touched: &[T], user: User) -> Result<[Ticket; MAX_TOUCHED]> {
    let before = |buffer: &T| match buffer.home() {
        Some(home) => buffer.uses().before(home, stream, user, buffer.on(stream), buffer.span()),
        None => buffer.uses().before_homeless(stream, user, buffer.on(stream), buffer.span()),
    };
    let mut tickets = [Ticket::default(); MAX_TOUCHED];
    if let [buffer] = touched {
        tickets[0] = before(buffer)?;
        return Ok(tickets);
    }
    let mut order = [0usize; MAX_TOUCHED];
    let order = &mut order[..touched.len()];
    order.iter_mut().enumerate().for_each(|(at, index)| *index = at);
    order.sort_unstable_by_key(|&at| checking_order(touched[at].uses(), touched[at].span()));
    let mut boarding = Boarding { touched, tickets, cleared: false };
    for &at in order.iter() {
        boarding.tickets[at] = before(&touched[at])?;
    }
    boarding.cleared = true;
    Ok(boarding.tickets)
}

/// Where a use checks its part `span` of the buffer whose state is `uses`: by the state's
/// address, then by the part's first byte. Every use checks its parts in this one order, and
/// its written parts share no byte with its other parts (a graph's parts of one buffer share
/// none; the borrow rules keep a launch's written view apart from its other views; two read
/// views may overlap, but a part in flight that conflicts with the later one and not the
/// earlier lies after the earlier one's end, and one that conflicts with both is waited for at
/// the earlier). A use that waits at its part `p` waits for another use's part `h` in flight,
/// of the same buffer, whose bytes `p` conflicts with (`p.start < h.end`); that other use
/// checked `h` before the part `p2` it waits at itself, so `p2` is of a buffer after it, or of
/// the same one with `h.end <= p2.start`. The waiting parts' keys rise along any chain of
/// waits, which therefore never closes into a cycle. (By address alone, two graphs holding two
/// parts of one buffer in opposite orders each held one and waited for the other's.)
pub(super) fn checking_order<E>(uses: &Uses<E>, span: &Span) -> (usize, usize) {
    (std::ptr::from_ref(uses) as usize, span.bytes.start)
}

/// The tickets of a use's buffers checked so far: dropped before it is cleared (a later
/// buffer's checks failed, or a defect panicked there), their uses in flight are abandoned, so
/// that no later use waits for them.
struct Boarding<'a, T: Touches> {
    touched: &'a [T],
    tickets: [Ticket; MAX_TOUCHED],
    cleared: bool,
}

impl<T: Touches> Drop for Boarding<'_, T> {
    fn drop(&mut self) {
        if !self.cleared {
            abandon_all(self.touched, &self.tickets);
        }
    }
}

/// Abandons the uses in flight that `tickets` order in the buffers `touched` (a ticket given
/// none, or whose use has landed, changes nothing).
fn abandon_all<T: Touches>(touched: &[T], tickets: &[Ticket; MAX_TOUCHED]) {
    for (buffer, &ticket) in touched.iter().zip(tickets) {
        if ticket.flight() != 0 {
            buffer.uses().abandon(ticket);
        }
    }
}

/// Runs `call` where no capture transition of this crate overlaps it: as a fast call while no
/// capture may be in progress (a capture's begin waits for it) and no stream it acts on is
/// thread-bound, else under the read side of the capture-transition lock.
#[inline(always)]
fn without_transitions<R>(thread_bound: bool, call: impl FnOnce() -> R) -> Result<R> {
    let mut call = Some(call);
    if !thread_bound {
        if let Some(Some(done)) = outside_captures(|| call.take().map(|call| call())) {
            return Ok(done);
        }
    }
    let _transitions = no_capture_transitions();
    match call {
        Some(call) => Ok(call()),
        // Taken only by a fast call that ran, and returned above.
        None => Err(Error::CaptureMisuse("a fast call did not return its result")),
    }
}

/// The notes after a use: at `finish`, or, if that is never reached (a panic), when dropped,
/// with no capture transition overlapping them.
struct After<'a, 'b, T: Touches> {
    touched: &'b [T],
    stream: &'a StreamRef,
    tickets: [Ticket; MAX_TOUCHED],
    /// An event recorded on `stream` after the use (by the use itself, or by the first
    /// buffer's note), which the other buffers' marks share.
    recorded: UseEvent<SharedEvent>,
    thread_bound: bool,
    done: bool,
}

impl<T: Touches> After<'_, '_, T> {
    fn finish(mut self) -> Result<()> {
        self.done = true;
        self.note()
    }

    fn note(&mut self) -> Result<()> {
        let (touched, stream, tickets, recorded) = (self.touched, self.stream, &self.tickets, &mut self.recorded);
        let noted = without_transitions(self.thread_bound, || {
            let mut noted = Ok(());
            for (at, (buffer, &ticket)) in touched.iter().zip(tickets).enumerate() {
                // A buffer that records the use's event hands it on to those after it.
                recorded.wanted = at + 1 < touched.len();
                // A capture of the stream begun meanwhile (during a caller's closure) would take
                // the record: the use is then not noted, and the buffer leaks (and refuses later
                // uses).
                let this = refuse_capture(stream).and_then(|()| {
                    buffer.uses().after(stream, buffer.on(stream), buffer.span().clone(), ticket, recorded)
                });
                if this.is_err() {
                    buffer.uses().mark_leaked();
                    buffer.uses().abandon(ticket);
                    noted = noted.and(this);
                }
            }
            noted
        });
        if noted.is_err() {
            // Not noted at all (no hold could be taken): leaked, and out of flight.
            touched.iter().for_each(|buffer| buffer.uses().mark_leaked());
            abandon_all(touched, tickets);
        }
        noted?
    }
}

impl<T: Touches> Drop for After<'_, '_, T> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.note();
        }
        if std::thread::panicking() {
            // A defect panicked in a buffer's note: the buffers after it are out of flight all
            // the same (one that landed is untouched), or later uses would wait for them.
            abandon_all(self.touched, &self.tickets);
        }
    }
}

/// The holds of the capture of this crate that captures `stream` (under the caller's hold),
/// `None` while it is not captured.
///
/// # Errors
/// [`Error::CaptureMisuse`] for a stream of a capture that holds nothing of its own (another
/// library's, or one into a graph builder's level) or an invalidated one; the errors reading
/// its status.
#[cold]
fn holding_capture(stream: &StreamRef) -> Result<Option<Arc<CaptureHolds>>> {
    match stream.capture_status()? {
        CaptureStatus::None => Ok(None),
        CaptureStatus::Active => match holds_of(stream.capture_info()?.id) {
            Some(holds) => Ok(Some(holds)),
            None => Err(Error::CaptureMisuse(CAPTURED_ELSEWHERE)),
        },
        CaptureStatus::Invalidated => Err(Error::CaptureMisuse(CAPTURED)),
    }
}

/// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) while `stream` may be captured and is: graph replays would
/// outlive the buffer. One load while no capture can be in progress.
pub(super) fn refuse_capture(stream: &StreamRef) -> Result<()> {
    if stream.may_be_captured_now() {
        stream.refuse_capturing(CAPTURED)?;
    }
    Ok(())
}

pub(super) const CAPTURED: &str = "device memory is not allocated, freed, copied to or from host memory, or used through use_on during a capture (a replay would outlive it): a buffer's copies between buffers, fills and typed launches are captured, and a capture's own copy, fill_bytes, copy_from_pinned, copy_to_pinned and use_on take buffers its graph holds";

/// Why a buffer's own call is refused on a stream of a capture that is not this crate's.
const CAPTURED_ELSEWHERE: &str = "a buffer's copies, fills and typed launches are captured only by a capture of this crate begun with begin_capture or begin_capture_into (not another library's, nor one into a graph builder's level): its graph holds the buffers";
