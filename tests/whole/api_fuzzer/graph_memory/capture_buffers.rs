//! Capture buffers in the family's captures: memory the capture's graph allocates and frees
//! itself (`Capture::alloc`, `Capture::free`), used by the capture's memory calls on either side
//! (`copy` between two capture buffers or with a shared buffer, `fill_bytes`,
//! `copy_from_pinned`, `copy_to_pinned`, `use_on`).
//!
//! * In the program's captures (`GraphCapture` during a capture): capture buffers allocated on
//!   the captured stream or on streams forked from it for them (each fork waits for the
//!   captured stream just before its work and is joined back just after: its work is in
//!   sequence with the captured stream's); filled, copied between each other, with shared
//!   buffers and page-locked memory, used through `use_on` (a tiny kernel or none), also with
//!   refused operands; freed on the captured stream, the stream that allocated them or another
//!   fork; refused once freed, when they are another (ended) capture's, and on a stream outside
//!   the capture, each refusal leaving the capture intact. A fill of a capture buffer with a
//!   byte on a fork, perhaps copied through a second capture buffer, then copied to a shared
//!   buffer or page-locked memory, is what the graph's launches leave there (checked after
//!   each of them as the family checks its fills). The buffers still allocated when the
//!   capture ends are freed just before (on the captured stream), and the forks dropped after.
//! * Captures of their own (`GraphCapture` outside a capture): one or two capture buffers on
//!   random streams of the capture (forked before the allocation), page-locked memory copied
//!   in and overwritten by a fill on another stream, a copy into the second buffer, `use_on`,
//!   copies out to a shared buffer and page-locked memory; refusals: an allocation on a
//!   stream outside and of zero elements, a second capture of the same thread whose buffer
//!   this capture refuses and which refuses this capture's, frees on a stream outside, a
//!   freed buffer; the node count; then one buffer perhaps never freed: kept as the graph's
//!   output (`Capture::keep`), launched by an executable, auto-free or not, read between
//!   launches on random streams without being taken (`GraphOutput::to_vec`), taken and freed
//!   between the launches of a plain one, with the refusals of a take or read before a launch,
//!   a relaunch over an untaken output and a take of an auto-free one; or instantiated with
//!   `auto_free_on_launch` (every launch `Ok`) or without (the relaunch fails with CUDA's
//!   error while the allocation is outstanding; once the program frees it with a raw
//!   `cudaFreeAsync`, the executable launches again). The graph and executable of a capture
//!   whose buffers were all freed join the family; one that leaks is dropped once its
//!   outstanding allocation is freed by raw FFI (so the programs leak no device memory).
//!
//! Also in programs under the race detector: the crate does not tell it of a capture buffer's
//! accesses (only the graph reaches that memory), and it orders one executable's launches as
//! CUDA does; the shared and page-locked sides of their copies are ordered at each launch.

use super::*;
use cuda_stream::{CaptureMode, GraphOutput, InstantiateOptions};

/// At most this many capture buffers (freed ones included) in one capture of the program.
const MAX_BLOCKS: usize = 4;
/// At most this many streams forked from the program's captured stream for them.
const MAX_FORKS: usize = 2;

/// A capture buffer of the program's capture in progress.
struct Block {
    buffer: CaptureBuffer<u32>,
    /// The fork it was allocated on (an index of [`Scratch::forks`]); `None`: the captured
    /// stream.
    on: Option<usize>,
    freed: bool,
}

/// The capture buffers of the program's capture in progress, and the streams forked for them.
#[derive(Default)]
pub(super) struct Scratch {
    blocks: Vec<Block>,
    /// In the capture until it ends; dropped after.
    forks: Vec<Stream>,
}

impl Scratch {
    /// The capture has ended: its forks go; one of its buffers comes back, for later captures
    /// to refuse.
    pub(super) fn ended(&mut self) -> Option<CaptureBuffer<u32>> {
        self.forks.clear();
        self.blocks.pop().map(|block| block.buffer)
    }

    /// A stream for a capture buffer's work: the captured stream (`None`) or a fork, perhaps
    /// made now.
    fn fork(&mut self, device: Device, rng: &mut Rng) -> Option<usize> {
        if coin(rng) {
            return None;
        }
        if self.forks.len() < MAX_FORKS && (self.forks.is_empty() || coin(rng)) {
            let made = Stream::new(device, StreamOptions::non_blocking());
            note("Stream::new (a fork for capture buffers)", &made);
            if let Ok(stream) = made {
                self.forks.push(stream);
            }
        }
        (!self.forks.is_empty()).then(|| rng.below(self.forks.len()))
    }

    fn live(&self) -> Vec<usize> {
        (0..self.blocks.len()).filter(|&index| !self.blocks[index].freed).collect()
    }

    fn freed(&self) -> Vec<usize> {
        (0..self.blocks.len()).filter(|&index| self.blocks[index].freed).collect()
    }
}

/// The program's capture, as its capture buffers' work sees it.
struct At<'a> {
    origin: &'a StreamRef,
    id: u64,
    /// The capture was intact just before (and no completion is pending).
    intact: bool,
    device: Device,
    shared: &'a [Shared],
    pins: &'a [Locked],
}

impl At<'_> {
    /// What work on a stream of the capture must give (`inside`: the stream is in it).
    fn expected(&self, inside: bool) -> Expected {
        if inside && self.intact { Expected::Ok } else { Expected::Typed }
    }

    /// As [`At::expected`], for work that also holds `shared` (a 13th buffer, or memory work
    /// that failed into the capture before, makes it any typed result).
    fn expected_with(&self, holds: &Holds, shared: &Shared, inside: bool) -> Expected {
        let stub = Plan::Fill { buffer: shared.clone(), range: 0..1, byte: 0 };
        match holds.expected(&stub, false) {
            Expected::Ok => self.expected(inside),
            _ => Expected::Typed,
        }
    }

    /// Runs `work` on the captured stream, or on fork `fork`, made to wait for the captured
    /// stream first and joined back after: in sequence with the captured stream's work. `work`
    /// is told whether its stream is in the capture; returns its result, and whether it was in
    /// sequence.
    fn on<R>(&self, fork: Option<&Stream>, work: impl FnOnce(&StreamRef, bool) -> R) -> (R, bool) {
        let Some(fork) = fork else { return (work(self.origin, true), true) };
        let forked = fork.wait_stream(self.origin);
        note("StreamRef::wait_stream (a fork for capture buffers)", &forked);
        if self.intact {
            check_expected("StreamRef::wait_stream (a fork of an intact capture)", Expected::Ok, &forked);
        }
        let result = work(fork, forked.is_ok());
        let joined = self.origin.wait_stream(fork);
        note("StreamRef::wait_stream (a fork for capture buffers joined back)", &joined);
        if self.intact && forked.is_ok() {
            check_expected("StreamRef::wait_stream (a fork joined back)", Expected::Ok, &joined);
        }
        (result, forked.is_ok() && joined.is_ok())
    }

    /// A call refused with `CaptureMisuse`, which leaves the capture intact.
    fn refused<T: std::fmt::Debug>(&self, what: &str, result: &Result<T>) {
        refused(what, result, self.origin, self.id, self.intact);
    }
}

/// Checks that `result` is [`Error::CaptureMisuse`] and, when the capture of `origin` (`id`)
/// was `intact`, that it still is.
fn refused<T: std::fmt::Debug>(what: &str, result: &Result<T>, origin: &StreamRef, id: u64, intact: bool) {
    note(what, result);
    check_expected(what, Expected::CaptureMisuse, result);
    if intact {
        assert!(capture_intact(origin, id), "{what}: a refused call leaves the capture intact");
    }
}

/// Notes `result` and checks it against `expected`; whether it was `Ok`.
fn checked<T: std::fmt::Debug>(what: &str, expected: Expected, result: &Result<T>) -> bool {
    note(what, result);
    check_expected(what, expected, result);
    result.is_ok()
}

/// `n` elements within `range`.
fn within(rng: &mut Rng, range: &Range<usize>, n: usize) -> Range<usize> {
    let start = range.start + rng.below(range.len() - n + 1);
    start..start + n
}

/// Frees what is left of the capture buffers of the program's capture `generation` (on the
/// captured stream `origin`), before its end: `Ok` while the capture is intact. A graph that
/// keeps one unfreed has launches whose results are not known.
pub(crate) fn free_before_end(
    world: &mut World<'_>,
    capture: &mut AnyCapture<'_>,
    origin: &StreamRef,
    generation: u64,
) {
    let quiet = world.quiet();
    let Some(held) = world.graph_mem.capture.as_mut().filter(|held| held.generation == generation) else { return };
    let live = held.scratch.live();
    if live.is_empty() {
        return;
    }
    let intact = quiet && capture_intact(origin, capture.id());
    let mut unfreed = false;
    for index in live {
        let block = &mut held.scratch.blocks[index];
        let result = on_capture!(&mut *capture, |c| c.free(origin, &mut block.buffer));
        let expected = if intact { Expected::Ok } else { Expected::Typed };
        block.freed = checked("Capture::free (before the capture's end)", expected, &result);
        unfreed |= !block.freed;
    }
    if unfreed {
        held.holds.own = OwnMemory::Unfreed;
    }
}

impl World<'_> {
    /// During the program's capture: work on its capture buffers (see the module docs).
    pub(super) fn capture_buffers_in_capture(&mut self, rng: &mut Rng, active: &mut Active<'_>, intact: bool) {
        let (shared, pins) = (self.graph_mem.capturable(), self.graph_mem.pins_now());
        let at = At {
            origin: active.origin,
            id: active.capture.id(),
            intact,
            device: self.device,
            shared: &shared,
            pins: &pins,
        };
        let generation = active.generation;
        let gm = &mut self.graph_mem;
        let mut stale = gm.stale.take();
        let held = CaptureHolds::current(&mut gm.capture, generation);
        let mut scratch = std::mem::take(&mut held.scratch);
        on_capture!(&mut active.capture, |c| in_capture(c, &at, held, &mut scratch, stale.as_mut(), rng));
        held.scratch = scratch;
        gm.stale = stale;
    }

    /// A capture of its own with capture buffers (see the module docs).
    pub(super) fn capture_buffers_of_its_own(&mut self, s: u32, rng: &mut Rng) {
        let Some(home) = capture_home(s) else { return skip() };
        let len = LENGTHS[rng.below(LENGTHS.len())];
        let made = DeviceBuffer::zeroed(home, len);
        note("DeviceBuffer::zeroed (shared)", &made);
        let Ok(out) = made else { return };
        let out = Shared { buffer: Arc::new(out), capturable: true, borrowed: false };
        if self.graph_mem.locked.is_empty() {
            self.graph_mem.new_locked(byte(rng));
        }
        let pins = self.graph_mem.pins_now();
        // The captured stream, its forks, a stream outside, the stream of a second capture.
        let forks = 1 + rng.below(MAX_FORKS);
        let mut streams = Vec::with_capacity(forks + 3);
        for _ in 0..forks + 3 {
            let stream = Stream::new(self.device, StreamOptions::non_blocking());
            note("Stream::new", &stream);
            let Ok(stream) = stream else { return };
            streams.push(stream);
        }
        // Not Global: the reactor's queries of pending completions would invalidate it.
        let kept = if coin(rng) {
            self.own_capture(capture::ThreadLocal, rng, &streams, forks, &out, &pins)
        } else {
            self.own_capture(capture::Relaxed, rng, &streams, forks, &out, &pins)
        };
        if let Some((graph, exec, holds)) = kept {
            if coin(rng) && self.graph_mem.execs.len() < MAX_MEMORY_EXECS {
                self.graph_mem.execs.push(MemoryExec { exec, holds: holds.clone() });
            } else {
                drop(exec);
            }
            self.graph_mem.keep_graph(graph, holds);
        }
        self.keep_shared(out);
    }

    /// The capture of [`World::capture_buffers_of_its_own`], in mode `mode`, of `streams[0]`
    /// with forks `streams[1..=forks]`; its graph, executable and holds when it joins the
    /// family.
    fn own_capture<M: CaptureMode>(
        &mut self,
        mode: M,
        rng: &mut Rng,
        streams: &[Stream],
        forks: usize,
        out: &Shared,
        pins: &[Locked],
    ) -> Option<(Graph, GraphExec, Holds)> {
        let origin: &Stream = &streams[0];
        let (idle, other): (&Stream, &Stream) = (&streams[forks + 1], &streams[forks + 2]);
        let on: Vec<&StreamRef> = streams[..=forks].iter().map(|stream| &**stream).collect();
        let len = out.buffer.len();
        let begun = origin.begin_capture(mode);
        note("StreamRef::begin_capture (capture buffers)", &begun);
        let mut capture = begun.ok()?;
        let id = capture.id();
        let ok = |what: &str, result: &Result<()>| checked(what, Expected::Ok, result);
        // Forked before any allocation: their uses wait for it.
        for fork in &on[1..] {
            ok("StreamRef::wait_stream (a fork of the capture)", &fork.wait_stream(origin));
        }
        refused("Capture::alloc (a stream outside the capture)", &capture.alloc::<u32>(idle, len), origin, id, true);
        checked("Capture::alloc (no element)", Expected::Size, &capture.alloc::<u32>(origin, 0));
        let mut nodes = 0;
        let mut holds = Holds { own: OwnMemory::Freed, ..Holds::default() };
        let a_on = rng.below(on.len());
        let a = capture.alloc::<u32>(on[a_on], len);
        checked("Capture::alloc", Expected::Ok, &a);
        let mut a = a.ok()?;
        nodes += 1;
        let mut b = None;
        if coin(rng) {
            let b_on = rng.below(on.len());
            let made = capture.alloc::<u32>(on[b_on], LENGTHS[rng.below(LENGTHS.len())]);
            checked("Capture::alloc (a second buffer)", Expected::Ok, &made);
            b = Some((made.ok()?, b_on));
            nodes += 1;
        }
        // Each step on a random stream of the capture, after the last one.
        let mut last = a_on;
        let mut next = |rng: &mut Rng| {
            let at = rng.below(on.len());
            if at != last {
                ok("StreamRef::wait_stream (ordering a capture buffer's uses)", &on[at].wait_stream(on[last]));
            }
            last = at;
            on[at]
        };
        // Page-locked memory copied in, overwritten by the fill after it.
        if !pins.is_empty() && coin(rng) {
            let pin = &pins[rng.below(pins.len())];
            let n = 1 + rng.below(len.min(pin.len()));
            let (to, from) = (range_of(rng, len, n), range_of(rng, pin.len(), n));
            let stream = next(rng);
            let copied = capture.copy_from_pinned(stream, (&a, to), (pin, from));
            if ok("Capture::copy_from_pinned (into a capture buffer)", &copied) {
                nodes += 1;
                holds.add_parts(&[], Some(pin));
            }
        }
        let byte = byte(rng);
        let stream = next(rng);
        if ok("Capture::fill_bytes (a capture buffer)", &capture.fill_bytes(stream, &a, .., byte)) {
            nodes += 1;
        }
        // Through the second buffer, perhaps; a refused copy between the two first.
        let mut through_b = None;
        if let Some((second, _)) = &b {
            if rng.below(3) == 0 {
                let (to, from) = copy_ranges(rng, second.len(), len, false, true);
                let refused = capture.copy(origin, (second, to), (&a, from));
                checked("Capture::copy (between capture buffers, refused operands)", Expected::Size, &refused);
            }
            if coin(rng) {
                let n = 1 + rng.below(len.min(second.len()));
                let (to, from) = (range_of(rng, second.len(), n), range_of(rng, len, n));
                let stream = next(rng);
                if ok(
                    "Capture::copy (between capture buffers)",
                    &capture.copy(stream, (second, to.clone()), (&a, from)),
                ) {
                    nodes += 1;
                }
                through_b = Some(to);
            }
        }
        let (src, src_range) = match (&b, through_b) {
            (Some((second, _)), Some(range)) => (second, range),
            _ => (&a, 0..len),
        };
        if coin(rng) {
            let kernel = coin(rng);
            let ran = Cell::new(false);
            let stream = next(rng);
            let used = capture.use_on(stream, src, |on, _| {
                ran.set(true);
                if kernel { cuda_stream_tests::empty(on) } else { Ok(()) }
            });
            note("Capture::use_on (a capture buffer)", &used);
            assert!(
                matches!(used, Ok(Ok(()))),
                "Capture::use_on of a capture buffer on a stream of the capture: {used:?}"
            );
            assert!(ran.get(), "Capture::use_on: its closure runs");
            nodes += usize::from(kernel);
        }
        let n = 1 + rng.below(src_range.len().min(len));
        let (to, from) = (range_of(rng, len, n), within(rng, &src_range, n));
        let stream = next(rng);
        let mut expects = Vec::new();
        if ok(
            "Capture::copy (a capture buffer to a shared buffer)",
            &capture.copy(stream, (&out.buffer, to.clone()), (src, from)),
        ) {
            nodes += 1;
            holds.add_parts(&[out], None);
            expects.push(Expect::device(&out.buffer, to, byte));
        }
        if !pins.is_empty() && coin(rng) {
            let pin = &pins[rng.below(pins.len())];
            let n = 1 + rng.below(src_range.len().min(pin.len()));
            let (to, from) = (range_of(rng, pin.len(), n), within(rng, &src_range, n));
            let stream = next(rng);
            if ok(
                "Capture::copy_to_pinned (from a capture buffer)",
                &capture.copy_to_pinned(stream, (pin, to.clone()), (src, from)),
            ) {
                nodes += 1;
                holds.add_parts(&[], Some(pin));
                expects.push(Expect::pinned(pin, to, byte));
            }
        }
        // A second capture on this thread: each refuses the other's buffers and streams.
        if coin(rng) {
            let second = other.begin_capture(mode);
            note("StreamRef::begin_capture (a second capture)", &second);
            if let Ok(mut second) = second {
                let other_id = second.id();
                let made = second.alloc::<u32>(other, len);
                if checked("Capture::alloc (the second capture)", Expected::Ok, &made) {
                    let Ok(mut x) = made else { unreachable!("Ok") };
                    let mine = |what: &str, result: &Result<()>| refused(what, result, origin, id, true);
                    mine("Capture::fill_bytes (another capture's buffer)", &capture.fill_bytes(origin, &x, .., 0));
                    mine(
                        "Capture::copy (from another capture's buffer)",
                        &capture.copy(origin, (&out.buffer, 0..1), (&x, 0..1)),
                    );
                    mine("Capture::free (another capture's buffer)", &capture.free(origin, &mut x));
                    mine("Capture::fill_bytes (on a stream of another capture)", &capture.fill_bytes(other, &a, .., 0));
                    let theirs = |what: &str, result: &Result<()>| refused(what, result, other, other_id, true);
                    theirs("Capture::fill_bytes (a buffer of another capture)", &second.fill_bytes(other, &a, .., 0));
                    let ran = Cell::new(false);
                    let used = second.use_on(other, &a, |_, _| ran.set(true));
                    refused("Capture::use_on (a buffer of another capture)", &used, other, other_id, true);
                    assert!(!ran.get(), "a refused use_on runs nothing");
                    theirs("Capture::free (a buffer of another capture)", &second.free(other, &mut a));
                    ok("Capture::free (the second capture's own buffer)", &second.free(other, &mut x));
                }
                let ended = second.end();
                checked("Capture::end (the second capture)", Expected::Ok, &ended);
            }
            assert!(capture_intact(origin, id), "the second capture left this one intact");
        }
        // Frees on a random stream of the capture (often the allocating one), or one buffer
        // never freed: kept as the graph's output (`Capture::keep`), or its address kept, to
        // free it outside the graph after the launches.
        let leak = coin(rng);
        let leak_a = leak && (b.is_none() || coin(rng));
        let keeps = leak && rng.below(3) != 0;
        let mut leaked = None;
        let mut buffers = vec![(&mut a, a_on, leak_a)];
        if let Some((second, b_on)) = &mut b {
            buffers.push((second, *b_on, leak && !leak_a));
        }
        for (buffer, allocated_on, leaks) in buffers {
            if leaks && keeps {
                continue;
            }
            if leaks {
                let address = capture.use_on(origin, &*buffer, |_, address| address as usize);
                checked("Capture::use_on (the address of a capture buffer never freed)", Expected::Ok, &address);
                leaked = address.ok();
                continue;
            }
            if coin(rng) {
                refused(
                    "Capture::free (on a stream outside the capture)",
                    &capture.free(idle, buffer),
                    origin,
                    id,
                    true,
                );
            }
            let stream = if coin(rng) { on[allocated_on] } else { on[rng.below(on.len())] };
            if ok("Capture::free", &capture.free(stream, buffer)) {
                nodes += 1;
                let stream = on[rng.below(on.len())];
                refused(
                    "Capture::fill_bytes (a freed capture buffer)",
                    &capture.fill_bytes(stream, &*buffer, .., 1),
                    origin,
                    id,
                    true,
                );
                refused("Capture::free (a freed capture buffer)", &capture.free(stream, buffer), origin, id, true);
            }
        }
        let mut output = None;
        if keeps {
            let kept = if leak_a { a } else { b.take().map(|(second, _)| second)? };
            let kept = capture.keep(kept);
            checked("Capture::keep", Expected::Ok, &kept);
            output = Some(kept.ok()?);
        }
        for fork in &on[1..] {
            ok("StreamRef::wait_stream (a fork joined back)", &origin.wait_stream(fork));
        }
        let ended = capture.end();
        note("Capture::end (capture buffers)", &ended);
        assert!(ended.is_ok(), "a capture of capture buffers' work, its forks joined back, ends Ok: {ended:?}");
        let graph = ended.ok()?;
        let count = graph.node_count();
        note("Graph::node_count", &count);
        assert_eq!(count.ok(), Some(nodes), "a capture buffers' graph: a node per allocation, free and memory work");
        let strict = launchable(origin, self.stranded);
        let check_out = |what: &str| {
            for expect in &expects {
                check_expect(&Holds { expect: Some(expect.clone()), ..Holds::default() }, what);
            }
        };
        if let Some(output) = output {
            launch_kept(rng, &graph, output, origin, idle, strict);
            return None;
        }
        let Some(address) = leaked else {
            let exec = graph.instantiate();
            checked("Graph::instantiate (capture buffers)", Expected::Ok, &exec);
            let exec = exec.ok()?;
            let mut launched = true;
            for _ in 0..1 + rng.below(2) {
                let result = exec.launch(origin);
                checked(
                    "GraphExec::launch (capture buffers)",
                    if strict { Expected::Ok } else { Expected::Typed },
                    &result,
                );
                launched &= result.is_ok();
            }
            if launched && strict {
                check_out("a capture buffer's fill, copied out by the graph");
            }
            holds.expect = expects.get(rng.below(expects.len().max(1))).cloned();
            return Some((graph, exec, holds));
        };
        let auto_free = coin(rng);
        let exec = instantiate(&graph, auto_free);
        checked("Graph::instantiate (a capture buffer never freed)", Expected::Ok, &exec);
        let exec = exec.ok()?;
        let launch = |outstanding: bool| {
            let result = exec.launch(origin);
            let what = "GraphExec::launch (a capture buffer never freed)";
            note(what, &result);
            if outstanding && !auto_free {
                assert!(
                    matches!(result, Err(Error::Cuda { .. })),
                    "{what}: a relaunch while the graph's allocation is outstanding fails with CUDA's error, unless \
                     instantiated with auto_free_on_launch: {result:?}"
                );
            } else if strict {
                check_expected(what, Expected::Ok, &result);
            }
            if result.is_ok() && strict {
                check_out("a capture buffer's fill, copied out by a graph that never frees it");
            }
            outstanding || result.is_ok()
        };
        let mut outstanding = false;
        for _ in 0..if auto_free { 1 + rng.below(3) } else { 2 } {
            outstanding = launch(outstanding);
        }
        // Freed outside the graph, after the launches on their stream; then a plain executable
        // launches again.
        let free_raw = || {
            // SAFETY: the graph's allocation, outstanding after a launch on `origin` (no launch
            // since frees it), freed once, in order after that launch; nothing uses it after.
            let code = unsafe { sys::cudaFreeAsync(address as *mut std::ffi::c_void, origin.as_raw()) };
            checked(
                "cudaFreeAsync (raw, a graph's allocation outstanding)",
                Expected::Ok,
                &check(code, "cudaFreeAsync"),
            );
        };
        if outstanding {
            free_raw();
            if !auto_free && launch(false) {
                free_raw();
            }
        }
        None
    }
}

/// An executable of `graph`, instantiated with `auto_free_on_launch` or without.
fn instantiate(graph: &Graph, auto_free: bool) -> Result<GraphExec> {
    if auto_free {
        graph.instantiate_with(InstantiateOptions::new().auto_free_on_launch())
    } else {
        graph.instantiate()
    }
}

/// A graph that keeps a capture buffer (its output): an executable, auto-free or not, launched
/// on `origin` one to three times; after each launch the output read on a random stream
/// without being taken, and, unless auto-free, taken (read again, perhaps) and freed before
/// the next launch; the refusals before a launch, of an untaken output's relaunch and of an
/// auto-free output's take. At the end the last output is taken and freed (an auto-free
/// executable's through a plain executable of the graph made after it), so the program leaks
/// no device memory. Results are `Ok` where the program's streams allow strict checks.
fn launch_kept(
    rng: &mut Rng,
    graph: &Graph,
    mut output: GraphOutput<u32>,
    origin: &Stream,
    idle: &Stream,
    strict: bool,
) {
    let expected = if strict { Expected::Ok } else { Expected::Typed };
    let auto_free = coin(rng);
    let exec = instantiate(graph, auto_free);
    checked("Graph::instantiate (a kept capture buffer)", Expected::Ok, &exec);
    let Ok(exec) = exec else { return };
    checked("GraphOutput::take (before a launch)", Expected::GraphMisuse, &output.take(idle).map(drop));
    checked("GraphOutput::to_vec (before a launch)", Expected::GraphMisuse, &output.to_vec(&exec, idle));
    let mut untaken = false;
    for _ in 0..1 + rng.below(3) {
        let launched = exec.launch(origin);
        checked("GraphExec::launch (a kept capture buffer)", expected, &launched);
        if launched.is_err() {
            break;
        }
        untaken = true;
        let reader: &Stream = if coin(rng) { origin } else { idle };
        let read = output.to_vec(&exec, reader);
        checked("GraphOutput::to_vec", expected, &read);
        if let Ok(values) = &read {
            assert_eq!(values.len(), output.len(), "GraphOutput::to_vec: the whole output");
        }
        if auto_free {
            let taken = output.take(idle).map(drop);
            checked("GraphOutput::take (an auto-free executable's output)", Expected::GraphMisuse, &taken);
            continue;
        }
        checked("GraphExec::launch (its last output untaken)", Expected::GraphMisuse, &exec.launch(origin));
        let taken = output.take(reader);
        checked("GraphOutput::take", expected, &taken);
        let Ok(buffer) = taken else { break };
        untaken = false;
        if coin(rng) {
            checked("DeviceBuffer::to_vec (a taken output)", expected, &buffer.to_vec());
        }
    }
    if untaken {
        // An auto-free executable's last output outlives it; the graph's next executable, a
        // plain one, hands it over.
        drop(exec);
        let plain = if auto_free { graph.instantiate().map(Some) } else { Ok(None) };
        checked("Graph::instantiate (after an auto-free executable)", Expected::Ok, &plain);
        checked("GraphOutput::take (the last output)", expected, &output.take(idle).map(drop));
    }
}

/// One step of capture buffers' work in the program's capture.
fn in_capture<M: CaptureMode>(
    c: &mut Capture<'_, M>,
    at: &At<'_>,
    held: &mut CaptureHolds,
    scratch: &mut Scratch,
    stale: Option<&mut CaptureBuffer<u32>>,
    rng: &mut Rng,
) {
    let live = scratch.live();
    match rng.below(5) {
        1 if !live.is_empty() => fill_and_copy_out(c, at, held, scratch, live[rng.below(live.len())], rng),
        2 if !live.is_empty() => free(c, at, held, scratch, live[rng.below(live.len())], rng),
        3 => misuse(c, at, scratch, stale, rng),
        4 if !live.is_empty() => use_block(c, at, held, scratch, live[rng.below(live.len())], rng),
        _ => alloc(c, at, held, scratch, rng),
    }
}

fn alloc<M: CaptureMode>(
    c: &mut Capture<'_, M>,
    at: &At<'_>,
    held: &mut CaptureHolds,
    scratch: &mut Scratch,
    rng: &mut Rng,
) {
    if scratch.blocks.len() >= MAX_BLOCKS {
        return skip();
    }
    let len = LENGTHS[rng.below(LENGTHS.len())];
    let fork = scratch.fork(at.device, rng);
    let (made, ordered) = at.on(fork.map(|index| &scratch.forks[index]), |stream, inside| {
        let made = c.alloc::<u32>(stream, len);
        checked("Capture::alloc", at.expected(inside), &made);
        made
    });
    held.captured_parts(&[], None, &made, ordered);
    if let Ok(buffer) = made {
        if held.holds.own == OwnMemory::None {
            held.holds.own = OwnMemory::Freed;
        }
        scratch.blocks.push(Block { buffer, on: fork, freed: false });
    }
}

/// A fill of elements of block `k` with a byte on a fork, perhaps copied through another
/// block, then copied on the captured stream to a shared buffer or page-locked memory: what
/// the graph's launches leave there.
fn fill_and_copy_out<M: CaptureMode>(
    c: &mut Capture<'_, M>,
    at: &At<'_>,
    held: &mut CaptureHolds,
    scratch: &mut Scratch,
    k: usize,
    rng: &mut Rng,
) {
    if at.shared.is_empty() && at.pins.is_empty() {
        return skip();
    }
    let to_pinned = at.shared.is_empty() || (!at.pins.is_empty() && coin(rng));
    let pin = to_pinned.then(|| &at.pins[rng.below(at.pins.len())]);
    let shared = (!to_pinned).then(|| &at.shared[rng.below(at.shared.len())]);
    let target_len = match (pin, shared) {
        (Some(pin), _) => pin.len(),
        (None, Some(shared)) => shared.buffer.len(),
        (None, None) => unreachable!("one of them"),
    };
    let len = scratch.blocks[k].buffer.len();
    let n = 1 + rng.below(len.min(target_len));
    let range = range_of(rng, len, n);
    let byte = byte(rng);
    let fork = scratch.fork(at.device, rng);
    let block = &scratch.blocks[k].buffer;
    let (filled, ordered) = at.on(fork.map(|index| &scratch.forks[index]), |stream, inside| {
        let filled = c.fill_bytes(stream, block, range.clone(), byte);
        checked("Capture::fill_bytes (a capture buffer)", at.expected(inside), &filled);
        filled
    });
    held.captured_parts(&[], None, &filled, ordered);
    let mut fine = filled.is_ok() && ordered;
    let (mut src, mut src_range) = (k, range);
    let others: Vec<usize> = scratch.live().into_iter().filter(|&index| index != k).collect();
    if !others.is_empty() && coin(rng) {
        let j = others[rng.below(others.len())];
        let to = range_of(rng, scratch.blocks[j].buffer.len(), n);
        let fork = scratch.fork(at.device, rng);
        let (from_block, to_block) = (&scratch.blocks[k].buffer, &scratch.blocks[j].buffer);
        let (copied, ordered) = at.on(fork.map(|index| &scratch.forks[index]), |stream, inside| {
            let copied = c.copy(stream, (to_block, to.clone()), (from_block, src_range.clone()));
            checked("Capture::copy (between capture buffers)", at.expected(inside), &copied);
            copied
        });
        held.captured_parts(&[], None, &copied, ordered);
        fine &= copied.is_ok() && ordered;
        (src, src_range) = (j, to);
    }
    let from = &scratch.blocks[src].buffer;
    let expect = if let Some(pin) = pin {
        let to = range_of(rng, pin.len(), n);
        let copied = c.copy_to_pinned(at.origin, (pin, to.clone()), (from, src_range));
        checked("Capture::copy_to_pinned (from a capture buffer)", at.expected(true), &copied);
        at.refused_if_misuse("Capture::copy_to_pinned (from a capture buffer)", &copied);
        held.captured_parts(&[], Some(pin), &copied, true);
        fine &= copied.is_ok();
        Expect::pinned(pin, to, byte)
    } else {
        let Some(shared) = shared else { unreachable!("one of them") };
        let to = range_of(rng, shared.buffer.len(), n);
        let expected = at.expected_with(&held.holds, shared, true);
        let copied = c.copy(at.origin, (&shared.buffer, to.clone()), (from, src_range));
        checked("Capture::copy (a capture buffer to a shared buffer)", expected, &copied);
        held.captured_parts(&[shared], None, &copied, true);
        fine &= copied.is_ok();
        Expect::device(&shared.buffer, to, byte)
    };
    if fine && !held.off_origin {
        held.holds.expect = Some(expect);
    }
}

/// Frees block `k` on the captured stream, the stream it was allocated on, or another fork;
/// then it is refused.
fn free<M: CaptureMode>(
    c: &mut Capture<'_, M>,
    at: &At<'_>,
    held: &mut CaptureHolds,
    scratch: &mut Scratch,
    k: usize,
    rng: &mut Rng,
) {
    let fork = match rng.below(3) {
        0 => scratch.blocks[k].on,
        1 => None,
        _ => scratch.fork(at.device, rng),
    };
    let Scratch { blocks, forks } = scratch;
    let block = &mut blocks[k];
    let (freed, ordered) = at.on(fork.map(|index| &forks[index]), |stream, inside| {
        let freed = c.free(stream, &mut block.buffer);
        checked("Capture::free", at.expected(inside), &freed);
        freed
    });
    held.captured_parts(&[], None, &freed, ordered);
    if freed.is_ok() {
        block.freed = true;
        at.refused("Capture::fill_bytes (a freed capture buffer)", &c.fill_bytes(at.origin, &block.buffer, .., 0));
        at.refused("Capture::free (a freed capture buffer)", &c.free(at.origin, &mut block.buffer));
    }
}

/// Refused calls: a freed block, another capture's buffer, a stream outside the capture.
fn misuse<M: CaptureMode>(
    c: &mut Capture<'_, M>,
    at: &At<'_>,
    scratch: &mut Scratch,
    stale: Option<&mut CaptureBuffer<u32>>,
    rng: &mut Rng,
) {
    match rng.below(3) {
        0 if stale.is_some() => {
            let Some(stale) = stale else { unreachable!("checked") };
            at.refused("Capture::fill_bytes (another capture's buffer)", &c.fill_bytes(at.origin, &*stale, .., 0));
            if let Some(shared) = at.shared.first() {
                let copied = c.copy(at.origin, (&shared.buffer, 0..1), (&*stale, 0..1));
                at.refused("Capture::copy (from another capture's buffer)", &copied);
            }
            let ran = Cell::new(false);
            at.refused(
                "Capture::use_on (another capture's buffer)",
                &c.use_on(at.origin, &*stale, |_, _| ran.set(true)),
            );
            assert!(!ran.get(), "a refused use_on runs nothing");
            at.refused("Capture::free (another capture's buffer)", &c.free(at.origin, stale));
        }
        1 => {
            let idle = Stream::new(at.device, StreamOptions::non_blocking());
            note("Stream::new", &idle);
            let Ok(idle) = idle else { return };
            at.refused("Capture::alloc (a stream outside the capture)", &c.alloc::<u32>(&idle, LENGTHS[0]));
            let live = scratch.live();
            if !live.is_empty() {
                // Refused frees lose nothing: the block stays allocated, and is freed later.
                let block = &mut scratch.blocks[live[rng.below(live.len())]].buffer;
                at.refused("Capture::fill_bytes (a stream outside the capture)", &c.fill_bytes(&idle, &*block, .., 0));
                at.refused("Capture::free (a stream outside the capture)", &c.free(&idle, block));
            }
        }
        _ => {
            let freed = scratch.freed();
            if freed.is_empty() {
                checked("Capture::alloc (no element)", Expected::Size, &c.alloc::<u32>(at.origin, 0));
                return;
            }
            let block = &mut scratch.blocks[freed[rng.below(freed.len())]].buffer;
            if let Some(pin) = at.pins.first() {
                let copied = c.copy_to_pinned(at.origin, (pin, 0..1), (&*block, 0..1));
                at.refused("Capture::copy_to_pinned (from a freed capture buffer)", &copied);
            }
            let ran = Cell::new(false);
            at.refused("Capture::use_on (a freed capture buffer)", &c.use_on(at.origin, &*block, |_, _| ran.set(true)));
            assert!(!ran.get(), "a refused use_on runs nothing");
            at.refused("Capture::free (a freed capture buffer)", &c.free(at.origin, block));
        }
    }
}

/// Memory work on block `k` (sometimes with refused operands): a copy from or to another block
/// or itself, a shared buffer, page-locked memory; a fill; `use_on`.
fn use_block<M: CaptureMode>(
    c: &mut Capture<'_, M>,
    at: &At<'_>,
    held: &mut CaptureHolds,
    scratch: &mut Scratch,
    k: usize,
    rng: &mut Rng,
) {
    let bad = rng.below(5) == 0;
    let fork = scratch.fork(at.device, rng);
    let live = scratch.live();
    let Scratch { blocks, forks } = scratch;
    let block = &blocks[k].buffer;
    let len = block.len();
    let shared = (!at.shared.is_empty()).then(|| at.shared[rng.below(at.shared.len())].clone());
    let pin = (!at.pins.is_empty()).then(|| at.pins[rng.below(at.pins.len())].clone());
    let what = rng.below(6);
    let (outcome, ordered) = at.on(fork.map(|index| &forks[index]), |stream, inside| {
        let expected = |uses: Option<&Shared>| match (bad, uses) {
            (true, _) => Expected::Size,
            (false, Some(shared)) => at.expected_with(&held.holds, shared, inside),
            (false, None) => at.expected(inside),
        };
        match (what, &shared, &pin) {
            (0, _, _) => {
                let j = live[rng.below(live.len())];
                let other = &blocks[j].buffer;
                let (to, from) = copy_ranges(rng, other.len(), len, j == k, bad);
                let result = c.copy(stream, (other, to), (block, from));
                checked("Capture::copy (between capture buffers)", expected(None), &result);
                (result, None, None)
            }
            (1, Some(shared), _) => {
                let (to, from) = copy_ranges(rng, len, shared.buffer.len(), false, bad);
                let result = c.copy(stream, (block, to), (&shared.buffer, from));
                checked("Capture::copy (a shared buffer to a capture buffer)", expected(Some(shared)), &result);
                (result, Some(shared), None)
            }
            (2, Some(shared), _) => {
                let (to, from) = copy_ranges(rng, shared.buffer.len(), len, false, bad);
                let result = c.copy(stream, (&shared.buffer, to), (block, from));
                checked("Capture::copy (a capture buffer to a shared buffer)", expected(Some(shared)), &result);
                (result, Some(shared), None)
            }
            (3, _, Some(pin)) => {
                let result = if coin(rng) {
                    let (to, from) = copy_ranges(rng, len, pin.len(), false, bad);
                    c.copy_from_pinned(stream, (block, to), (pin, from))
                } else {
                    let (to, from) = copy_ranges(rng, pin.len(), len, false, bad);
                    c.copy_to_pinned(stream, (pin, to), (block, from))
                };
                checked("Capture::copy_{from,to}_pinned (a capture buffer)", expected(None), &result);
                (result, None, Some(pin))
            }
            (4, _, _) => {
                let kernel = coin(rng);
                let ran = Cell::new(false);
                let used = c.use_on(stream, block, |on, _| {
                    ran.set(true);
                    if kernel { cuda_stream_tests::empty(on) } else { Ok(()) }
                });
                let what = "Capture::use_on (a capture buffer)";
                note(what, &used);
                if let Ok(inner) = &used {
                    note("a captured kernel (use_on of a capture buffer)", inner);
                }
                check_expected(what, at.expected(inside), &used);
                assert_eq!(ran.get(), used.is_ok(), "{what}: its closure runs exactly when it is not refused");
                (used.map(|_| ()), None, None)
            }
            _ => {
                let range = if bad { bad_range(rng, len) } else { some_range(rng, len) };
                let result = c.fill_bytes(stream, block, range, byte(rng));
                checked("Capture::fill_bytes (a capture buffer)", expected(None), &result);
                (result, None, None)
            }
        }
    });
    let (result, shared, pin) = outcome;
    let buffers: Vec<&Shared> = shared.into_iter().collect();
    held.captured_parts(&buffers, pin, &result, ordered);
}

impl At<'_> {
    /// After a call that may be refused with `CaptureMisuse` (never here: every operand is the
    /// capture's): the capture is intact.
    fn refused_if_misuse<T>(&self, what: &str, result: &Result<T>) {
        if self.intact && matches!(result, Err(Error::CaptureMisuse(_))) {
            assert!(capture_intact(self.origin, self.id), "{what}: a refused call leaves the capture intact");
        }
    }
}
