//! A model check of the order [`Uses`] and its [`Ledger`] give a buffer's uses, without a GPU:
//! random schedules of uses on simulated streams (reads and writes of random byte ranges, one
//! or two spans in one use; streams with and without a known id, of two devices), their
//! enqueues and notes interleaved as the borrow rules allow (uses in flight at once never
//! conflict), the streams' progress, queries allowed or not, raw home-stream work after the
//! address was handed out, and records or waits that fail. Then, from vector clocks of the
//! simulated streams, every earlier use that conflicts with a later one, and every use, must be
//! ordered before the later one and before the free. A simulation whose waits do nothing must
//! fail the same check: the model can fail.

use super::{LIMIT, On, Queue, Shared, Span, StreamKey, Ticket, UseEvent};
use crate::device::Device;
use crate::ffi::error::{Error, Result};
use crate::memory::uses::Uses;
use std::cell::RefCell;
use std::rc::Rc;

/// The bytes of the simulated buffer.
const BYTES: usize = 12;

/// A point of a simulated stream: (stream, position).
type At = (usize, usize);

#[derive(Debug, Clone)]
enum Op {
    Use,
    Record,
    /// A wait for the event's last record when the wait was made (none: nothing to wait for).
    Wait(Option<At>),
    Free,
}

#[derive(Default)]
struct Sim {
    streams: Vec<Vec<Op>>,
    /// Every op in the order it was enqueued.
    log: Vec<At>,
    /// Each event's last record.
    events: Vec<Option<At>>,
    /// How many ops of each stream have run.
    completed: Vec<usize>,
    may_query: bool,
    /// Queries that saw an event's work complete, and when (the log's length then).
    observed: Vec<(At, usize)>,
    records: usize,
    waits: usize,
    fail_record_at: Option<usize>,
    fail_wait_at: Option<usize>,
    /// A broken simulation: waits are accepted and do nothing.
    waits_do_nothing: bool,
    /// A broken ledger: events that other marks share count as sole (recorded again).
    shared_counts_as_sole: bool,
}

thread_local! {
    static SIM: RefCell<Sim> = RefCell::new(Sim::default());
    /// The simulated events that no ledger holds, kept to record again (the process's pool).
    static KEPT: RefCell<Vec<SimShared>> = const { RefCell::new(Vec::new()) };
    /// How many times the schedules' ledgers collapsed.
    static COLLAPSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn sim<R>(f: impl FnOnce(&mut Sim) -> R) -> R {
    SIM.with(|sim| f(&mut sim.borrow_mut()))
}

fn push(stream: usize, op: Op) -> At {
    sim(|sim| {
        let at = (stream, sim.streams[stream].len());
        sim.streams[stream].push(op);
        sim.log.push(at);
        at
    })
}

#[derive(Debug)]
struct SimStream {
    index: usize,
    /// The handle in its identity: streams without an id may share one (a handle reused).
    handle: usize,
    device: Device,
    id: Option<u64>,
    /// One of CUDA's default streams (its identity is certain).
    builtin: bool,
}

#[derive(Debug)]
struct SimEvent {
    index: usize,
    device: Device,
}

/// A handle on a simulated event, shared as the ledgers share the crate's.
#[derive(Debug)]
struct SimShared(Rc<SimEvent>);

impl Shared for SimShared {
    fn share(&self) -> SimShared {
        SimShared(Rc::clone(&self.0))
    }

    fn same(&self, other: &SimShared) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    fn sole(&mut self) -> bool {
        sim(|sim| sim.shared_counts_as_sole) || Rc::get_mut(&mut self.0).is_some()
    }

    fn keep(self) {
        KEPT.with(|kept| kept.borrow_mut().push(self));
    }

    fn kept(device: Device) -> Option<SimShared> {
        KEPT.with(|kept| {
            let mut kept = kept.borrow_mut();
            let at = kept.iter().position(|event| event.0.device == device)?;
            Some(kept.swap_remove(at))
        })
    }
}
impl Queue for SimStream {
    type Event = SimShared;

    fn key(&self) -> StreamKey {
        StreamKey { identity: (self.device, self.handle, 0), id: self.id, builtin: self.builtin }
    }

    fn device(&self) -> Device {
        self.device
    }

    fn new_event(&self) -> Result<SimShared> {
        let index = sim(|sim| {
            sim.events.push(None);
            sim.events.len() - 1
        });
        Ok(SimShared(Rc::new(SimEvent { index, device: self.device })))
    }

    fn event_device(event: &SimShared) -> Device {
        event.0.device
    }

    fn record(&self, event: &SimShared) -> Result<()> {
        let event = &event.0;
        let fail = sim(|sim| {
            sim.records += 1;
            sim.fail_record_at == Some(sim.records)
        });
        if fail {
            return Err(Error::Size("a simulated record failed"));
        }
        // CUDA refuses a record of another device's event.
        assert_eq!(event.device, self.device, "an event recorded on a stream of another device");
        let at = push(self.index, Op::Record);
        sim(|sim| sim.events[event.index] = Some(at));
        Ok(())
    }

    fn wait(&self, event: &SimShared) -> Result<()> {
        let event = &event.0;
        let (fail, nothing) = sim(|sim| {
            sim.waits += 1;
            (sim.fail_wait_at == Some(sim.waits), sim.waits_do_nothing)
        });
        if fail {
            return Err(Error::Size("a simulated wait failed"));
        }
        if !nothing {
            let last = sim(|sim| sim.events[event.index]);
            push(self.index, Op::Wait(last));
        }
        Ok(())
    }

    fn completed(event: &SimShared) -> bool {
        let event = &event.0;
        sim(|sim| assert!(sim.may_query, "a query while a capture may be in progress"));
        sim(|sim| match sim.events[event.index] {
            None => true,
            Some(at) => {
                let done = sim.completed[at.0] > at.1;
                if done {
                    let when = sim.log.len();
                    sim.observed.push((at, when));
                }
                done
            }
        })
    }

    fn may_query() -> bool {
        sim(|sim| sim.may_query)
    }
}

/// Runs the next op of stream `pick` if it can run (a wait whose record has run).
fn advance(pick: usize) {
    sim(|sim| {
        let stream = pick % sim.streams.len();
        let next = sim.completed[stream];
        let Some(op) = sim.streams[stream].get(next) else { return };
        let ready = match op {
            Op::Wait(Some((waited, at))) => sim.completed[*waited] > *at,
            _ => true,
        };
        if ready {
            sim.completed[stream] += 1;
        }
    });
}

/// The vector clock of every op: `clocks[stream][position][other]` = how many ops of `other`
/// come before it, by the streams' order and their waits.
fn clocks() -> Vec<Vec<Vec<usize>>> {
    sim(|sim| {
        let n = sim.streams.len();
        let mut clocks: Vec<Vec<Vec<usize>>> = sim.streams.iter().map(|ops| vec![Vec::new(); ops.len()]).collect();
        for &(stream, at) in &sim.log {
            let mut clock = if at == 0 { vec![0; n] } else { clocks[stream][at - 1].clone() };
            if let Op::Wait(Some((waited, position))) = sim.streams[stream][at] {
                let before = clocks[waited][position].clone();
                for (mine, theirs) in clock.iter_mut().zip(before) {
                    *mine = (*mine).max(theirs);
                }
            }
            clock[stream] = at + 1;
            clocks[stream][at] = clock;
        }
        clocks
    })
}

/// A xorshift generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn span(&mut self) -> Span {
        let start = self.below(BYTES as u64) as usize;
        let len = 1 + self.below((BYTES - start) as u64) as usize;
        Span { bytes: start..start + len, writes: self.below(2) == 0 }
    }
}

/// One use in the schedule.
struct Recorded {
    stream: usize,
    spans: Vec<Span>,
    tickets: Vec<Ticket>,
    op: Option<At>,
    /// When it began (its `before`) and was noted (its `after`), in schedule steps.
    began: usize,
    noted: Option<usize>,
    /// Work on the home stream through a handed-out address: ordered only after the allocation.
    raw_home: bool,
}

fn conflict(a: &[Span], b: &[Span]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.conflicts(y)))
}

/// How a schedule runs: its length, which record and which wait fail (counted from 1), whether
/// queries are ever allowed, and whether waits do nothing (a broken simulation).
#[derive(Clone, Copy, Default)]
struct Plan {
    steps: usize,
    failing_record: Option<usize>,
    failing_wait: Option<usize>,
    no_queries: bool,
    waits_do_nothing: bool,
    /// A broken ledger: shared events recorded again.
    shared_counts_as_sole: bool,
    /// Out of 3, how many streams have no known id (1 unless told).
    uncertain: u64,
}

impl Plan {
    fn steps(steps: usize) -> Plan {
        Plan { steps, uncertain: 1, ..Plan::default() }
    }
}

/// The schedule of `seed`; the most marks the ledger held, or the first pair left unordered.
fn schedule(seed: u64, plan: Plan) -> Result<usize, String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let count = 2 + rng.below(4) as usize;
    // Streams 0 and 1, and 2 and 3, share a device and a handle: a handle reused, told apart
    // only by ids (or by nothing). Stream 4, where there is one, is a default stream.
    let streams: Vec<SimStream> = (0..count)
        .map(|index| SimStream {
            index,
            handle: if index == 4 { 99 } else { index / 2 },
            device: Device::from_ordinal((index / 2 % 2) as i32),
            id: (index != 4 && rng.below(3) >= plan.uncertain).then_some(100 + index as u64),
            builtin: index == 4,
        })
        .collect();
    // Raw home work in a third of the schedules: once the address is handed out, every use
    // elsewhere waits for all the home stream's work, which hides the unmarked home uses.
    let raw_home_work = seed % 3 == 0;
    // Events kept from another schedule name its simulation's events.
    KEPT.with(|kept| kept.borrow_mut().clear());
    sim(|sim| {
        *sim = Sim {
            fail_record_at: plan.failing_record,
            fail_wait_at: plan.failing_wait,
            waits_do_nothing: plan.waits_do_nothing,
            shared_counts_as_sole: plan.shared_counts_as_sole,
            ..Sim::default()
        };
        sim.streams = vec![Vec::new(); count];
        sim.completed = vec![0; count];
    });
    let home = &streams[0];
    let on = |stream: usize| On { key: streams[stream].key(), home: stream == 0 };
    let uses = Uses::<SimShared>::allocated(BYTES);
    let allocation = push(0, Op::Use);
    let mut recorded = vec![Recorded {
        stream: 0,
        spans: vec![Span::write(0..BYTES)],
        tickets: Vec::new(),
        op: Some(allocation),
        began: 0,
        noted: Some(0),
        raw_home: false,
    }];
    let (mut in_flight, mut leaked, mut most_marks) = (Vec::<usize>::new(), false, 0);
    for step in 1..=plan.steps {
        match rng.below(100) {
            // A use begins: its checks and waits, for one span or two that do not conflict.
            0..30 => {
                let stream = rng.below(count as u64) as usize;
                let mut spans = vec![rng.span()];
                let second = rng.span();
                if rng.below(4) == 0 && !second.conflicts(&spans[0]) {
                    spans.push(second);
                }
                // The borrows keep conflicting uses from being in flight at once.
                if in_flight.iter().any(|&k| conflict(&recorded[k].spans, &spans)) {
                    continue;
                }
                let tickets: Result<Vec<Ticket>> =
                    spans.iter().map(|span| uses.before(home, &streams[stream], on(stream), span)).collect();
                let Ok(tickets) = tickets else { continue };
                recorded.push(Recorded { stream, spans, tickets, op: None, began: step, noted: None, raw_home: false });
                in_flight.push(recorded.len() - 1);
            }
            // A use in flight is enqueued.
            30..50 => {
                // Any of them, not the oldest: two threads' uses are enqueued in either order.
                let waiting: Vec<usize> = in_flight.iter().copied().filter(|&k| recorded[k].op.is_none()).collect();
                if !waiting.is_empty() {
                    let k = waiting[rng.below(waiting.len() as u64) as usize];
                    recorded[k].op = Some(push(recorded[k].stream, Op::Use));
                }
            }
            // An enqueued use is noted.
            50..70 => {
                let enqueued: Vec<usize> =
                    (0..in_flight.len()).filter(|&at| recorded[in_flight[at]].op.is_some()).collect();
                if !enqueued.is_empty() {
                    let position = enqueued[rng.below(enqueued.len() as u64) as usize];
                    let k = in_flight.remove(position);
                    let stream = recorded[k].stream;
                    // The spans of one use share the event recorded after it.
                    let mut after_use = UseEvent { event: None, wanted: true };
                    for (span, &ticket) in recorded[k].spans.iter().zip(&recorded[k].tickets) {
                        leaked |=
                            uses.after(&streams[stream], on(stream), span.clone(), ticket, &mut after_use).is_err();
                    }
                    recorded[k].noted = Some(step);
                }
            }
            // The GPU runs.
            70..92 => (0..rng.below(4)).for_each(|_| advance(rng.below(count as u64) as usize)),
            // Captures begin or end: queries allowed or not.
            92..96 => sim(|sim| sim.may_query = !sim.may_query && !plan.no_queries),
            // Raw work on the home stream through the handed-out address.
            _ => {
                if in_flight.is_empty() && raw_home_work {
                    uses.exported();
                    let op = push(0, Op::Use);
                    let spans = vec![Span::write(0..BYTES)];
                    let raw = Recorded {
                        stream: 0,
                        spans,
                        tickets: Vec::new(),
                        op: Some(op),
                        began: step,
                        noted: Some(step),
                        raw_home: true,
                    };
                    recorded.push(raw);
                }
            }
        }
        most_marks = most_marks.max(uses.marks());
    }
    for k in std::mem::take(&mut in_flight) {
        if recorded[k].op.is_none() {
            recorded[k].op = Some(push(recorded[k].stream, Op::Use));
        }
        let stream = recorded[k].stream;
        let mut after_use = UseEvent { event: None, wanted: true };
        for (span, &ticket) in recorded[k].spans.iter().zip(&recorded[k].tickets) {
            leaked |= uses.after(&streams[stream], on(stream), span.clone(), ticket, &mut after_use).is_err();
        }
        recorded[k].noted = Some(usize::MAX - 1);
    }
    leaked |= uses.leaked();
    COLLAPSES.with(|collapses| collapses.set(collapses.get() + uses.collapses()));
    let free = (!leaked && uses.home_waits_for_others(home).is_ok()).then(|| push(0, Op::Free));
    let clocks = clocks();
    let (log, observed) = sim(|sim| (sim.log.clone(), sim.observed.clone()));
    // `a` happens before `b`: by the streams and their waits, or through a query that saw `a`'s
    // work complete before `b` was enqueued.
    let before = |a: At, b: At| {
        let enqueued = log.iter().position(|&op| op == b).expect("every op is in the log");
        clocks[b.0][b.1][a.0] > a.1
            || observed.iter().any(|&(seen, when)| when <= enqueued && clocks[seen.0][seen.1][a.0] > a.1)
    };
    for (i, a) in recorded.iter().enumerate() {
        let a_op = a.op.expect("every use was enqueued");
        for (j, b) in recorded.iter().enumerate() {
            let later = a.noted.expect("every use was noted") < b.began;
            // Raw home work is ordered only after the home stream's own work.
            if i == j || !later || (b.raw_home && a.stream != 0) || !conflict(&a.spans, &b.spans) {
                continue;
            }
            if !before(a_op, b.op.expect("every use was enqueued")) {
                return Err(format!(
                    "use {i} {:?} on stream {} is not ordered before use {j} {:?} on stream {}",
                    a.spans, a.stream, b.spans, b.stream
                ));
            }
        }
        if let Some(free) = free {
            if !before(a_op, free) {
                return Err(format!("use {i} {:?} on stream {} is not ordered before the free", a.spans, a.stream));
            }
        }
    }
    Ok(most_marks)
}

#[test]
fn every_conflicting_pair_of_uses_is_ordered_in_random_schedules() {
    let mut most_marks = 0;
    for seed in 1..=5000 {
        let marks = schedule(seed, Plan::steps(200)).unwrap_or_else(|pair| panic!("seed {seed}: {pair}"));
        most_marks = most_marks.max(marks);
    }
    assert!(most_marks < LIMIT, "the ledger stayed bounded: {most_marks} marks at most");
}

/// Long schedules with no query ever allowed (a capture always possible): the ledger merges
/// each stream's marks and collapses, and the order holds through both.
#[test]
fn the_order_holds_through_merges_and_collapses() {
    let plan = Plan { no_queries: true, ..Plan::steps(1500) };
    let mut most_marks = 0;
    for seed in 1..=200 {
        most_marks = most_marks.max(schedule(seed, plan).unwrap_or_else(|pair| panic!("seed {seed}: {pair}")));
    }
    assert!(most_marks >= 64, "some schedule reached the merge: {most_marks} marks at most");
}

/// Long schedules on streams of no known id, with no query ever allowed:
/// marks neither complete nor merge, and the ledger collapses; the order holds through it.
#[test]
fn the_order_holds_through_collapses() {
    let plan = Plan { no_queries: true, uncertain: 3, ..Plan::steps(1500) };
    COLLAPSES.with(|collapses| collapses.set(0));
    for seed in 1..=300 {
        schedule(seed, plan).unwrap_or_else(|pair| panic!("seed {seed}: {pair}"));
    }
    let collapses = COLLAPSES.with(std::cell::Cell::get);
    assert!(collapses >= 20, "the ledgers collapsed {collapses} times");
}

#[test]
fn a_failed_record_or_wait_leaves_no_pair_unordered() {
    for seed in 1..=2000 {
        let at = Some(1 + (seed % 20) as usize);
        let record = Plan { failing_record: at, ..Plan::steps(200) };
        schedule(seed, record).unwrap_or_else(|pair| panic!("seed {seed}, record {at:?} failed: {pair}"));
        let wait = Plan { failing_wait: at, ..Plan::steps(200) };
        schedule(seed, wait).unwrap_or_else(|pair| panic!("seed {seed}, wait {at:?} failed: {pair}"));
    }
}

/// The model can fail: with waits that do nothing, conflicting uses on two streams go
/// unordered.
#[test]
fn a_simulation_whose_waits_do_nothing_is_caught() {
    let plan = Plan { waits_do_nothing: true, ..Plan::steps(200) };
    let caught = (1..=200).filter(|&seed| schedule(seed, plan).is_err()).count();
    assert!(caught >= 190, "only {caught} of 200 schedules caught the missing waits");
}

/// The model can fail: a ledger that records again an event another mark shares (two spans of
/// one use) moves the point that mark waits for, and some pair goes unordered.
#[test]
fn a_ledger_that_records_shared_events_again_is_caught() {
    let plan = Plan { shared_counts_as_sole: true, ..Plan::steps(400) };
    let caught = (1..=300).filter(|&seed| schedule(seed, plan).is_err()).count();
    assert!(caught >= 10, "only {caught} of 300 schedules caught the shared events recorded again");
}

/// Reads on a stream of no known id (a borrowed or foreign stream), while queries are not
/// allowed, keep the ledger bounded.
#[test]
fn reads_on_a_stream_of_uncertain_identity_keep_the_ledger_bounded() {
    KEPT.with(|kept| kept.borrow_mut().clear());
    sim(|sim| {
        *sim = Sim::default();
        sim.streams = vec![Vec::new(); 2];
        sim.completed = vec![0; 2];
    });
    let device = Device::from_ordinal(0);
    let (home, reader) = (
        SimStream { index: 0, handle: 0, device, id: Some(1), builtin: false },
        SimStream { index: 1, handle: 1, device, id: None, builtin: false },
    );
    let uses = Uses::<SimShared>::allocated(BYTES);
    let on = On { key: reader.key(), home: false };
    let read = Span { bytes: 0..BYTES, writes: false };
    for _ in 0..1000 {
        let ticket = uses.before(&home, &reader, on, &read).unwrap();
        push(1, Op::Use);
        uses.after(&reader, on, read.clone(), ticket, &mut UseEvent::default()).unwrap();
        assert!(uses.marks() < LIMIT, "{} marks", uses.marks());
    }
    let created = sim(|sim| sim.events.len());
    assert!(created <= LIMIT + 8, "events are recycled: {created} created for 1000 reads");
}
