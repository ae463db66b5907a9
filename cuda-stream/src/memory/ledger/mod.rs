//! The uses of a piece of memory that may still be running: for each, the bytes it read or
//! wrote, its stream, and an event recorded after it. A new use waits only for the uses it
//! conflicts with (a write for every earlier use of its bytes, a read for the earlier writes),
//! forgets those it makes redundant, and leaves a mark of its own. Events are recycled, never
//! created per use once a ledger is warm, and one use of several pieces of memory (a kernel
//! with several buffers, a copy between a buffer and pinned memory) records one event, which
//! their ledgers share: an event is recorded again only by the one ledger that holds it.
//!
//! Device buffers ([`super::uses`]) and page-locked memory keep one each, and so do the words
//! of stream memory operations ([`super::mem_ops`]), whose uses signal each other and are never
//! ordered with each other: their ledger ([`Ledger::signalling`]) only keeps the events their
//! block's release waits for. The ledger knows a stream only as a [`Queue`]: the crate's
//! streams and events are one, and `model.rs` checks the ordering with a simulated one over
//! many random schedules, without a GPU.

use crate::call::live_captures;
use crate::call::race;
use crate::device::Device;
use crate::event::Event;
use crate::ffi::driver;
use crate::ffi::error::Result;
use crate::stream::StreamRef;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

#[cfg(test)]
pub(super) mod model;

/// How many marks a ledger keeps before it forgets those whose use has completed.
const PRUNE_AT: usize = 16;
/// How many marks a ledger keeps before it merges each stream's marks into one.
const MERGE_AT: usize = 64;
/// How many marks a ledger keeps at most: then a use waits for all of them and its mark
/// replaces them ([`Ledger::collapse`]).
const LIMIT: usize = 96;
/// How many events that no ledger holds the process keeps to record again ([`KEPT`]): more than
/// a collapsing ledger (uses on streams of uncertain identity) lets go at once, so that it
/// records events again instead of creating one per use.
const KEPT_AT_MOST: usize = 4 * LIMIT;

/// Events that no ledger holds any more, of any device, to record again: one ledger lets go of
/// what another records (a use of several buffers shares one event, and the ledger that records
/// the next one is not always the one that held it last).
static KEPT: Mutex<Vec<SharedEvent>> = Mutex::new(Vec::new());

/// The bytes a use touches, and whether it writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) bytes: Range<usize>,
    pub(super) writes: bool,
}

impl Span {
    pub(super) fn write(bytes: Range<usize>) -> Span {
        Span { bytes, writes: true }
    }

    /// Whether one must wait for the other: they share a byte and one of them writes.
    pub(super) fn conflicts(&self, other: &Span) -> bool {
        (self.writes || other.writes) && self.bytes.start < other.bytes.end && other.bytes.start < self.bytes.end
    }

    /// Whether every use that must wait for `other` must also wait for `self`.
    fn subsumes(&self, other: &Span) -> bool {
        let covers = self.bytes.start <= other.bytes.start && other.bytes.end <= self.bytes.end;
        covers && (self.writes || !other.writes)
    }

    /// The smallest span that conflicts with whatever either does.
    pub(super) fn merged(&self, other: &Span) -> Span {
        Span {
            bytes: self.bytes.start.min(other.bytes.start)..self.bytes.end.max(other.bytes.end),
            writes: self.writes || other.writes,
        }
    }
}

/// Which stream a use was on: its identity (device, handle, thread) and, for a stream this
/// crate created, CUDA's id, which is never reused. Two keys with equal ids are one stream;
/// equal identities without ids may be a stream and a later one that reused its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StreamKey {
    identity: (Device, usize, u64),
    id: Option<u64>,
    /// One of CUDA's default streams, which are never destroyed: its identity is certain.
    builtin: bool,
}

impl StreamKey {
    pub(super) fn of(stream: &StreamRef) -> StreamKey {
        StreamKey { identity: stream.identity(), id: stream.known_id(), builtin: stream.builtin().is_some() }
    }

    /// Whether it can be certainly the same as another key (it has an id, or is a default
    /// stream's).
    fn certain(&self) -> bool {
        self.id.is_some() || self.builtin
    }

    /// Certainly the same stream (so its own earlier use is already ordered before this one).
    fn certainly_same(&self, other: &StreamKey) -> bool {
        (self.id.is_some() && self.id == other.id) || (self.builtin && other.builtin && self.identity == other.identity)
    }
}

/// Where a new use stands: on `stream`, and whether that is the memory's home stream (whose
/// marks are its own there, whatever the key says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct On {
    pub(super) key: StreamKey,
    pub(super) home: bool,
}

impl On {
    pub(super) fn stream(stream: &impl Queue, home: bool) -> On {
        On { key: stream.key(), home }
    }

    /// Whether two uses made at the same moment are on one stream (so that stream orders
    /// them): both home, or one identity (device, handle, thread). Each use holds its stream
    /// while it is in flight, so no handle is destroyed and reused between them, and a stream
    /// without a known id (borrowed from another library) counts too.
    pub(super) fn same_stream(&self, other: &On) -> bool {
        (self.home && other.home) || self.key.identity == other.key.identity
    }

    /// Whether `mark`'s use is ordered before this one by the stream alone.
    fn owns<E>(&self, mark: &Mark<E>) -> bool {
        (self.home && mark.home) || mark.on.certainly_same(&self.key)
    }
}

/// An event as ledgers hold it: one use of several pieces of memory shares the event recorded
/// after it between their ledgers.
pub(super) trait Shared: Sized {
    /// Another handle on the event.
    fn share(&self) -> Self;

    /// Whether the two are handles on one event.
    fn same(&self, other: &Self) -> bool;

    /// Whether this handle is the only one on the event: only then may it be recorded again
    /// (a record would move the point that another ledger's mark waits for).
    fn sole(&mut self) -> bool;

    /// Keeps the event, which no ledger holds any more (the only handle), for any ledger to
    /// record again.
    fn keep(self);

    /// An event of `device` kept to record again, if one is.
    fn kept(device: Device) -> Option<Self>;
}

impl Shared for SharedEvent {
    fn share(&self) -> SharedEvent {
        Arc::clone(self)
    }

    fn same(&self, other: &SharedEvent) -> bool {
        Arc::ptr_eq(self, other)
    }

    /// One handle left (the ledgers make no `Weak`), and every other handle's drop (after its
    /// waits) happens before: the drop's release decrement, read here, with an acquire fence.
    /// Cheaper than `Arc::get_mut`, whose check locks the weak count.
    fn sole(&mut self) -> bool {
        let sole = Arc::strong_count(self) == 1;
        if sole {
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        sole
    }

    /// Into [`KEPT`], or destroyed (outside its lock) once it holds enough.
    fn keep(self) {
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < KEPT_AT_MOST {
            kept.push(self);
            return;
        }
        drop(kept);
        drop(self);
    }

    fn kept(device: Device) -> Option<SharedEvent> {
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        let at = kept.iter().position(|event| event.device() == device)?;
        Some(kept.swap_remove(at))
    }
}

/// A stream as a ledger uses it: its key and device, and records and waits of events of its
/// device.
pub(super) trait Queue {
    /// A mark of a point in a stream's work.
    type Event: Shared;

    fn key(&self) -> StreamKey;

    fn device(&self) -> Device;

    /// A new event of this stream's device.
    fn new_event(&self) -> Result<Self::Event>;

    fn event_device(event: &Self::Event) -> Device;

    /// Records `event` here, after the work enqueued so far.
    fn record(&self, event: &Self::Event) -> Result<()>;

    /// Makes later work here wait for `event`'s last record.
    fn wait(&self, event: &Self::Event) -> Result<()>;

    /// Whether the work before `event`'s last record has completed; asked only while
    /// [`Queue::may_query`].
    fn completed(event: &Self::Event) -> bool;

    /// Whether a query is allowed now (no stream of the process may be capturing: a query
    /// would break a capture of this thread's).
    fn may_query() -> bool;
}

/// The crate's events in a ledger: shared by the ledgers of one use's memory.
pub(super) type SharedEvent = Arc<Event>;

impl Queue for StreamRef {
    type Event = SharedEvent;

    fn key(&self) -> StreamKey {
        StreamKey::of(self)
    }

    fn device(&self) -> Device {
        StreamRef::device(self)
    }

    fn new_event(&self) -> Result<SharedEvent> {
        Event::internal(StreamRef::device(self)).map(Arc::new)
    }

    fn event_device(event: &SharedEvent) -> Device {
        event.device()
    }

    fn record(&self, event: &SharedEvent) -> Result<()> {
        self.record_raw(event.as_raw(), 0)
    }

    fn wait(&self, event: &SharedEvent) -> Result<()> {
        self.wait_raw(event.as_raw(), 0)
    }

    /// A query, told to the race detector when it saw the work complete: what the caller stops
    /// waiting for is done.
    fn completed(event: &SharedEvent) -> bool {
        let snapshot = event.race_snapshot();
        let done = driver::event_query(event.as_raw()) == Ok(true);
        if done {
            race::host_saw(snapshot);
        }
        done
    }

    fn may_query() -> bool {
        !live_captures::may_capture()
    }
}

/// A use that may still be running.
#[derive(Debug)]
struct Mark<E> {
    /// Its place in the ledger's order (see [`Ticket`]).
    seq: u64,
    on: StreamKey,
    /// On the memory's home stream.
    home: bool,
    span: Span,
    /// Recorded after the use (perhaps shared with other ledgers' marks of the same use);
    /// never recorded again while the mark lives.
    event: E,
    /// Streams (by CUDA's id) that have waited for `event`.
    waited: Waited,
}

/// A few stream ids, for waits not to be made twice.
#[derive(Debug, Default)]
struct Waited {
    ids: [u64; 4],
    len: u8,
}

impl Waited {
    fn contains(&self, id: u64) -> bool {
        self.ids[..usize::from(self.len)].contains(&id)
    }

    fn insert(&mut self, id: u64) {
        if usize::from(self.len) < self.ids.len() {
            self.ids[usize::from(self.len)] = id;
            self.len += 1;
        }
    }
}

/// The event recorded after one use of several pieces of memory, which their ledgers share.
#[derive(Debug)]
pub(super) struct UseEvent<E> {
    /// Recorded already by another ledger of the use (or by the use itself).
    pub(super) event: Option<E>,
    /// Whether a ledger that records one puts it here: another ledger of the use comes after.
    pub(super) wanted: bool,
}

impl<E> Default for UseEvent<E> {
    fn default() -> UseEvent<E> {
        UseEvent { event: None, wanted: false }
    }
}

/// The marks a use was ordered after: those with a lower `seq`. A use noted later forgets only
/// marks it was ordered after (others were added meanwhile by uses it does not conflict with).
/// A buffer's use also carries its place among the uses in flight (`uses.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Ticket {
    seq: u64,
    flight: u64,
}

impl Ticket {
    fn at(seq: u64) -> Ticket {
        Ticket { seq, flight: 0 }
    }

    /// The same ticket, for the use in flight numbered `flight`.
    pub(super) fn in_flight(self, flight: u64) -> Ticket {
        Ticket { flight, ..self }
    }

    /// The number of the use in flight it was given ([`Ticket::in_flight`]).
    pub(super) fn flight(self) -> u64 {
        self.flight
    }
}

/// The marks of one piece of memory, with events `E` (the crate's [`Event`]s, shared).
#[derive(Debug)]
pub(super) struct Ledger<E = SharedEvent> {
    /// Oldest first.
    marks: Vec<Mark<E>>,
    next_seq: u64,
    /// How many marks the next pruning waits for.
    prune_at: usize,
    /// Its uses signal each other ([`Ledger::signalling`]): none may wait for another.
    signalling: bool,
    /// How many times it collapsed (for the model check).
    #[cfg(test)]
    collapses: usize,
    /// How many marks its merges went through (for the model check).
    #[cfg(test)]
    merged_marks: usize,
}

impl<E> Default for Ledger<E> {
    fn default() -> Ledger<E> {
        Ledger {
            marks: Vec::new(),
            next_seq: 0,
            prune_at: 0,
            signalling: false,
            #[cfg(test)]
            collapses: 0,
            #[cfg(test)]
            merged_marks: 0,
        }
    }
}

impl<E> Ledger<E> {
    /// The ledger of memory whose uses signal each other (the words of stream memory
    /// operations: a stream waits until another writes a value), which must never make one
    /// wait for another: a wait could wait for the very use that waits for the signal. Its
    /// uses ([`Ledger::note_unordered`]) are ordered with nothing; it keeps only the events
    /// after them, for the memory's release ([`Ledger::into_events`]). It forgets completed
    /// uses and merges each stream's, as a buffer's does, but is never bounded by a collapse
    /// (a wait): uses on streams of uncertain identity while no query is allowed make it grow,
    /// one event per use, and it tidies itself only at each doubling.
    pub(super) fn signalling() -> Ledger<E> {
        Ledger { signalling: true, ..Ledger::default() }
    }
}

impl<E: Shared> Ledger<E> {
    /// How many uses may still be running.
    pub(super) fn len(&self) -> usize {
        self.marks.len()
    }

    /// How many times it collapsed (for the model check).
    #[cfg(test)]
    pub(super) fn collapses(&self) -> usize {
        self.collapses
    }

    /// How many marks its merges went through (for the model check).
    #[cfg(test)]
    pub(super) fn merged_marks(&self) -> usize {
        self.merged_marks
    }

    /// Whether some use that may still be running conflicts with `span`.
    pub(super) fn conflicts_with(&self, span: &Span) -> bool {
        self.marks.iter().any(|mark| span.conflicts(&mark.span))
    }

    /// Makes the stream of `on` wait for the noted uses that `span` conflicts with and that
    /// are not its own, each once per stream of a known id.
    pub(super) fn order_before<Q: Queue<Event = E>>(&mut self, stream: &Q, on: On, span: &Span) -> Result<Ticket> {
        for mark in self.marks.iter_mut().rev() {
            if on.owns(mark) || !span.conflicts(&mark.span) {
                continue;
            }
            if let Some(id) = on.key.id {
                if mark.waited.contains(id) {
                    continue;
                }
                stream.wait(&mark.event)?;
                mark.waited.insert(id);
            } else {
                stream.wait(&mark.event)?;
            }
        }
        Ok(Ticket::at(self.next_seq))
    }

    /// Notes a use of `span` just enqueued on `stream` (ordered by `ticket`): leaves a mark of
    /// its own after it, then forgets the marks it makes redundant: those it was ordered after
    /// (waited for, or its own stream's) that every use waiting for them must now wait for
    /// this one instead. The mark's event is the one in `recorded`, where another ledger of the
    /// same use already recorded one after it on `stream`; otherwise it is recorded now, and
    /// put in `recorded` if the use's other ledgers take it ([`UseEvent::wanted`]). On failure
    /// nothing is forgotten.
    pub(super) fn note<Q: Queue<Event = E>>(
        &mut self,
        stream: &Q,
        on: On,
        span: Span,
        ticket: Ticket,
        recorded: &mut UseEvent<E>,
    ) -> Result<()> {
        let forget = |mark: &Mark<E>, span: &Span| {
            mark.seq < ticket.seq && span.subsumes(&mark.span) && (span.writes || on.owns(mark))
        };
        // A shared event was recorded when the use's first ledger noted it. A use of this
        // memory on the same stream noted here since (another thread's, between this use's
        // notes) may have been enqueued and recorded after that record: as this stream's newest
        // mark, the shared event would stand for that use in a merge, and be waited for in its
        // place. This ledger records its own then.
        let overtaken = recorded.event.as_ref().is_some_and(|shared| {
            self.marks.iter().any(|mark| mark.seq >= ticket.seq && on.owns(mark) && !mark.event.same(shared))
        });
        if overtaken {
            return self.record_mark(stream, on, span, forget, &mut UseEvent::default());
        }
        self.record_mark(stream, on, span, forget, recorded)
    }

    /// Notes a use of `span` just enqueued on `stream`, ordered with no other use (a
    /// signalling ledger's: see [`Ledger::signalling`]): its mark, an event recorded after it
    /// (that stream's earlier mark recorded again, where its identity is certain), stands for
    /// every earlier use of that stream.
    pub(super) fn note_unordered<Q: Queue<Event = E>>(&mut self, stream: &Q, span: Span) -> Result<()> {
        let on = On::stream(stream, false);
        let ticket = Ticket::at(self.next_seq);
        self.note(stream, on, span, ticket, &mut UseEvent::default())
    }

    /// The events after the uses that may still be running, the ledger emptied: what a
    /// release of the memory waits for.
    pub(super) fn into_events(self) -> Vec<E> {
        self.marks.into_iter().map(|mark| mark.event).collect()
    }

    /// Records a mark of `span` on `stream` now, after the work enqueued so far (which
    /// includes that stream's earlier marks: those `span` subsumes are forgotten).
    pub(super) fn mark<Q: Queue<Event = E>>(&mut self, stream: &Q, on: On, span: Span) -> Result<()> {
        let mut recorded = UseEvent::default();
        self.record_mark(stream, on, span, |mark, span| on.owns(mark) && span.subsumes(&mark.span), &mut recorded)
    }

    /// Leaves a mark of `span` on `stream` with `recorded`'s event, or one recorded now (then
    /// shared through `recorded`), then forgets the marks `forget` picks, then keeps the
    /// ledger bounded.
    fn record_mark<Q: Queue<Event = E>>(
        &mut self,
        stream: &Q,
        on: On,
        span: Span,
        forget: impl Fn(&Mark<E>, &Span) -> bool,
        recorded: &mut UseEvent<E>,
    ) -> Result<()> {
        self.tidy::<Q>();
        let seq = self.next_seq;
        // A mark this one makes redundant becomes this one, in place: moved to the end (the
        // newest), its fields replaced. Its event is recorded again where no event was
        // recorded for this use yet and no other ledger holds it (none is created on the way
        // to the steady state); nothing changes if the record fails.
        let device = stream.device();
        let fresh = recorded.event.is_none();
        let redundant = self.marks.iter_mut().position(|mark| {
            forget(mark, &span) && Q::event_device(&mark.event) == device && (!fresh || mark.event.sole())
        });
        match redundant {
            Some(at) => {
                if fresh {
                    stream.record(&self.marks[at].event)?;
                }
                self.marks[at..].rotate_left(1);
                let newest = self.marks.last_mut().expect("the mark made this use's");
                newest.seq = seq;
                newest.on = on.key;
                newest.home = on.home;
                newest.span = span.clone();
                newest.waited = Waited::default();
                if let Some(event) = &recorded.event {
                    let replaced = std::mem::replace(&mut newest.event, event.share());
                    self.recycle(replaced);
                }
            }
            None => {
                let event = match &recorded.event {
                    Some(event) => event.share(),
                    None => {
                        let event = self.event_for(stream)?;
                        if let Err(error) = stream.record(&event) {
                            self.recycle(event);
                            return Err(error);
                        }
                        event
                    }
                };
                let mark =
                    Mark { seq, on: on.key, home: on.home, span: span.clone(), event, waited: Waited::default() };
                self.marks.push(mark);
            }
        }
        self.next_seq += 1;
        // The marks it makes redundant, all older than it.
        self.forget_older_than(self.marks.len() - 1, |mark| forget(mark, &span));
        // A collapse is a wait: never between uses that signal each other.
        if self.marks.len() >= LIMIT && !self.signalling {
            self.collapse(stream, on)?;
        }
        // The use's other ledgers share the newest mark's event (a collapse's, if one came:
        // it too is recorded after the use).
        if fresh && recorded.wanted {
            recorded.event = self.marks.last().map(|mark| mark.event.share());
        }
        Ok(())
    }

    /// Replaces every mark by one on `stream`, recorded after `stream` waited for all of them,
    /// over all their bytes: the bound of a ledger whose marks neither complete nor merge
    /// (streams of unknown identity, a GPU far behind).
    fn collapse<Q: Queue<Event = E>>(&mut self, stream: &Q, on: On) -> Result<()> {
        for mark in &self.marks {
            if !on.owns(mark) {
                stream.wait(&mark.event)?;
            }
        }
        let event = self.event_for(stream)?;
        if let Err(error) = stream.record(&event) {
            self.recycle(event);
            return Err(error);
        }
        let span =
            self.marks.iter().map(|mark| mark.span.clone()).reduce(|a, b| a.merged(&b)).expect("marks to collapse");
        self.clear();
        #[cfg(test)]
        {
            self.collapses += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.marks.push(Mark { seq, on: on.key, home: on.home, span, event, waited: Waited::default() });
        Ok(())
    }

    /// Makes `stream` wait for every mark but the home stream's (before the memory is freed
    /// there). On failure, the marks not yet waited for are kept.
    pub(super) fn home_waits_for_all<Q: Queue<Event = E>>(&mut self, stream: &Q) -> Result<()> {
        while let Some(mark) = self.marks.last() {
            if !mark.home {
                stream.wait(&mark.event)?;
            }
            let mark = self.marks.pop().expect("the last mark");
            self.recycle(mark.event);
        }
        self.prune_at = 0;
        Ok(())
    }

    /// Blocks until the uses that a host access of `span` conflicts with have completed (the
    /// newest first), each through `synchronize`.
    pub(super) fn host_waits(&self, span: &Span, synchronize: impl FnMut(&E) -> Result<()>) -> Result<()> {
        self.marks
            .iter()
            .rev()
            .filter(|mark| span.conflicts(&mark.span))
            .map(|mark| &mark.event)
            .try_for_each(synchronize)
    }

    /// Forgets every mark (their uses have completed).
    pub(super) fn clear(&mut self) {
        for mark in std::mem::take(&mut self.marks) {
            self.recycle(mark.event);
        }
        self.prune_at = 0;
    }

    /// Forgets the marks `forget` picks, keeping their events to record again.
    fn forget_where(&mut self, forget: impl FnMut(&Mark<E>) -> bool) {
        self.forget_older_than(self.marks.len(), forget);
    }

    /// Forgets the marks before the `end`th that `forget` picks, keeping their events to
    /// record again.
    fn forget_older_than(&mut self, mut end: usize, mut forget: impl FnMut(&Mark<E>) -> bool) {
        let mut at = 0;
        while at < end {
            if forget(&self.marks[at]) {
                let mark = self.marks.remove(at);
                self.recycle(mark.event);
                end -= 1;
            } else {
                at += 1;
            }
        }
    }

    /// A kept event of `stream`'s device (see [`Shared::keep`]), or a new one.
    fn event_for<Q: Queue<Event = E>>(&mut self, stream: &Q) -> Result<E> {
        match E::kept(stream.device()) {
            Some(event) => Ok(event),
            None => stream.new_event(),
        }
    }

    /// Keeps `event` to record again, if no other ledger holds it (no mark names it any more:
    /// a record now changes no wait already enqueued, which took the record before it); lets
    /// it go otherwise.
    fn recycle(&mut self, mut event: E) {
        if event.sole() {
            event.keep();
        }
    }

    /// Keeps the ledger short: forgets completed uses where a query is allowed, and merges each
    /// stream's marks into its newest once they pile up.
    fn tidy<Q: Queue<Event = E>>(&mut self) {
        if self.marks.len() < self.prune_at.max(PRUNE_AT) {
            return;
        }
        // Queries only while no stream of the process can be capturing (a query would break a
        // capture of this thread's).
        if Q::may_query() {
            self.forget_where(|mark| Q::completed(&mark.event));
        }
        if self.marks.len() >= MERGE_AT {
            self.merge_per_stream();
        }
        // The next queries once as many marks again have come (not at every mark while the
        // GPU is behind). A signalling ledger, which no collapse bounds, grows geometrically
        // instead: marks that neither complete nor merge (streams of uncertain identity while
        // no query is allowed) cost each note a tidy only at each doubling.
        self.prune_at = if self.signalling {
            (2 * self.marks.len()).max(PRUNE_AT)
        } else {
            (self.marks.len() + PRUNE_AT).min(LIMIT - 1)
        };
    }

    /// Replaces the marks of each stream of a certain identity (and the home stream's) by one:
    /// the newest's event (its record comes after the others' on that stream), over all their
    /// bytes. Marks of streams of uncertain identity stay as they are, set apart from the
    /// search (it costs the certain streams' count per mark, not the ledger's length).
    fn merge_per_stream(&mut self) {
        #[cfg(test)]
        {
            self.merged_marks += self.marks.len();
        }
        let mut merged: Vec<Mark<E>> = Vec::new();
        let mut apart: Vec<Mark<E>> = Vec::new();
        for mark in std::mem::take(&mut self.marks).into_iter().rev() {
            if !mark.home && !mark.on.certain() {
                apart.push(mark);
                continue;
            }
            // The home stream's marks are one stream's, whatever its key says.
            let same = merged.iter_mut().find(|kept| {
                (kept.home && mark.home) || (!kept.home && !mark.home && kept.on.certainly_same(&mark.on))
            });
            match same {
                Some(newer) => {
                    newer.span = newer.span.merged(&mark.span);
                    newer.waited = Waited::default();
                    self.recycle(mark.event);
                }
                None => merged.push(mark),
            }
        }
        merged.append(&mut apart);
        // Oldest first again: a mark's place is its `seq`.
        merged.sort_unstable_by_key(|mark| mark.seq);
        self.marks = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::Span;
    use std::ops::Range;

    impl Span {
        fn read(bytes: Range<usize>) -> Span {
            Span { bytes, writes: false }
        }
    }

    #[test]
    fn reads_conflict_only_with_writes_of_the_same_bytes() {
        let (read, write) = (Span::read(0..8), Span::write(4..12));
        assert!(!read.conflicts(&Span::read(0..8)), "two reads");
        assert!(read.conflicts(&write) && write.conflicts(&read), "a read and a write of bytes 4..8");
        assert!(!write.conflicts(&Span::write(12..16)), "disjoint writes");
        assert!(!Span::write(0..4).conflicts(&write), "adjacent, not overlapping");
    }

    #[test]
    fn a_write_subsumes_what_it_covers_and_a_read_only_reads() {
        let whole = Span::write(0..16);
        assert!(whole.subsumes(&Span::read(4..8)) && whole.subsumes(&Span::write(0..16)));
        assert!(!whole.subsumes(&Span::write(8..20)), "not covered");
        assert!(Span::read(0..16).subsumes(&Span::read(2..4)));
        assert!(!Span::read(0..16).subsumes(&Span::write(2..4)), "a later read need not wait for a read");
        assert_eq!(Span::read(0..4).merged(&Span::write(8..12)), Span::write(0..12));
    }
}
