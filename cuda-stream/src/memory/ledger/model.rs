//! A model check of the order [`Uses`] and its [`Ledger`] give a buffer's uses, without a GPU:
//! random schedules of uses on simulated streams (reads and writes of random byte ranges, one
//! or two spans in one use; streams with and without a known id, of two devices), their
//! enqueues and notes interleaved as the borrow rules allow (uses in flight at once never
//! conflict), the streams' progress, queries allowed or not, raw home-stream work after the
//! address was handed out, records or waits that fail, and graphs that hold the memory apart
//! from its owner (launches that never reach the home stream, the owner gone, the free on a
//! private stream). Then, from vector clocks of the
//! simulated streams, every earlier use that conflicts with a later one, and every use, must be
//! ordered before the later one and before the free. A simulation whose waits do nothing must
//! fail the same check: the model can fail. Two buffers whose ledgers share the event of a use
//! of both are checked the same way, with each use's notes interleaved with other uses' (as two
//! threads' are).

use super::{LIMIT, Ledger, On, Queue, Shared, Span, StreamKey, Ticket, UseEvent};
use crate::device::Device;
use crate::ffi::error::{Error, Result};
use crate::memory::uses::{User, Uses};
use std::cell::RefCell;
use std::rc::Rc;

/// Every simulated use is this thread's, of the crate's own calls (no closure): the schedules
/// keep conflicting uses from being in flight at once, as the borrow rules do.
fn user() -> User {
    User::on_this_thread(false)
}

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

/// A xorshift generator (of a nonzero state; the memory layer's other tests use it too).
pub(in crate::memory) struct Rng(pub(in crate::memory) u64);

impl Rng {
    pub(in crate::memory) fn below(&mut self, n: u64) -> u64 {
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
    /// A graph's launch: never on the home stream, as far as the ledger knows.
    homeless: bool,
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
    /// Graphs hold the memory apart from its owner (`buffer_core.rs`): once prepared
    /// (`Uses::prepare_for_graphs`), launches are uses that never reach the home stream
    /// (`Uses::before_homeless`); the owner may then go (an event after the home stream's work)
    /// and the free is made on a private stream after that event.
    graphs: bool,
    /// A broken free after the owner went: the private stream does not wait for the event
    /// that ends the old home's work.
    free_skips_tail: bool,
}

impl Plan {
    fn steps(steps: usize) -> Plan {
        Plan { steps, uncertain: 1, ..Plan::default() }
    }
}

/// From two to five simulated streams, each without a known id at odds of `uncertain` in 3.
/// Streams 0 and 1, and 2 and 3, share a device and a handle: a handle reused, told apart only
/// by ids (or by nothing). Stream 4, where there is one, is a default stream.
fn random_streams(rng: &mut Rng, uncertain: u64) -> Vec<SimStream> {
    let count = 2 + rng.below(4) as usize;
    (0..count)
        .map(|index| SimStream {
            index,
            handle: if index == 4 { 99 } else { index / 2 },
            device: Device::from_ordinal((index / 2 % 2) as i32),
            id: (index != 4 && rng.below(3) >= uncertain).then_some(100 + index as u64),
            builtin: index == 4,
        })
        .collect()
}

/// `count` streams of device 0, each with a known id.
fn streams_of_one_device(count: usize) -> Vec<SimStream> {
    let device = Device::from_ordinal(0);
    (0..count)
        .map(|index| SimStream { index, handle: index, device, id: Some(100 + index as u64), builtin: false })
        .collect()
}

/// Starts a simulation of `count` streams: `sim`, with no work enqueued and no event kept.
fn start(count: usize, sim: Sim) {
    // Events kept from another schedule name its simulation's events.
    KEPT.with(|kept| kept.borrow_mut().clear());
    SIM.with(|current| {
        let mut current = current.borrow_mut();
        *current = Sim { streams: vec![Vec::new(); count], completed: vec![0; count], ..sim };
    });
}

/// Whether one op of the simulation so far happens before another: by the streams and their
/// waits, or through a query that saw the first's work complete before the second was enqueued.
fn happens_before() -> impl Fn(At, At) -> bool {
    let clocks = clocks();
    let (log, observed) = sim(|sim| (sim.log.clone(), sim.observed.clone()));
    move |a: At, b: At| {
        let enqueued = log.iter().position(|&op| op == b).expect("every op is in the log");
        clocks[b.0][b.1][a.0] > a.1
            || observed.iter().any(|&(seen, when)| when <= enqueued && clocks[seen.0][seen.1][a.0] > a.1)
    }
}

/// The schedule of `seed`; the most marks the ledger held, or the first pair left unordered.
fn schedule(seed: u64, plan: Plan) -> Result<usize, String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut streams = random_streams(&mut rng, plan.uncertain);
    let count = streams.len();
    // The private stream a detached memory is freed on: made after everything else, used by
    // nothing before the free.
    let private = count;
    let device = streams[0].device;
    streams.push(SimStream { index: private, handle: 1000, device, id: Some(1000), builtin: false });
    // Raw home work in a third of the schedules: once the address is handed out, every use
    // elsewhere waits for all the home stream's work, which hides the unmarked home uses.
    let raw_home_work = seed % 3 == 0;
    start(
        count + 1,
        Sim {
            fail_record_at: plan.failing_record,
            fail_wait_at: plan.failing_wait,
            waits_do_nothing: plan.waits_do_nothing,
            shared_counts_as_sole: plan.shared_counts_as_sole,
            ..Sim::default()
        },
    );
    let home = &streams[0];
    let on = |stream: usize, homeless: bool| On { key: streams[stream].key(), home: stream == 0 && !homeless };
    // Graphs hold the memory (prepared); the owner went (the event after its home's work).
    let (mut prepared, mut tail) = (false, None::<SimShared>);
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
        homeless: false,
    }];
    let (mut in_flight, mut leaked, mut most_marks) = (Vec::<usize>::new(), false, 0);
    for step in 1..=plan.steps {
        match rng.below(100) {
            // A use begins: its checks and waits, for one span or two that do not conflict.
            0..30 => {
                let stream = rng.below(count as u64) as usize;
                // A launch of a graph holding the memory, on any stream; once the owner went,
                // only launches (on the old home stream too: it may outlive the buffer).
                let homeless = tail.is_some() || (prepared && rng.below(2) == 0);
                let mut spans = vec![rng.span()];
                let second = rng.span();
                if rng.below(4) == 0 && !second.conflicts(&spans[0]) {
                    spans.push(second);
                }
                // The borrows keep conflicting uses from being in flight at once.
                if in_flight.iter().any(|&k| conflict(&recorded[k].spans, &spans)) {
                    continue;
                }
                let checked: Vec<Result<Ticket>> = spans
                    .iter()
                    .map(|span| match homeless {
                        true => uses.before_homeless(&streams[stream], user(), on(stream, true), span),
                        false => uses.before(home, &streams[stream], user(), on(stream, false), span),
                    })
                    .collect();
                // A failed check abandons the spans checked before it, as `ordered_use` does.
                if checked.iter().any(Result::is_err) {
                    checked.into_iter().flatten().for_each(|ticket| uses.abandon(ticket));
                    continue;
                }
                let tickets: Vec<Ticket> = checked.into_iter().flatten().collect();
                let began =
                    Recorded { stream, spans, tickets, op: None, began: step, noted: None, raw_home: false, homeless };
                recorded.push(began);
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
                    let (stream, on) = (recorded[k].stream, on(recorded[k].stream, recorded[k].homeless));
                    // The spans of one use share the event recorded after it.
                    let mut after_use = UseEvent { event: None, wanted: true };
                    for (span, &ticket) in recorded[k].spans.iter().zip(&recorded[k].tickets) {
                        leaked |= uses.after(&streams[stream], on, span.clone(), ticket, &mut after_use).is_err();
                    }
                    recorded[k].noted = Some(step);
                }
            }
            // The GPU runs.
            70..92 => (0..rng.below(4)).for_each(|_| advance(rng.below(count as u64) as usize)),
            // Captures begin or end: queries allowed or not.
            92..96 => sim(|sim| sim.may_query = !sim.may_query && !plan.no_queries),
            // Graphs come to hold the memory; later, the owner goes.
            96..98 if plan.graphs => {
                if !prepared {
                    prepared = uses.prepare_for_graphs(home, || Ok(())).is_ok();
                } else if tail.is_none() && in_flight.iter().all(|&k| recorded[k].homeless) {
                    // The owner goes (no use of its own in flight: its drop takes `&mut`), while
                    // launches may be.
                    let event = home.new_event().expect("a simulated event");
                    if home.record(&event).is_ok() {
                        tail = Some(event);
                    }
                }
            }
            // Raw work on the home stream through the handed-out address.
            _ => {
                if in_flight.is_empty() && raw_home_work && tail.is_none() {
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
                        homeless: false,
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
        let (stream, on) = (recorded[k].stream, on(recorded[k].stream, recorded[k].homeless));
        let mut after_use = UseEvent { event: None, wanted: true };
        for (span, &ticket) in recorded[k].spans.iter().zip(&recorded[k].tickets) {
            leaked |= uses.after(&streams[stream], on, span.clone(), ticket, &mut after_use).is_err();
        }
        recorded[k].noted = Some(usize::MAX - 1);
    }
    leaked |= uses.leaked();
    COLLAPSES.with(|collapses| collapses.set(collapses.get() + uses.collapses()));
    // Once the owner went, the free is the last holder's: on the private stream, after the
    // event that ends the old home's work, then after every other use.
    let free = match &tail {
        None => (!leaked && uses.home_waits_for_others(home).is_ok()).then(|| push(0, Op::Free)),
        Some(tail) => {
            let freer = &streams[private];
            let waited = plan.free_skips_tail || freer.wait(tail).is_ok();
            (!leaked && waited && uses.home_waits_for_others(freer).is_ok()).then(|| push(private, Op::Free))
        }
    };
    let before = happens_before();
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
    for seed in 1..=if cfg!(miri) { 2 } else { 5000 } {
        let marks = schedule(seed, Plan::steps(200)).unwrap_or_else(|pair| panic!("seed {seed}: {pair}"));
        most_marks = most_marks.max(marks);
    }
    assert!(most_marks < LIMIT, "the ledger stayed bounded: {most_marks} marks at most");
}

/// Graphs hold the memory apart from its owner: launches that never reach the home stream
/// are ordered with every conflicting use, and so are the owner's own uses after them; the
/// owner goes, and the last holder's free on a private stream comes after every use.
#[test]
fn launches_of_graphs_holding_the_memory_and_a_free_after_the_owner_went_are_ordered() {
    let (mut schedules, mut detached) = (0, 0);
    for seed in 1..=if cfg!(miri) { 2 } else { 3000 } {
        let plan = Plan { graphs: true, ..Plan::steps(300) };
        schedule(seed, plan).unwrap_or_else(|pair| panic!("seed {seed}: {pair}"));
        let free_on_private = sim(|sim| sim.streams.last().is_some_and(|ops| matches!(ops.last(), Some(Op::Free))));
        detached += usize::from(free_on_private);
        schedules += 1;
    }
    assert!(detached * 6 >= schedules, "{detached} of {schedules} schedules freed after the owner went");
}

/// The model can fail with graphs too: a free after the owner went that does not wait for
/// the old home's last work is caught.
#[test]
fn a_free_on_the_private_stream_that_skips_the_old_homes_event_is_caught() {
    let plan = Plan { graphs: true, free_skips_tail: true, ..Plan::steps(300) };
    let caught = (1..=1000).filter(|&seed| schedule(seed, plan).is_err()).count();
    // Only where the owner went while its home's last work could still run (a few in a hundred).
    assert!(caught >= 10, "only {caught} of 1000 schedules caught the free before the old home's work");
}

/// The model can fail with graphs too: a launch that skipped its waits (`before_homeless`
/// ordering nothing) is caught.
#[test]
fn graph_launches_whose_waits_do_nothing_are_caught() {
    let plan = Plan { graphs: true, waits_do_nothing: true, ..Plan::steps(300) };
    let caught = (1..=200).filter(|&seed| schedule(seed, plan).is_err()).count();
    assert!(caught >= 190, "only {caught} of 200 schedules caught the missing waits");
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
    start(2, Sim::default());
    let device = Device::from_ordinal(0);
    let (home, reader) = (
        SimStream { index: 0, handle: 0, device, id: Some(1), builtin: false },
        SimStream { index: 1, handle: 1, device, id: None, builtin: false },
    );
    let uses = Uses::<SimShared>::allocated(BYTES);
    let on = On { key: reader.key(), home: false };
    let read = Span { bytes: 0..BYTES, writes: false };
    for _ in 0..1000 {
        let ticket = uses.before(&home, &reader, user(), on, &read).unwrap();
        push(1, Op::Use);
        uses.after(&reader, on, read.clone(), ticket, &mut UseEvent::default()).unwrap();
        assert!(uses.marks() < LIMIT, "{} marks", uses.marks());
    }
    let created = sim(|sim| sim.events.len());
    assert!(created <= LIMIT + 8, "events are recycled: {created} created for 1000 reads");
}

/// A use of bytes that another use in flight (checked, not yet noted) conflicts with, on
/// another stream, is refused where it could never be ordered after it: the use in flight is
/// this thread's (the new one is inside its closure) or may block; on the same stream, or of
/// other bytes, or once the use in flight is noted or abandoned, it goes ahead.
#[test]
fn a_use_in_flight_refuses_the_conflicting_uses_that_cannot_wait_for_it() {
    start(3, Sim::default());
    let streams = streams_of_one_device(3);
    let uses = Uses::<SimShared>::allocated(BYTES);
    let home = &streams[0];
    push(0, Op::Use);
    let on = |stream: usize| On { key: streams[stream].key(), home: stream == 0 };
    let (write, read) = (Span::write(0..4), Span { bytes: 0..BYTES, writes: false });
    let in_the_way = |result: Result<Ticket>| match result {
        Err(Error::GraphMisuse(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    let other_thread = |blocks| User::of_thread(u64::MAX, blocks);
    // This thread's write in flight on stream 1: a read of its bytes on stream 2 is refused;
    // on stream 1, or of other bytes, it goes ahead.
    let writing = uses.before(home, &streams[1], user(), on(1), &write).unwrap();
    assert!(in_the_way(uses.before(home, &streams[2], user(), on(2), &read)).contains("on this thread"));
    let same_stream = uses.before(home, &streams[1], user(), on(1), &read).unwrap();
    uses.after(&streams[1], on(1), read.clone(), same_stream, &mut UseEvent::default()).unwrap();
    let elsewhere = Span { bytes: 4..BYTES, writes: false };
    let other_bytes = uses.before(home, &streams[2], user(), on(2), &elsewhere).unwrap();
    uses.after(&streams[2], on(2), elsewhere, other_bytes, &mut UseEvent::default()).unwrap();
    // Noted: the read on stream 2 is ordered after it, as any later use.
    push(1, Op::Use);
    uses.after(&streams[1], on(1), write.clone(), writing, &mut UseEvent::default()).unwrap();
    let after_it = uses.before(home, &streams[2], user(), on(2), &read).unwrap();
    uses.after(&streams[2], on(2), read.clone(), after_it, &mut UseEvent::default()).unwrap();
    // Another thread's write that may block (a closure, a pageable copy): refused too, until
    // it is abandoned (its checks failed elsewhere).
    let blocking = uses.before(home, &streams[1], other_thread(true), on(1), &write).unwrap();
    assert!(in_the_way(uses.before(home, &streams[2], user(), on(2), &read)).contains("may wait for the GPU"));
    uses.abandon(blocking);
    let freed_way = uses.before(home, &streams[2], user(), on(2), &read).unwrap();
    uses.after(&streams[2], on(2), read.clone(), freed_way, &mut UseEvent::default()).unwrap();
    // A stream of no known id (another library's, borrowed) is one stream with itself while
    // both uses hold it: no refusal there; another such stream is another stream.
    let device = Device::from_ordinal(0);
    let borrowed = |index, handle| SimStream { index, handle, device, id: None, builtin: false };
    let (theirs, again, other) = (borrowed(1, 7), borrowed(1, 7), borrowed(2, 8));
    let on_theirs = On { key: theirs.key(), home: false };
    let writing = uses.before(home, &theirs, user(), on_theirs, &write).unwrap();
    let on_again = On { key: again.key(), home: false };
    let same = uses.before(home, &again, user(), on_again, &read).unwrap();
    uses.after(&again, on_again, read.clone(), same, &mut UseEvent::default()).unwrap();
    let on_other = On { key: other.key(), home: false };
    assert!(in_the_way(uses.before(home, &other, user(), on_other, &read)).contains("on this thread"));
    push(1, Op::Use);
    uses.after(&theirs, on_theirs, write, writing, &mut UseEvent::default()).unwrap();
}

/// `uses` uses of the whole memory, each noted in `ledger` as unordered, on random `streams`
/// advanced at random: where each use was enqueued.
fn unordered_uses(rng: &mut Rng, streams: &[SimStream], ledger: &mut Ledger<SimShared>, uses: usize) -> Vec<At> {
    let whole = Span { bytes: 0..BYTES, writes: false };
    let mut enqueued = Vec::with_capacity(uses);
    for _ in 0..uses {
        let stream = &streams[rng.below(streams.len() as u64) as usize];
        enqueued.push(push(stream.index, Op::Use));
        ledger.note_unordered(stream, whole.clone()).expect("no record fails");
        for _ in 0..rng.below(3) {
            advance(rng.below(streams.len() as u64) as usize);
        }
    }
    enqueued
}

/// A signalling ledger (the words of stream memory operations, whose uses signal each other)
/// never makes a stream wait, whatever its uses' streams: a wait could wait for the very use
/// that waits for the signal. The events it gives up at the end cover every use that may
/// still run: the release of the memory waits for those. A buffer's ledger under the same
/// uses does wait (it collapses): the check can fail.
#[test]
fn a_signalling_ledger_never_waits_and_its_last_events_cover_every_running_use() {
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let uncertain = 1 + rng.below(2);
        let streams = random_streams(&mut rng, uncertain);
        start(streams.len(), Sim { may_query: rng.below(2) == 0, ..Sim::default() });
        let mut ledger = Ledger::signalling();
        let uses = unordered_uses(&mut rng, &streams, &mut ledger, 300);
        assert_eq!(sim(|sim| sim.waits), 0, "seed {seed}: a signalling ledger made a stream wait");
        let events = ledger.into_events();
        let (last_records, completed) = sim(|sim| {
            (events.iter().filter_map(|event| sim.events[event.0.index]).collect::<Vec<At>>(), sim.completed.clone())
        });
        for &(stream, at) in &uses {
            let covered = last_records.iter().any(|&(on, record)| on == stream && record > at);
            assert!(
                completed[stream] > at || covered,
                "seed {seed}: use {at} of stream {stream} may run, no event after it"
            );
        }
    }
    let device = Device::from_ordinal(0);
    let uncertain = [SimStream { index: 0, handle: 0, device, id: None, builtin: false }];
    start(1, Sim::default());
    let mut buffers = Ledger::default();
    unordered_uses(&mut Rng(7), &uncertain, &mut buffers, 2 * LIMIT);
    assert!(sim(|sim| sim.waits) > 0, "a buffer's ledger collapses (waits) past its bound");
}

/// A signalling ledger whose marks neither complete nor merge (a stream of uncertain
/// identity, no query allowed: a borrowed stream once a foreign handle is wrapped) grows, and
/// tidies itself only at each doubling: its merges go through a number of marks linear in its
/// uses, not one pass per use.
#[test]
fn a_signalling_ledger_that_grows_tidies_itself_only_at_each_doubling() {
    let device = Device::from_ordinal(0);
    let uncertain = [SimStream { index: 0, handle: 0, device, id: None, builtin: false }];
    start(1, Sim::default());
    let mut ledger = Ledger::signalling();
    let uses = 5_000;
    unordered_uses(&mut Rng(11), &uncertain, &mut ledger, uses);
    assert_eq!(ledger.len(), uses, "every use is still running, and none merges");
    assert!(ledger.merged_marks() <= 4 * uses, "merges went through {} marks for {uses} uses", ledger.merged_marks());
}

/// One use of the two-buffer schedule: of one buffer, of the other, or of both.
struct TwoBufferUse {
    stream: usize,
    /// Per buffer: the bytes the use touches there, if any.
    spans: [Option<Span>; 2],
    tickets: [Ticket; 2],
    op: Option<At>,
    /// When it began, in schedule steps.
    began: usize,
    /// Per buffer: when the use was noted there.
    noted: [Option<usize>; 2],
    /// The buffers still to note it, in order: the first records the event the others share.
    to_note: Vec<usize>,
    shared: UseEvent<SimShared>,
    /// The use records its own event after its work (as a copy through pageable memory does),
    /// which every buffer shares.
    self_recorded: bool,
}

/// How a two-buffer schedule runs (as [`Plan`] says), whether the notes of one use are made at
/// once (no other use noted between them), and whether most uses only read.
#[derive(Clone, Copy, Default)]
struct TwoBufferPlan {
    steps: usize,
    no_queries: bool,
    /// Out of 3, how many streams have no known id (1 unless told).
    uncertain: u64,
    notes_at_once: bool,
    /// Three uses in four only read: a read forgets no other stream's marks, so the ledgers
    /// reach the merge and the collapse sooner.
    mostly_reads: bool,
    failing_record: Option<usize>,
    failing_wait: Option<usize>,
    /// A broken ledger: shared events recorded again.
    shared_counts_as_sole: bool,
}

impl TwoBufferPlan {
    fn steps(steps: usize) -> TwoBufferPlan {
        TwoBufferPlan { steps, uncertain: 1, ..TwoBufferPlan::default() }
    }
}

/// The schedule of `seed` for two buffers whose ledgers share the event of a use of both: the
/// buffers note such a use one after the other, each under its own lock, so other uses (of
/// either buffer, on any stream, the same one included) are begun, enqueued and noted between
/// its notes, as other threads' are. Returns the most marks a ledger held, or the first pair
/// of one buffer's uses left unordered.
fn two_buffer_schedule(seed: u64, plan: TwoBufferPlan) -> Result<usize, String> {
    /// Each buffer's home stream.
    const HOMES: [usize; 2] = [0, 1];
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut streams = random_streams(&mut rng, plan.uncertain);
    let count = streams.len();
    // The private stream a detached memory is freed on: made after everything else, used by
    // nothing before the free.
    let private = count;
    let device = streams[0].device;
    streams.push(SimStream { index: private, handle: 1000, device, id: Some(1000), builtin: false });
    start(
        count + 1,
        Sim {
            fail_record_at: plan.failing_record,
            fail_wait_at: plan.failing_wait,
            shared_counts_as_sole: plan.shared_counts_as_sole,
            ..Sim::default()
        },
    );
    let on = |stream: usize, buffer: usize| On { key: streams[stream].key(), home: stream == HOMES[buffer] };
    let buffers = [Uses::<SimShared>::allocated(BYTES), Uses::<SimShared>::allocated(BYTES)];
    // The allocations: a write of every byte on each buffer's home stream.
    let mut uses: Vec<TwoBufferUse> = (0..2)
        .map(|buffer| {
            let mut spans = [None, None];
            spans[buffer] = Some(Span::write(0..BYTES));
            let mut noted = [None, None];
            noted[buffer] = Some(0);
            TwoBufferUse {
                stream: HOMES[buffer],
                spans,
                tickets: [Ticket::default(); 2],
                op: Some(push(HOMES[buffer], Op::Use)),
                began: 0,
                noted,
                to_note: Vec::new(),
                shared: UseEvent::default(),
                self_recorded: false,
            }
        })
        .collect();
    let conflict = |a: &[Option<Span>; 2], b: &[Option<Span>; 2]| {
        (0..2).any(|buffer| matches!((&a[buffer], &b[buffer]), (Some(x), Some(y)) if x.conflicts(y)))
    };
    // The next buffer notes `used` (a failed note leaks that buffer).
    let note_next = |used: &mut TwoBufferUse, step: usize| {
        let buffer = used.to_note.remove(0);
        used.shared.wanted = !used.to_note.is_empty();
        let span = used.spans[buffer].clone().expect("the use touches the buffer");
        let (stream, ticket) = (used.stream, used.tickets[buffer]);
        let _ = buffers[buffer].after(&streams[stream], on(stream, buffer), span, ticket, &mut used.shared);
        used.noted[buffer] = Some(step);
        if used.to_note.is_empty() {
            // The use is done with its event.
            used.shared = UseEvent::default();
        }
    };
    let (mut in_flight, mut most_marks) = (Vec::<usize>::new(), 0);
    for step in 1..=plan.steps {
        match rng.below(100) {
            // A use of one buffer or both begins: its checks and waits in each.
            0..30 => {
                let stream = rng.below(count as u64) as usize;
                let which = rng.below(3);
                let mut spans = [None, None];
                if which != 1 {
                    spans[0] = Some(rng.span());
                }
                if which != 0 {
                    spans[1] = Some(rng.span());
                }
                if plan.mostly_reads && rng.below(4) != 0 {
                    spans.iter_mut().flatten().for_each(|span| span.writes = false);
                }
                // The borrows keep conflicting uses from being in flight at once.
                if in_flight.iter().any(|&k| conflict(&uses[k].spans, &spans)) {
                    continue;
                }
                let mut tickets = [Ticket::default(); 2];
                let mut ordered = true;
                for buffer in 0..2 {
                    if let Some(span) = &spans[buffer] {
                        let home = &streams[HOMES[buffer]];
                        match buffers[buffer].before(home, &streams[stream], user(), on(stream, buffer), span) {
                            Ok(ticket) => tickets[buffer] = ticket,
                            Err(_) => ordered = false,
                        }
                    }
                }
                if !ordered {
                    continue;
                }
                let mut to_note: Vec<usize> = (0..2).filter(|&buffer| spans[buffer].is_some()).collect();
                if rng.below(2) == 0 {
                    to_note.reverse();
                }
                let self_recorded = rng.below(5) == 0;
                uses.push(TwoBufferUse {
                    stream,
                    spans,
                    tickets,
                    op: None,
                    began: step,
                    noted: [None, None],
                    to_note,
                    shared: UseEvent::default(),
                    self_recorded,
                });
                in_flight.push(uses.len() - 1);
            }
            // A use in flight is enqueued (and records its own event, if it does).
            30..50 => {
                let waiting: Vec<usize> = in_flight.iter().copied().filter(|&k| uses[k].op.is_none()).collect();
                if !waiting.is_empty() {
                    let k = waiting[rng.below(waiting.len() as u64) as usize];
                    let stream = uses[k].stream;
                    uses[k].op = Some(push(stream, Op::Use));
                    if uses[k].self_recorded {
                        let event = streams[stream].new_event().expect("a simulated event");
                        if streams[stream].record(&event).is_ok() {
                            uses[k].shared.event = Some(event);
                        }
                    }
                }
            }
            // One buffer notes an enqueued use (or every buffer, with the notes made at once).
            50..70 => {
                let enqueued: Vec<usize> =
                    (0..in_flight.len()).filter(|&at| uses[in_flight[at]].op.is_some()).collect();
                if !enqueued.is_empty() {
                    let position = enqueued[rng.below(enqueued.len() as u64) as usize];
                    let k = in_flight[position];
                    note_next(&mut uses[k], step);
                    while plan.notes_at_once && !uses[k].to_note.is_empty() {
                        note_next(&mut uses[k], step);
                    }
                    if uses[k].to_note.is_empty() {
                        in_flight.remove(position);
                    }
                }
            }
            // The GPU runs.
            70..92 => (0..rng.below(4)).for_each(|_| advance(rng.below(count as u64) as usize)),
            // Captures begin or end: queries allowed or not.
            _ => sim(|sim| sim.may_query = !sim.may_query && !plan.no_queries),
        }
        most_marks = most_marks.max(buffers[0].marks()).max(buffers[1].marks());
    }
    for k in std::mem::take(&mut in_flight) {
        if uses[k].op.is_none() {
            uses[k].op = Some(push(uses[k].stream, Op::Use));
        }
        while !uses[k].to_note.is_empty() {
            note_next(&mut uses[k], usize::MAX - 1);
        }
    }
    COLLAPSES.with(|collapses| collapses.set(collapses.get() + buffers[0].collapses() + buffers[1].collapses()));
    let mut frees = [None, None];
    for (buffer, free) in frees.iter_mut().enumerate() {
        let home = &streams[HOMES[buffer]];
        *free = (!buffers[buffer].leaked() && buffers[buffer].home_waits_for_others(home).is_ok())
            .then(|| push(HOMES[buffer], Op::Free));
    }
    let before = happens_before();
    for (buffer, free) in frees.into_iter().enumerate() {
        for (i, a) in uses.iter().enumerate() {
            let Some(a_span) = &a.spans[buffer] else { continue };
            let a_op = a.op.expect("every use was enqueued");
            for (j, b) in uses.iter().enumerate() {
                let Some(b_span) = &b.spans[buffer] else { continue };
                let later = a.noted[buffer].expect("every use was noted") < b.began;
                if i == j || !later || !a_span.conflicts(b_span) {
                    continue;
                }
                if !before(a_op, b.op.expect("every use was enqueued")) {
                    return Err(format!(
                        "buffer {buffer}: use {i} {a_span:?} on stream {} is not ordered before use {j} {b_span:?} on stream {}",
                        a.stream, b.stream
                    ));
                }
            }
            if let Some(free) = free {
                if !before(a_op, free) {
                    return Err(format!(
                        "buffer {buffer}: use {i} {a_span:?} on stream {} is not ordered before its free",
                        a.stream
                    ));
                }
            }
        }
    }
    Ok(most_marks)
}

/// Two buffers whose ledgers share the events of uses of both, each use's notes interleaved
/// with other uses': every conflicting pair of each buffer's uses is ordered, and every use
/// before its buffer's free.
#[test]
fn two_buffers_sharing_events_order_every_conflicting_pair() {
    let mut most_marks = 0;
    for seed in 1..=if cfg!(miri) { 2 } else { 3000 } {
        let marks =
            two_buffer_schedule(seed, TwoBufferPlan::steps(200)).unwrap_or_else(|pair| panic!("seed {seed}: {pair}"));
        most_marks = most_marks.max(marks);
    }
    assert!(most_marks < LIMIT, "the ledgers stayed bounded: {most_marks} marks at most");
}

/// Long schedules of two buffers, mostly reads, with no query ever allowed: the ledgers merge
/// each stream's marks into its newest, whose event may be shared, and the order holds. (While
/// a ledger took a shared event also where a use of the same stream was noted since the
/// ticket, 5 of these 300 schedules left a pair unordered.)
#[test]
fn two_buffers_sharing_events_keep_the_order_through_merges() {
    let plan = TwoBufferPlan { no_queries: true, mostly_reads: true, ..TwoBufferPlan::steps(1500) };
    let merged = (1..=300)
        .filter(|&seed| two_buffer_schedule(seed, plan).unwrap_or_else(|pair| panic!("seed {seed}: {pair}")) >= 64)
        .count();
    assert!(merged >= 150, "only {merged} of 300 schedules reached the merge");
}

/// The same with each use's notes made at once (no other use noted between them). A use's own
/// event, recorded when it is enqueued, may still come before a later use of its stream that
/// was noted first (1 of these 300 schedules left a pair unordered while ledgers took it).
#[test]
fn two_buffers_noting_each_use_at_once_keep_the_order_through_merges() {
    let plan =
        TwoBufferPlan { no_queries: true, mostly_reads: true, notes_at_once: true, ..TwoBufferPlan::steps(1500) };
    let merged = (1..=300)
        .filter(|&seed| two_buffer_schedule(seed, plan).unwrap_or_else(|pair| panic!("seed {seed}: {pair}")) >= 64)
        .count();
    assert!(merged >= 150, "only {merged} of 300 schedules reached the merge");
}

/// Long schedules of two buffers on streams of no known id, mostly reads, with no query ever
/// allowed: marks neither complete nor merge, the ledgers collapse while the other ledger still
/// shares events of theirs, and the order holds through it.
#[test]
fn two_buffers_sharing_events_keep_the_order_through_collapses() {
    let plan = TwoBufferPlan { no_queries: true, uncertain: 3, mostly_reads: true, ..TwoBufferPlan::steps(1500) };
    COLLAPSES.with(|collapses| collapses.set(0));
    for seed in 1..=300 {
        two_buffer_schedule(seed, plan).unwrap_or_else(|pair| panic!("seed {seed}: {pair}"));
    }
    let collapses = COLLAPSES.with(std::cell::Cell::get);
    assert!(collapses >= 100, "the ledgers collapsed {collapses} times");
}

/// A failed record (of a buffer's note, or a use's own) or wait leaves no pair of either
/// buffer's uses unordered: a buffer whose note failed is leaked, and the other goes on.
#[test]
fn two_buffers_sharing_events_keep_the_order_through_a_failed_record_or_wait() {
    for seed in 1..=1500 {
        let at = Some(1 + (seed % 20) as usize);
        let record = TwoBufferPlan { failing_record: at, ..TwoBufferPlan::steps(200) };
        two_buffer_schedule(seed, record).unwrap_or_else(|pair| panic!("seed {seed}, record {at:?} failed: {pair}"));
        let wait = TwoBufferPlan { failing_wait: at, ..TwoBufferPlan::steps(200) };
        two_buffer_schedule(seed, wait).unwrap_or_else(|pair| panic!("seed {seed}, wait {at:?} failed: {pair}"));
    }
}

/// The steady state creates almost no events: 1,000 uses on one stream, each of several
/// ledgers sharing its event (three buffers; page-locked memory read, then a buffer written)
/// or of one ledger three times (three views of one buffer), record events that a ledger let go
/// of, whichever ledger held them.
#[test]
fn uses_sharing_events_record_kept_events_in_the_steady_state() {
    let (read, write) = (|bytes| Span { bytes, writes: false }, Span::write);
    let cases = [
        ("three buffers", vec![(0, read(0..4)), (1, read(4..8)), (2, write(8..12))]),
        ("page-locked memory, then a buffer", vec![(0, read(0..BYTES)), (1, write(0..BYTES))]),
        ("three views of one buffer", vec![(0, read(0..4)), (0, read(4..8)), (0, write(8..12))]),
    ];
    for (name, touched) in cases {
        start(2, Sim::default());
        let streams = streams_of_one_device(2);
        let (home, stream) = (&streams[0], &streams[1]);
        let ledgers = [0, 1, 2].map(|_| Uses::<SimShared>::allocated(BYTES));
        let on = On { key: stream.key(), home: false };
        for _ in 0..1000 {
            let tickets: Vec<Ticket> =
                touched.iter().map(|(k, span)| ledgers[*k].before(home, stream, user(), on, span).unwrap()).collect();
            push(1, Op::Use);
            let mut shared = UseEvent { event: None, wanted: true };
            for (at, ((k, span), &ticket)) in touched.iter().zip(&tickets).enumerate() {
                shared.wanted = at + 1 < touched.len();
                ledgers[*k].after(stream, on, span.clone(), ticket, &mut shared).unwrap();
            }
        }
        let created = sim(|sim| sim.events.len());
        assert!(created <= 8, "{name}: {created} events created for 1000 uses");
    }
}

/// A use U1 of buffers Y and X on stream S records its event E at Y's note; meanwhile another
/// thread's use U2 of X on S is enqueued after E's record and noted in X; then X notes U1. E is
/// recorded before U2, so X records an event of its own for U1: a merge of S's marks keeps the
/// newest, and a later write of X elsewhere and X's free must wait for U2.
#[test]
fn a_shared_event_recorded_before_another_use_of_its_stream_does_not_stand_for_it_in_a_merge() {
    // Enough streams for X's ledger to reach the merge (no query is allowed).
    const STREAMS: usize = 70;
    start(STREAMS, Sim::default());
    let streams = streams_of_one_device(STREAMS);
    let (x, y) = (Uses::<SimShared>::allocated(BYTES), Uses::<SimShared>::allocated(BYTES));
    // X's home is stream 0, Y's stream 1; S is stream 2.
    let (x_home, y_home, s) = (&streams[0], &streams[1], &streams[2]);
    push(0, Op::Use);
    push(1, Op::Use);
    let on = |stream: usize| On { key: streams[stream].key(), home: false };
    let read = |bytes| Span { bytes, writes: false };
    // U1 reads bytes 0..4 of both; Y notes it first.
    let u1_x = x.before(x_home, s, user(), on(2), &read(0..4)).unwrap();
    let u1_y = y.before(y_home, s, user(), on(2), &read(0..4)).unwrap();
    let u1 = push(2, Op::Use);
    let mut u1_event = UseEvent { event: None, wanted: true };
    y.after(s, on(2), read(0..4), u1_y, &mut u1_event).unwrap();
    // U2 reads other bytes of X on S, enqueued and noted between U1's notes.
    let u2_x = x.before(x_home, s, user(), on(2), &read(4..8)).unwrap();
    let u2 = push(2, Op::Use);
    x.after(s, on(2), read(4..8), u2_x, &mut UseEvent::default()).unwrap();
    u1_event.wanted = false;
    x.after(s, on(2), read(0..4), u1_x, &mut u1_event).unwrap();
    drop(u1_event);
    // Reads of X on every other stream, up to the merge.
    for (k, stream) in streams.iter().enumerate().skip(3) {
        let ticket = x.before(x_home, stream, user(), on(k), &read(8..12)).unwrap();
        push(k, Op::Use);
        x.after(stream, on(k), read(8..12), ticket, &mut UseEvent::default()).unwrap();
    }
    // A write of all of X on stream 3, then the free.
    let ticket = x.before(x_home, &streams[3], user(), on(3), &Span::write(0..BYTES)).unwrap();
    let write = push(3, Op::Use);
    x.after(&streams[3], on(3), Span::write(0..BYTES), ticket, &mut UseEvent::default()).unwrap();
    x.home_waits_for_others(x_home).unwrap();
    let free = push(0, Op::Free);
    let before = happens_before();
    for (name, used) in [("U1", u1), ("U2", u2)] {
        assert!(before(used, write), "{name}'s read of X is not ordered before the later write of X elsewhere");
        assert!(before(used, free), "{name}'s read of X is not ordered before X's free");
    }
}

/// The two-buffer model can fail: a ledger that records again an event the other buffer's
/// ledger shares moves the point that ledger's mark waits for, and some pair goes unordered.
#[test]
fn two_buffers_whose_ledgers_record_shared_events_again_are_caught() {
    let plan = TwoBufferPlan { shared_counts_as_sole: true, ..TwoBufferPlan::steps(400) };
    let caught = (1..=300).filter(|&seed| two_buffer_schedule(seed, plan).is_err()).count();
    assert!(caught >= 15, "only {caught} of 300 schedules caught the shared events recorded again");
}

/// An event of the threaded check below: nothing is recorded or waited for, only the order in
/// which two threads' uses are checked counts.
#[derive(Debug)]
struct Token(std::sync::Arc<()>);

impl Shared for Token {
    fn share(&self) -> Token {
        Token(std::sync::Arc::clone(&self.0))
    }

    fn same(&self, other: &Token) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }

    fn sole(&mut self) -> bool {
        std::sync::Arc::get_mut(&mut self.0).is_some()
    }

    fn keep(self) {}

    fn kept(_device: Device) -> Option<Token> {
        None
    }
}

/// A stream of the threaded check, of a known id.
#[derive(Debug)]
struct Quiet(usize);

impl Queue for Quiet {
    type Event = Token;

    fn key(&self) -> StreamKey {
        StreamKey { identity: (Device::from_ordinal(0), self.0, 0), id: Some(self.0 as u64), builtin: false }
    }

    fn device(&self) -> Device {
        Device::from_ordinal(0)
    }

    fn new_event(&self) -> Result<Token> {
        Ok(Token(std::sync::Arc::new(())))
    }

    fn event_device(_event: &Token) -> Device {
        Device::from_ordinal(0)
    }

    fn record(&self, _event: &Token) -> Result<()> {
        Ok(())
    }

    fn wait(&self, _event: &Token) -> Result<()> {
        Ok(())
    }

    fn completed(_event: &Token) -> bool {
        false
    }

    fn may_query() -> bool {
        false
    }
}

/// Two uses on two threads that each write two parts of one buffer, held in opposite orders
/// (two graphs that fill the same two parts, added in opposite orders): each checks its parts
/// in the crate's order (`checking_order`), both check their first part at the same moment and
/// then their second. One of them gets through its checks, and once it is done (abandoned here)
/// the other does too: neither holds a part while waiting for the other's.
#[test]
fn two_uses_of_two_parts_of_one_buffer_held_in_opposite_orders_never_wait_for_each_other() {
    use crate::memory::uses::checking_order;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, mpsc};
    use std::time::{Duration, Instant};
    let uses = Arc::new(Uses::<Token>::allocated(256));
    let (first, second) = (Span::write(0..4), Span::write(100..104));
    let checked_one = Arc::new(AtomicUsize::new(0));
    let (done, finished) = mpsc::channel::<usize>();
    for (thread, held) in [(1, [first.clone(), second.clone()]), (2, [second, first])] {
        let (uses, checked_one, done) = (Arc::clone(&uses), Arc::clone(&checked_one), done.clone());
        std::thread::spawn(move || {
            let mut parts = held.to_vec();
            parts.sort_by_key(|part| checking_order(&uses, part));
            let (home, stream) = (Quiet(0), Quiet(thread));
            let (user, on) = (User::of_thread(thread as u64, false), On::stream(&stream, false));
            // The first part's checks: the other thread's first part may be in the way (then
            // this one waits here, holding nothing, until the other is done).
            let one = uses.before(&home, &stream, user, on, &parts[0]).unwrap();
            // Meet the other thread once it checked its first part too (for 200 ms at most: it
            // may be waiting at it).
            checked_one.fetch_add(1, Ordering::SeqCst);
            let meeting = Instant::now();
            while checked_one.load(Ordering::SeqCst) < 2 && meeting.elapsed() < Duration::from_millis(200) {
                std::thread::yield_now();
            }
            let two = uses.before(&home, &stream, user, on, &parts[1]).unwrap();
            uses.abandon(one);
            uses.abandon(two);
            done.send(thread).unwrap();
        });
    }
    for _ in 0..2 {
        let through = finished.recv_timeout(Duration::from_secs(10));
        assert!(through.is_ok(), "two uses each held a part the other waited for: neither got through its checks");
    }
}

/// Four threads make uses of random parts of two buffers at once, each use's parts checked in
/// the crate's order (`checking_order`): one to three parts, its written parts apart from all
/// its others (as a graph's parts and a launch's views are), its reads free to overlap. Every
/// use gets through its checks (none holds a part while waiting for another that waits for
/// it); then it is done (abandoned here) and the next begins.
#[test]
fn uses_of_random_parts_on_four_threads_always_get_through_their_checks() {
    use crate::memory::uses::checking_order;
    use std::sync::{Arc, mpsc};
    use std::time::Duration;
    const THREADS: usize = 4;
    const USES: usize = 3_000;
    const PART_BYTES: usize = 64;
    let buffers = Arc::new([Uses::<Token>::allocated(PART_BYTES), Uses::<Token>::allocated(PART_BYTES)]);
    let (done, finished) = mpsc::channel::<usize>();
    for thread in 1..=THREADS {
        let (buffers, done) = (Arc::clone(&buffers), done.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ thread as u64);
            let (home, stream) = (Quiet(0), Quiet(thread));
            let (user, on) = (User::of_thread(thread as u64, false), On::stream(&stream, false));
            for _ in 0..USES {
                let mut parts: Vec<(usize, Span)> = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    let start = rng.below(PART_BYTES as u64 - 1) as usize;
                    let end = start + 1 + rng.below((PART_BYTES - start) as u64) as usize;
                    let part = (rng.below(2) as usize, Span { bytes: start..end, writes: rng.below(3) == 0 });
                    let meets = |(buffer, span): &(usize, Span)| {
                        *buffer == part.0 && span.bytes.start < part.1.bytes.end && part.1.bytes.start < span.bytes.end
                    };
                    let apart =
                        parts.iter().filter(|other| meets(other)).all(|other| !other.1.writes && !part.1.writes);
                    if apart {
                        parts.push(part);
                    }
                }
                parts.sort_by_key(|(buffer, span)| checking_order(&buffers[*buffer], span));
                let mut tickets = Vec::new();
                for (buffer, span) in &parts {
                    let ticket = buffers[*buffer].before(&home, &stream, user, on, span).unwrap();
                    tickets.push((*buffer, ticket));
                    std::thread::yield_now();
                }
                for (buffer, ticket) in tickets {
                    buffers[buffer].abandon(ticket);
                }
            }
            done.send(thread).unwrap();
        });
    }
    for _ in 0..THREADS {
        let through = finished.recv_timeout(Duration::from_secs(60));
        assert!(through.is_ok(), "uses waited for each other in a cycle: a thread never got through its checks");
    }
}
