//! The randomized ordering model: random programs over several streams, the happens-before
//! relation CUDA promises for them (computed here on the host), and a check of the order in
//! which the GPU actually ran their tagged kernels.
//!
//! CUDA's rules, as modelled (only what CUDA guarantees, so a violation is a real one):
//! * work on one stream runs in enqueue order;
//! * `wait_event` makes later work wait for the work before the event's last record (a wait on
//!   an event never recorded waits for nothing); `wait_stream` and `fork` are a record and a wait;
//! * a kernel or host function on the **legacy** stream waits for all work enqueued before it
//!   on the device's blocking streams (the per-thread stream is one), and a kernel or host
//!   function on a blocking stream waits for all work enqueued before it on the legacy stream;
//!   non-blocking streams take part in neither;
//! * `synchronize` blocks the host, so everything enqueued after it comes after the stream's
//!   earlier work.

use crate::HeldStream;
use crate::{Rng, TagEntry, TagLog};
use cuda_stream::race::AccessKind;
use cuda_stream::{Access, BuiltinStream, Device, Event, EventFlags, Result, Stream, StreamOptions};
use std::fmt;
use std::time::Duration;

/// What kind of stream a slot of a program holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// Created with default flags: synchronizes with the legacy stream.
    Blocking,
    /// Created with `cudaStreamNonBlocking`.
    NonBlocking,
    /// The legacy default stream (`cudaStreamLegacy`).
    Legacy,
    /// The calling thread's per-thread default stream (a blocking stream).
    PerThread,
}

/// One step of a program. Streams and events are slot indices.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A tag kernel (its tag is the op's index) that spins first.
    Kernel { stream: usize, spin_us: u32 },
    /// Records event `event` on `stream`.
    Record { stream: usize, event: usize },
    /// `stream` waits for event `event`.
    WaitEvent { stream: usize, event: usize },
    /// `stream` waits for the work enqueued on `other` so far.
    WaitStream { stream: usize, other: usize },
    /// Slot `child` becomes `parent.fork()`: a new non-blocking stream after the parent's work.
    Fork { parent: usize, child: usize },
    /// A host function that sleeps.
    HostFn { stream: usize, sleep_us: u32 },
    /// The host synchronizes with `stream`.
    Synchronize { stream: usize },
}

/// A program: its streams, how many events, and its steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The seed it was generated from.
    pub seed: u64,
    /// The kind of each stream slot at the start.
    pub streams: Vec<StreamKind>,
    /// How many event slots.
    pub events: usize,
    /// The steps, in enqueue order.
    pub ops: Vec<Op>,
}

impl Program {
    /// The program of `seed`: 2 to 8 streams (blocking and non-blocking, often with the legacy
    /// and the per-thread stream among them), 1 to 4 events, 10 to 40 steps.
    pub fn generate(seed: u64) -> Program {
        let mut rng = Rng::new(seed);
        let count = 2 + rng.below(7);
        let mut streams: Vec<StreamKind> = (0..count)
            .map(|_| if rng.below(2) == 0 { StreamKind::Blocking } else { StreamKind::NonBlocking })
            .collect();
        if rng.below(2) == 0 {
            streams[0] = StreamKind::Legacy;
        }
        if rng.below(2) == 0 {
            streams[count - 1] = StreamKind::PerThread;
        }
        let events = 1 + rng.below(4);
        let mut ops = Vec::new();
        for _ in 0..10 + rng.below(31) {
            let stream = rng.below(count);
            let op = match rng.below(100) {
                0..=44 => Op::Kernel { stream, spin_us: [0, 5, 20, 50, 100][rng.below(5)] },
                45..=56 => Op::Record { stream, event: rng.below(events) },
                57..=68 => Op::WaitEvent { stream, event: rng.below(events) },
                69..=78 => Op::WaitStream { stream, other: rng.below(count) },
                79..=83 => {
                    let child = rng.below(count);
                    let ordinary = matches!(streams[child], StreamKind::Blocking | StreamKind::NonBlocking);
                    if child != stream && ordinary {
                        Op::Fork { parent: stream, child }
                    } else {
                        Op::Kernel { stream, spin_us: 10 }
                    }
                }
                84..=91 => Op::HostFn { stream, sleep_us: [0, 20, 100][rng.below(3)] },
                _ => Op::Synchronize { stream },
            };
            ops.push(op);
        }
        Program { seed, streams, events, ops }
    }

    /// The same program without step `index` (for shrinking a failure).
    pub fn without(&self, index: usize) -> Program {
        let mut smaller = self.clone();
        smaller.ops.remove(index);
        smaller
    }

    /// For each step, the steps that must have completed before it starts (its ancestors in
    /// CUDA's happens-before relation), as a bitmap over step indices.
    pub fn happens_before(&self) -> Vec<Vec<bool>> {
        let n = self.ops.len();
        let mut kinds = self.streams.clone();
        let mut last: Vec<Option<usize>> = vec![None; kinds.len()];
        // The last kernel or host function per stream: what the legacy rule is about.
        let mut last_work: Vec<Option<usize>> = vec![None; kinds.len()];
        let mut recorded: Vec<Option<usize>> = vec![None; self.events];
        let mut synced: Vec<usize> = Vec::new();
        let mut before: Vec<Vec<bool>> = Vec::with_capacity(n);
        for (index, op) in self.ops.iter().enumerate() {
            let mut deps: Vec<usize> = synced.clone();
            let (stream, is_work) = match *op {
                Op::Kernel { stream, .. } | Op::HostFn { stream, .. } => (Some(stream), true),
                Op::Record { stream, .. } => (Some(stream), false),
                Op::WaitEvent { stream, event } => {
                    deps.extend(recorded[event]);
                    (Some(stream), false)
                }
                Op::WaitStream { stream, other } => {
                    deps.extend(last[other]);
                    (Some(stream), false)
                }
                Op::Fork { parent, child } => {
                    deps.extend(last[parent]);
                    kinds[child] = StreamKind::NonBlocking;
                    last[child] = None;
                    last_work[child] = None;
                    (Some(child), false)
                }
                Op::Synchronize { stream } => {
                    synced.extend(last[stream]);
                    (None, false)
                }
            };
            if let Some(stream) = stream {
                deps.extend(last[stream]);
                if is_work {
                    deps.extend(implicit_legacy_deps(&kinds, &last_work, stream));
                    last_work[stream] = Some(index);
                }
                last[stream] = Some(index);
            }
            if let Op::Record { event, .. } = *op {
                recorded[event] = Some(index);
            }
            let mut ancestors = vec![false; n];
            for dep in deps {
                ancestors[dep] = true;
                for (earlier, is_before) in before[dep].iter().enumerate() {
                    ancestors[earlier] |= *is_before;
                }
            }
            before.push(ancestors);
        }
        before
    }

    /// Checks the GPU's log of a run against [`Program::happens_before`]: every kernel ran once,
    /// and each kernel that must come after another appended its tag later and started after
    /// the other ended.
    ///
    /// # Errors
    /// The first violation, described.
    pub fn check(&self, log: &[TagEntry]) -> Result<(), String> {
        let kernels: Vec<usize> =
            self.ops.iter().enumerate().filter(|(_, op)| matches!(op, Op::Kernel { .. })).map(|(i, _)| i).collect();
        let mut position = vec![None; self.ops.len()];
        for (at, entry) in log.iter().enumerate() {
            let step = entry.tag as usize;
            if step >= self.ops.len() || position[step].is_some() {
                return Err(format!("log entry {at} has an unexpected tag {}", entry.tag));
            }
            position[step] = Some(at);
        }
        if let Some(missing) = kernels.iter().find(|k| position[**k].is_none()) {
            return Err(format!("kernel of step {missing} never ran"));
        }
        let before = self.happens_before();
        for &later in &kernels {
            for &earlier in &kernels {
                if !before[later][earlier] {
                    continue;
                }
                let (a, b) = (position[earlier].unwrap(), position[later].unwrap());
                let (ea, eb) = (&log[a], &log[b]);
                if a > b || ea.end_ns > eb.start_ns {
                    return Err(format!(
                        "step {earlier} must finish before step {later} starts, but the GPU logged \
                         {earlier} at #{a} (ran {}..{} ns) and {later} at #{b} (ran {}..{} ns)",
                        ea.start_ns, ea.end_ns, eb.start_ns, eb.end_ns
                    ));
                }
            }
        }
        Ok(())
    }
}

/// How a kernel step of a program uses memory, for the race detector's cross-check: one of
/// [`BUFFERS`] buffers, read or written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KernelAccess {
    /// Which buffer.
    pub buffer: usize,
    /// Whether it writes it.
    pub writes: bool,
}

/// How many buffers the kernels of a program access.
pub const BUFFERS: usize = 3;

impl Program {
    /// What each step accesses: kernels one buffer each, read or written (drawn from the seed,
    /// apart from the program's steps); other steps nothing.
    pub fn accesses(&self) -> Vec<Option<KernelAccess>> {
        let mut rng = Rng::new(self.seed ^ 0x5eed_acce55);
        self.ops
            .iter()
            .map(|op| {
                let (buffer, writes) = (rng.below(BUFFERS), rng.below(2) == 0);
                matches!(op, Op::Kernel { .. }).then_some(KernelAccess { buffer, writes })
            })
            .collect()
    }

    /// The pairs of steps (earlier, later) whose accesses conflict (one buffer, one of them
    /// writes) and that [`Program::happens_before`] does not order: what CUDA may reorder.
    pub fn unordered_conflicts(&self) -> std::collections::BTreeSet<(usize, usize)> {
        let before = self.happens_before();
        let accesses = self.accesses();
        let mut pairs = std::collections::BTreeSet::new();
        for (later, b) in accesses.iter().enumerate() {
            for (earlier, a) in accesses[..later].iter().enumerate() {
                let conflict = match (a, b) {
                    (Some(a), Some(b)) => a.buffer == b.buffer && (a.writes || b.writes),
                    _ => false,
                };
                if conflict && !before[later][earlier] {
                    pairs.insert((earlier, later));
                }
            }
        }
        pairs
    }

    /// Runs the program on `device` and returns the GPU's log of its kernels.
    ///
    /// # Errors
    /// CUDA's errors (none are expected: every step is valid).
    pub fn run(&self, device: Device) -> Result<Vec<TagEntry>> {
        let log = TagLog::new(self.ops.len() as u32)?;
        self.run_with(device, |stream, index, spin| crate::tag(stream, &log, index as u32, spin))?;
        Ok(log.entries())
    }

    /// Runs the program on `device` with each kernel step replaced by a declaration of its
    /// access to the race detector ([`StreamRef::declare_accesses`](cuda_stream::StreamRef::declare_accesses), named `step N`), at
    /// addresses `base` + 4 KiB per buffer. Nothing touches memory.
    ///
    /// # Errors
    /// CUDA's errors (none are expected: every step is valid).
    pub fn run_declared(&self, device: Device, base: u64) -> Result<()> {
        let accesses = self.accesses();
        self.run_with(device, |stream, index, _| {
            let access = accesses[index].expect("a kernel step");
            let address = base + access.buffer as u64 * 4096;
            let kind = if access.writes { AccessKind::Write } else { AccessKind::Read };
            stream.declare_accesses(&format!("step {index}"), &[Access::bytes(address, 256, kind)])
        })
    }

    fn run_with(
        &self,
        device: Device,
        mut kernel: impl FnMut(&HeldStream, usize, Duration) -> Result<()>,
    ) -> Result<()> {
        let mut streams: Vec<HeldStream> = self
            .streams
            .iter()
            .map(|kind| match kind {
                StreamKind::Blocking => Stream::new(device, StreamOptions::default()).map(HeldStream::Owned),
                StreamKind::NonBlocking => Stream::new(device, StreamOptions::non_blocking()).map(HeldStream::Owned),
                StreamKind::Legacy => Ok(HeldStream::Builtin(BuiltinStream::legacy(device))),
                StreamKind::PerThread => Ok(HeldStream::Builtin(BuiltinStream::per_thread(device))),
            })
            .collect::<Result<_>>()?;
        let events: Vec<Event> =
            (0..self.events).map(|_| Event::new(device, EventFlags::default())).collect::<Result<_>>()?;
        for (index, op) in self.ops.iter().enumerate() {
            match *op {
                Op::Kernel { stream, spin_us } => {
                    kernel(&streams[stream], index, Duration::from_micros(u64::from(spin_us)))?;
                }
                Op::Record { stream, event } => streams[stream].record(&events[event])?,
                Op::WaitEvent { stream, event } => streams[stream].wait_event(&events[event])?,
                Op::WaitStream { stream, other } => streams[stream].wait_stream(&streams[other])?,
                Op::Fork { parent, child } => streams[child] = HeldStream::Owned(streams[parent].fork()?),
                Op::HostFn { stream, sleep_us } => streams[stream]
                    .launch_host_fn(move || std::thread::sleep(Duration::from_micros(u64::from(sleep_us))))?,
                Op::Synchronize { stream } => streams[stream].synchronize()?,
            }
        }
        device.synchronize()
    }

    /// Shrinks a failing program: drops steps one at a time while `fails` still says it fails,
    /// trying at most `budget` candidates.
    pub fn shrink(&self, budget: usize, mut fails: impl FnMut(&Program) -> bool) -> Program {
        let mut smallest = self.clone();
        let mut tries = 0;
        let mut index = 0;
        while index < smallest.ops.len() && tries < budget {
            let candidate = smallest.without(index);
            tries += 1;
            if fails(&candidate) {
                smallest = candidate;
            } else {
                index += 1;
            }
        }
        smallest
    }
}

/// The legacy stream's implicit dependencies of new work on `stream`: the last work of the
/// streams on the other side of the rule.
fn implicit_legacy_deps(kinds: &[StreamKind], last: &[Option<usize>], stream: usize) -> Vec<usize> {
    let blocking = |kind: StreamKind| matches!(kind, StreamKind::Blocking | StreamKind::PerThread);
    match kinds[stream] {
        StreamKind::Legacy => (0..kinds.len()).filter(|s| blocking(kinds[*s])).filter_map(|s| last[s]).collect(),
        kind if blocking(kind) => {
            (0..kinds.len()).filter(|s| kinds[*s] == StreamKind::Legacy).filter_map(|s| last[s]).collect()
        }
        _ => Vec::new(),
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "program of seed {} (CUDA_STREAM_MODEL_SEED={} reproduces it):", self.seed, self.seed)?;
        for (slot, kind) in self.streams.iter().enumerate() {
            writeln!(f, "  s{slot} = {kind:?}")?;
        }
        for (index, op) in self.ops.iter().enumerate() {
            let text = match *op {
                Op::Kernel { stream, spin_us } => format!("s{stream}: kernel tag {index}, spin {spin_us} us"),
                Op::Record { stream, event } => format!("s{stream}: record e{event}"),
                Op::WaitEvent { stream, event } => format!("s{stream}: wait_event e{event}"),
                Op::WaitStream { stream, other } => format!("s{stream}: wait_stream s{other}"),
                Op::Fork { parent, child } => format!("s{child} = s{parent}.fork()"),
                Op::HostFn { stream, sleep_us } => format!("s{stream}: host fn, sleep {sleep_us} us"),
                Op::Synchronize { stream } => format!("host: s{stream}.synchronize()"),
            };
            writeln!(f, "  {index:>3}  {text}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(streams: Vec<StreamKind>, ops: Vec<Op>) -> Program {
        Program { seed: 0, streams, events: 2, ops }
    }

    #[test]
    fn the_legacy_stream_orders_against_blocking_streams_only() {
        use StreamKind::*;
        let k = |stream| Op::Kernel { stream, spin_us: 0 };
        // s0 legacy, s1 blocking, s2 non-blocking, s3 per-thread.
        let p = program(vec![Legacy, Blocking, NonBlocking, PerThread], vec![k(1), k(2), k(3), k(0), k(1), k(2), k(3)]);
        let hb = p.happens_before();
        assert!(hb[3][0] && hb[3][2], "legacy work waits for earlier blocking and per-thread work");
        assert!(!hb[3][1], "legacy work does not wait for non-blocking work");
        assert!(hb[4][3] && hb[6][3], "blocking and per-thread work wait for earlier legacy work");
        assert!(!hb[5][3], "non-blocking work does not wait for legacy work");
    }

    #[test]
    fn events_forks_and_synchronize_order_work() {
        use StreamKind::*;
        let k = |stream| Op::Kernel { stream, spin_us: 0 };
        let p = program(
            vec![NonBlocking, NonBlocking, NonBlocking],
            vec![
                k(0),                                  // 0
                Op::WaitEvent { stream: 1, event: 0 }, // 1: never recorded: waits for nothing
                k(1),                                  // 2
                Op::Record { stream: 0, event: 0 },    // 3
                Op::WaitEvent { stream: 2, event: 0 }, // 4
                k(2),                                  // 5
                Op::Fork { parent: 1, child: 0 },      // 6
                k(0),                                  // 7
                Op::Synchronize { stream: 2 },         // 8
                k(1),                                  // 9
            ],
        );
        let hb = p.happens_before();
        assert!(!hb[2][0], "a wait on an unrecorded event orders nothing");
        assert!(hb[5][0], "wait_event orders after the record");
        assert!(hb[7][2] && !hb[7][0], "the forked slot follows its parent, not its old stream");
        assert!(hb[9][5], "work after a host synchronize follows the synchronized stream");
    }

    #[test]
    fn generation_is_deterministic_and_shrinks() {
        assert_eq!(Program::generate(7), Program::generate(7));
        assert_ne!(Program::generate(7), Program::generate(8));
        let p = Program::generate(7);
        assert_eq!(p.without(0).ops.len(), p.ops.len() - 1);
        assert!(p.to_string().contains("CUDA_STREAM_MODEL_SEED=7"));
    }

    #[test]
    fn check_catches_an_order_violation() {
        use StreamKind::*;
        let p = program(
            vec![NonBlocking],
            vec![Op::Kernel { stream: 0, spin_us: 0 }, Op::Kernel { stream: 0, spin_us: 0 }],
        );
        let entry = |tag, start_ns, end_ns| TagEntry { tag, reserved: 0, start_ns, end_ns };
        assert_eq!(p.check(&[entry(0, 0, 10), entry(1, 10, 20)]), Ok(()));
        assert!(p.check(&[entry(1, 0, 10), entry(0, 10, 20)]).is_err(), "reversed");
        assert!(p.check(&[entry(0, 0, 10), entry(1, 5, 20)]).is_err(), "overlapping");
        assert!(p.check(&[entry(0, 0, 10)]).is_err(), "missing");
    }
}
