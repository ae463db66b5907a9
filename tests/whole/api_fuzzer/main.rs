//! API-sequence fuzzer: random programs over the whole public API of `cuda_stream`, each made
//! from a fixed seed, run on device 0.
//!
//! A program is 40 to 80 operations chosen by [`Rng`] from the seed: owned, built-in and borrowed
//! streams created, dropped and destroyed; events recorded, waited on, queried, synchronized and
//! timed; `wait_stream` and `fork`; tiny kernels (empty, tag, spins of at most 50 µs); `FnOnce`
//! host functions and host callbacks; completion futures (polled, or blocked on when no capture
//! is active); graph captures in all three modes, with repeatable host functions, forks and joins,
//! ended or dropped; graphs instantiated, uploaded, launched on any stream and dropped in any order
//! with launches pending; pool leases up to exhaustion; nested `as_current`; and bursts of 2 to 4
//! threads doing random operations on the program's shared streams. Memory and the later
//! features, mixed into the same programs:
//! * device buffers (`memory.rs`): allocated on home streams of the program, from the device's
//!   pool or a [`MemPool`](cuda_stream::MemPool) of the program, zeroed or from a slice; filled,
//!   copied from and into host slices, pinned buffers and each other, used through `use_on` (an
//!   untyped fill, or a kernel) and given to a typed launch as its argument, on any stream of the
//!   program, the captured one included (a fill, a copy between buffers and a typed launch there
//!   are captured, the graph holding the buffer); dropped
//!   here or on another thread; pinned buffers made, read and written on the host, dropped here
//!   or elsewhere; memory pools made, trimmed, asked for their figures and dropped with buffers
//!   of theirs alive. Also while a capture is in progress;
//! * typed launches (`launches.rs`, `SAXPY` through `use_on`) with a launch attribute: none, a
//!   priority, the remote memory-synchronization domain, cooperative, programmatic dependent;
//!   stream memory operations on mapped and device words (writes, waits already met, batches
//!   with a barrier, an index out of range); SM partitions (skipped for the program when the
//!   device makes none) and their streams: kernels, waits both ways with the program's streams,
//!   host functions, completions, a buffer, a capture whose graph the program keeps and
//!   launches later; graphs with an if node whose condition has a default value (not under
//!   compute-sanitizer, where their launches fault);
//! * sync-debug scopes (`Report`, `Refuse`) around stream and device synchronizes and pageable
//!   copies, and race-detector scopes (`Report`) around buffer operations the crate orders
//!   (`scopes.rs`); and a share of the programs run whole under the race detector, some of
//!   them with a planted race (see "The race detector over whole programs" below);
//! * joins from another thread while captures begin and end (`joins.rs`): the main thread
//!   captures a stream of its own 1 to 3 times (ThreadLocal or Relaxed) and joins back what
//!   joined, while a spawned thread makes a second stream wait on the captured one (or on an
//!   event recorded in the capture), records, launches, allocates, copies and awaits
//!   completions on it, and makes the captured stream wait on it;
//! * graphs that hold memory (`graph_memory.rs`): device buffers shared as `Arc`s (made on two
//!   homes of the process, or the program's own buffers shared, and given back once no graph
//!   holds them) and page-locked buffers as `Arc<SharedPinned>` (made, or the program's
//!   shared; written and read on the host through their guard, tried while a guard is alive,
//!   dropped here or on another thread); graphs built node by node over them: memset and
//!   memcpy nodes (between buffers, from and to page-locked memory) with random ranges, some
//!   refused (out of range, empty, reversed, sides of different lengths, overlapping sides in
//!   one buffer), host-function nodes, random dependencies, and often a last fill of a buffer
//!   with its copy to page-locked memory; the same memory work in the program's captures
//!   (`Capture::copy`, `fill_bytes`, `copy_from_pinned`, `copy_to_pinned`, and `use_on` with a
//!   tiny kernel or none) on the captured stream, a stream that joined it or one outside it,
//!   also while the program holds the page-locked buffer's lock; captures of their own that
//!   end, are dropped, fail (a fork never joined back) or are ended by raw FFI
//!   (`cudaStreamEndCapture`), and captures into a graph that holds memory; the graphs cloned
//!   and instantiated; their executables launched on any stream of the program (two at once,
//!   one of them from another thread), updated from a graph of the same shape built anew or
//!   one with a node more, launched while the program holds a lock they need, and dropped,
//!   with the buffers, graphs and clones, in any order with launches pending. The buffers that
//!   captures may hold live on two streams made once per process, before the baseline of live
//!   streams: a capture whose end fails leaks its hold (as documented), and with a buffer the
//!   stream it lives on. Capture buffers (`graph_memory/capture_buffers.rs`: graph memory,
//!   `Capture::alloc` and `Capture::free`) in both kinds of capture: allocated on the captured
//!   stream and on streams forked from it (before or after the allocation), filled, copied
//!   between two of them, with shared buffers and page-locked memory, used through `use_on`,
//!   with refused operands too; freed on the allocating stream, the captured one or another
//!   fork; refused once freed, from another capture (one ended, or a second capture of the
//!   same thread, which refuses this one's in turn) and on a stream outside the capture; in a
//!   capture of its own, perhaps one never freed, instantiated with `auto_free_on_launch` or
//!   not, then freed by raw `cudaFreeAsync` after the launches (so that no program leaks
//!   device memory). Not in race-checked programs (see below);
//!
//! And actors the crate does not control:
//! * events recorded inside a capture, then queried, synchronized, timed and awaited (polled, or
//!   kept pending), on the capturing thread or a spawned one, and by threads racing the capture's
//!   end (one of them perhaps recording the event again outside the capture meanwhile); outside
//!   a capture, such an event checked, recorded outside again, and used;
//! * raw captures: a program stream wrapped with `BorrowedStream::borrow_raw`, captured through
//!   raw FFI (`cudaStreamBeginCapture`, any mode; Relaxed when a spawned thread checks events
//!   meanwhile, since a Global capture forbids its queries), crate operations on it and on other
//!   streams from the capturing thread only, then the raw `cudaStreamEndCapture` (perhaps while
//!   that thread checks the events recorded in it), and `cudaGraphDestroy` of the graph;
//! * a non-primary context of cudarc's (`CudaContext::new_non_primary`) made current, crate
//!   operations meanwhile (streams, events, pool leases, completions, `wait_stream`, captures,
//!   kernels, host functions), the context destroyed, then everything made meanwhile used and
//!   dropped. Where no such context can be made, the actor is skipped for the program.
//!
//! What must hold, checked for every program:
//! * every call returns `Ok` or a typed [`Error`]: nothing panics, crashes or hangs, no call made
//!   outside a host function says [`Error::InsideHostFn`], and no error is sticky (no kernel here
//!   faults);
//! * no host closure runs after it was dropped: each owns a drop flag, and a run that finds its
//!   flag already set is counted as a violation (never a panic inside the host function);
//! * a refused host function is dropped at once and never runs; a `FnOnce` host function on a
//!   capturing stream, and a capture's host function on a stream outside the capture, are refused
//!   with [`Error::CaptureMisuse`]; captured host functions do not run during the capture;
//! * inside host functions the crate refuses CUDA calls ([`Error::InsideHostFn`]);
//! * what the crate decides without CUDA: priorities outside the range, `ipc_handle` without the
//!   interprocess flag, `elapsed` without timing or records, pool exhaustion, the per-thread
//!   stream of one thread used on another, the identity of built-in and borrowed streams, the
//!   current stream inside nested `as_current`;
//! * an event whose last record went into a capture (this crate's or a raw one) is refused with
//!   [`Error::CaptureMisuse`] by `query`, `synchronize` and `elapsed` (either end), and its
//!   `completion` resolves at once with it; recorded outside a capture again, it works normally
//!   (never `CaptureMisuse` while no capture is in progress). The program tracks where each
//!   event's last record went, so this is exact wherever no other thread may record it; racing
//!   such a record, the calls give `Ok` or `CaptureMisuse`. A capture that only such refused
//!   calls touched is still active afterwards, and ends `Ok`, also when they race its end (the
//!   end gives `Ok` or a typed error when a record races it too). Checked while no completion
//!   of the program is pending: the reactor's query of an event that is being recorded into a
//!   capture invalidates it, a limit the crate documents;
//! * during a raw capture of a `BorrowedStream`: `is_non_blocking` and `id` are refused with
//!   `CaptureMisuse`; `priority`, `device`, `capture_status` (`Active`) and `capture_info`
//!   succeed; `FnOnce` host functions on it are refused (dropped, never run); the owning
//!   `Stream` knows its flags, priority and id; the capture is still active after every
//!   operation, and the raw end returns `cudaSuccess`;
//! * what the crate makes while a non-primary context is current is in the device's primary
//!   context: all of it works, without an error, after that context is destroyed, and drops
//!   cleanly; a stream of that context is refused with [`Error::ForeignContext`] by
//!   `borrow_raw`, `borrow_raw_on` and `from_cudarc` (its default stream too), and `to_cudarc`
//!   refuses to lend a stream to that context;
//! * a device buffer holds what the last ordered write left: each buffer and pinned buffer
//!   tracks the byte its last write set (a fill, a slice or a pinned buffer of one tag, a copy
//!   of a buffer whose byte is known, an untyped fill through `use_on`), known only when that
//!   write returned `Ok` while no capture was in progress (any failure, or any write during a
//!   capture, makes it unknown, and one that went through during a capture for good: a graph
//!   may hold the buffer and write it at each launch); reads outside captures (`copy_to_slice`, `to_vec`, a pinned
//!   buffer's `as_slice` after a `copy_to_pinned`) must see it. Copies between lengths that
//!   differ are refused with [`Error::Size`];
//! * a typed launch that returned `Ok` computed `y = a * x + y` exactly (small integers); a
//!   word a stream wrote (mapped, or device words read back) holds the value once the stream
//!   is done; an index out of range is [`Error::WordOutOfRange`]; a partition's stream is
//!   non-blocking and a buffer of it filled elsewhere reads back; an if node ran its body
//!   exactly when its condition's default value is nonzero;
//! * under a `Refuse` sync-debug scope no synchronize or pageable copy succeeds, and under
//!   `Report` a synchronize that succeeded was reported; in a `Report` race-detector scope,
//!   buffer operations the crate orders (on any streams of the program) report nothing;
//! * in a race-checked program the race detector (`RaceMode::Report`, the whole program)
//!   reports no race among the program's operations, and reports the planted race, once, where
//!   one was planted;
//! * in the join race every call (the waits, the captures' begins and ends, the second
//!   stream's records, launches, allocations, copies and completions) gives `Ok`,
//!   [`Error::CaptureMisuse`] or one of CUDA's stream-capture errors (900 to 908: a capture
//!   that another thread forked into after its owner joined back ends unjoined); a buffer
//!   filled and read back there holds the fill; streams left capturing are counted as
//!   stranded (then the device's final synchronize is not asserted);
//! * graphs that hold memory: a node with refused operands is [`Error::Size`], and so is the
//!   same memory work in a capture; a node or captured copy over a page-locked buffer whose
//!   lock the program holds, or that the graph holds at another place (swapped since), is
//!   [`Error::GraphMisuse`]; a capture's memory work on a stream outside it (`use_on` too,
//!   which then runs nothing) is [`Error::CaptureMisuse`] and leaves the capture intact, and
//!   on the captured stream of an intact capture it is `Ok`; node counts are what was added (a
//!   clone has the graph's; a capture into a graph adds its nodes); a launch is
//!   [`Error::GraphMisuse`] while the program holds a lock it needs (and enqueues nothing: the
//!   host still reads what it wrote under that lock) or once a page-locked buffer it copies is
//!   at another place, [`Error::CaptureMisuse`] onto a stream of a capture (leaving it
//!   intact), and `Ok` otherwise on a stream outside captures (beside a launch on another
//!   thread that copies the same page-locked buffer: `Ok` or `GraphMisuse`); an update from a
//!   graph with a node more is [`Error::GraphUpdate`]; a graph whose last memory nodes fill
//!   elements of a buffer with a byte and copy them to page-locked memory leaves that byte
//!   there, read on the host under the lock right after a launch (of its executable, a
//!   clone's, an updated one's, a capture into it that touched neither, one beside another
//!   thread's launch that copies no page-locked memory of it); a buffer's strong count shows
//!   one hold per capture that used it, shared by its graph and executables, let go by a
//!   dropped capture and by the last of them, and kept (leaked) by a capture whose end failed
//!   or that raw FFI ended;
//! * capture buffers: their allocation, memory work and free on a stream of an intact capture
//!   (the captured stream, or a fork made to wait for it) are `Ok`, refused operands
//!   [`Error::Size`] (also an allocation of no element); a freed buffer, another capture's
//!   buffer (a `use_on` then runs nothing) and a stream outside the capture are
//!   [`Error::CaptureMisuse`], and the capture is intact after each refusal; a capture of
//!   its own has a node per allocation, free and memory work, and ends `Ok` once its forks
//!   joined back; a byte filled into a capture buffer on a fork (perhaps copied through a
//!   second one) and copied out to a shared buffer or page-locked memory is what the graph's
//!   launches leave there (`to_vec` of the buffer, the host's read under the lock), checked
//!   after the launches of its executable and, in the family, as its other fills are; with a
//!   buffer never freed, every launch of an executable instantiated with
//!   `auto_free_on_launch` is `Ok`, while without it the relaunch is CUDA's error until a raw
//!   `cudaFreeAsync` frees the allocation, then it is `Ok` again. A graph of the family with
//!   memory of its own is never captured into, a clone of it and one that keeps a buffer
//!   unfreed launch with any typed result, and CUDA's one executable at a time makes a second
//!   instantiation any typed result;
//! * afterwards every closure is freed, every completion has resolved, and the live counts of
//!   streams, events and host closures are back where they started.
//!
//! The race detector over whole programs (`scopes.rs`):
//! * which: the programs whose seed is divisible by `CUDA_STREAM_FUZZ_RACE_EVERY` (default 4,
//!   a quarter of them), the same programs (the same operations) as without the detector, so
//!   the run time stays about the same (the detector adds its bookkeeping only); one in four of
//!   those (the quotient 1 modulo 4: seeds 4, 20, 36, … by default) plants a race.
//! * how: the process-wide mode ([`set_race_mode`](cuda_stream::set_race_mode)`(Report)`),
//!   from before the program's first stream to after its leftovers check, not a
//!   [`race_scope`](cuda_stream::race_scope): a scope belongs to the thread that opened it, and
//!   a program's operations also run on threads it spawns (the bursts of threads, the join
//!   race's joiner, the racers at a capture's end, event checks on a spawned thread, buffers
//!   and pinned buffers dropped elsewhere), which report under the process mode. CUDA's own
//!   threads make no call of the crate (host functions are refused them). The detector starts
//!   its history there: nothing the program uses predates it (the two homes of the buffers
//!   captures may hold are older, but no work of an earlier program is pending on them, and
//!   their buffers are the program's own). `RaceScope` operations nest
//!   their own scope inside.
//! * what it sees: the buffers' allocations, fills, copies (slices, pinned buffers, each
//!   other) and frees; the pinned buffers' host accesses; the records, waits, `wait_stream`s,
//!   forks, synchronizes and queries that saw completion; and, declared in race-checked
//!   programs only (the others run exactly as before), the raw work the crate orders: the
//!   untyped fill through `use_on` (`declare_accesses` inside `use_on`, a write of the whole
//!   buffer), the typed launch (`LaunchConfig::accesses`: `x` read on its home stream, `y`
//!   written through `use_on`), the conditional graph's kernel nodes (their writes of the log,
//!   replayed by the graph's one launch, on the log's home stream, where the log is made, read
//!   back and freed). The crate itself declares the memory nodes of built graphs and the memory
//!   work of captures (`graph_memory.rs`), replayed by each launch of their executables, which
//!   it orders with the buffers' and page-locked buffers' other uses.
//! * what it does not see, and why that is right: the tag kernels append to one mapped log
//!   (shared by every program) from every stream, unordered on purpose and atomic: declared,
//!   they would be reported (true, benign races), so they are never declared; empty and spin
//!   kernels, host functions and callbacks touch no memory; stream memory operations
//!   (`MappedWords`, `DeviceWords`) tell the detector nothing (`memory/mem_ops.rs` is none of
//!   its sources), and each set of words is used on one stream only. The program declares
//!   no raw work into a capture: a buffer's `use_on` is refused during captures, its fills,
//!   copies between buffers and typed launches there are captured with the graph holding the
//!   buffer (each launch of it is ordered with the buffer's uses, so what they tell the
//!   detector is ordered too), no buffer is used during a raw capture, the `SAXPY` typed
//!   launches never run in one, and `Capture::use_on`'s kernels are empty
//!   (declared, captured accesses of raw work would race the buffers' later uses for real:
//!   nothing orders a graph launched on an arbitrary stream with them). What captures hold
//!   through the crate's own memory work is ordered at each launch, as above; accesses within
//!   one graph are not checked against each other. Raw captures and the non-primary context
//!   touch no memory. Capture buffers are drawn there too: the crate does not tell the
//!   detector of their accesses (only the graph reaches that memory), and the detector orders
//!   one executable's launches as CUDA does.
//! * so no operation is left out of race-checked programs: every access
//!   the detector is told of is ordered by the crate (a buffer's uses, through its events and
//!   home stream) or made on one stream; no raw work touches a buffer behind the crate's back
//!   (the raw fill runs inside `use_on`, the typed launch's `x` is used on its home stream
//!   only, the log's kernels on its home stream only). A report there is a bug of the crate's
//!   ordering or of the detector, and fails the program with the reports (both operations,
//!   their streams, the missing edge) and its seed.
//! * the planted race (`World::plant_race`), once per planting program, at a random point at
//!   the top level (no capture in progress): a fresh buffer zeroed on a program home, two
//!   owned streams of the program outside any capture (fresh ones where fewer) made to wait
//!   for that home, then a raw `cudaMemsetAsync` of all its bytes on each, each declared first
//!   with `declare_accesses` (as `tests/call/race_detector.rs` declares its raw kernels), with
//!   nothing between them: the detector must report exactly one race, `WriteWrite`, from the
//!   first declared write to the second. The home stream then waits for both (or the device
//!   synchronizes) and the buffer drops: its free races nothing. The planted writes are told
//!   apart from the program's operations by their names; every other report fails the program.
//!
//! Files: `main.rs` (these docs, knobs, results, the harness, the watchdog, the leftovers
//! check), `ops.rs` ([`Op`], its weights and the generator), `world.rs` (a program's state and
//! the dispatch of its operations), then one file per family: `streams.rs` (streams, kernels,
//! host functions, completions, pool leases, `as_current`), `events.rs` (events, and events
//! recorded in captures), `captures.rs` (captures, graphs, executables), `foreign.rs` (raw
//! captures, the non-primary context), `threads.rs`, `memory.rs`, `launches.rs`, `scopes.rs`
//! (also the race detector over whole programs, its oracle and the planted race), `joins.rs`
//! and `graph_memory.rs` (graphs that hold memory; the capture homes), with
//! `graph_memory/capture_buffers.rs` (capture buffers).
//!
//! Knobs:
//! * `CUDA_STREAM_FUZZ_PROGRAMS`: how many programs; default 1,000, or 50 under
//!   compute-sanitizer (`CUDA_STREAM_SANITIZER`).
//! * `CUDA_STREAM_FUZZ_FIRST`: the first seed (default 0): seeds `FIRST..FIRST + N`.
//! * `CUDA_STREAM_FUZZ_SEED`: run only the program of this seed (a failure names its seed).
//! * `CUDA_STREAM_FUZZ_RACE_EVERY`: the programs whose seed is divisible by it run under the
//!   race detector (default 4; 1: all of them; 0: none), one in four of those with a planted
//!   race.
//! * `CUDA_STREAM_FUZZ_TRACE=1`: print every operation, every call's outcome and the live counts
//!   (to stderr, uncaptured): for a failing seed.
//!
//! A watchdog aborts the process, naming the seed and the operation, if one operation of a
//! program has not returned after 60 s (600 s under compute-sanitizer): a hang is a failure too.

use cuda_stream::{
    BorrowedStream, Builtin, BuiltinStream, Capture, CaptureStatus, Completion, CudaCode, Device, Error, Event,
    EventFlags, Graph, GraphExec, NULL_STREAM_IS_PER_THREAD, Ownership, Priority, PriorityRange, Result, Stream,
    StreamLease, StreamOptions, StreamPool, StreamRef, capture, check, live_events, live_host_fns, live_streams, sys,
};
use cuda_stream_tests::{Current as CurrentStream, HeldStream, Rng, TagLog, block_on, gpu_or_skip, poll_until, scaled};
use cudarc::driver::CudaContext;
use std::any::Any;
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

mod captures;
mod events;
mod foreign;
mod graph_memory;
mod joins;
mod launches;
mod memory;
mod ops;
mod scopes;
mod streams;
mod threads;
mod world;

use captures::*;
use events::*;
use graph_memory::*;
use memory::*;
use ops::*;
use scopes::*;
use streams::*;
use world::*;

const PROGRAMS_VAR: &str = "CUDA_STREAM_FUZZ_PROGRAMS";
const SEED_VAR: &str = "CUDA_STREAM_FUZZ_SEED";
const FIRST_VAR: &str = "CUDA_STREAM_FUZZ_FIRST";
const TRACE_VAR: &str = "CUDA_STREAM_FUZZ_TRACE";
const RACE_EVERY_VAR: &str = "CUDA_STREAM_FUZZ_RACE_EVERY";

/// Programs run under the race detector by default: those whose seed is divisible by this.
const RACE_EVERY: u64 = 4;

/// Bounds on what one program holds at a time.
const MAX_STREAMS: usize = 16;
const MAX_EVENTS: usize = 12;
const MAX_GRAPHS: usize = 6;
const MAX_EXECS: usize = 6;

/// How long host closures (graph closures are freed by CUDA on a thread of its own) may take to
/// be freed once a program's work is done.
const SETTLE: Duration = Duration::from_secs(5);

/// Tests that count live handles and closures run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// Totals over all programs (the spawned threads of a program add to them too).
static CALLS: AtomicU64 = AtomicU64::new(0);
static OKS: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static HOST_RUNS: AtomicU64 = AtomicU64::new(0);
/// Host closures that ran after their drop flag was set.
static VIOLATIONS: AtomicU64 = AtomicU64::new(0);
/// Crate calls made inside a host function that were not refused with `InsideHostFn`.
static REFUSALS_MISSED: AtomicU64 = AtomicU64::new(0);
/// Host callbacks that were handed an error status (none is expected; counted, not asserted).
static CALLBACK_ERRORS: AtomicU64 = AtomicU64::new(0);
static ERROR_KINDS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
static TAGS: AtomicU32 = AtomicU32::new(0);
/// Programs run under the race detector (`RaceMode::Report`), whose reports were checked.
static RACE_PROGRAMS: AtomicU64 = AtomicU64::new(0);
/// Planted races declared, and those the detector reported (as it must: else the program fails).
static PLANTS: AtomicU64 = AtomicU64::new(0);
static PLANTS_REPORTED: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// Drop flags
// ---------------------------------------------------------------------------------------------

/// The closure has run (at least once).
const RAN: u8 = 1;
/// The closure has been dropped.
const DROPPED: u8 = 2;

/// Owned by one host closure: records its runs, and its drop. The state stays readable through
/// the `Arc` after the closure is gone.
struct Token(Arc<AtomicU8>);

impl Token {
    fn new() -> (Token, Arc<AtomicU8>) {
        let state = Arc::new(AtomicU8::new(0));
        (Token(Arc::clone(&state)), state)
    }

    /// Called by the closure each time it runs, on CUDA's host thread: atomics only, never a
    /// panic, never a wait.
    fn run(&self) {
        if self.0.fetch_or(RAN, Ordering::SeqCst) & DROPPED != 0 {
            VIOLATIONS.fetch_add(1, Ordering::SeqCst);
        }
        HOST_RUNS.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.0.fetch_or(DROPPED, Ordering::SeqCst);
    }
}

/// Inside a host function: a crate call that would reach CUDA must be refused before it does.
fn probe_refusal() {
    if !matches!(Device::count(), Err(Error::InsideHostFn)) {
        REFUSALS_MISSED.fetch_add(1, Ordering::SeqCst);
    }
}

/// A refused closure was dropped before the call returned, and never ran.
fn expect_dropped_unrun(state: &AtomicU8, what: &str) {
    let state = state.load(Ordering::SeqCst);
    assert_eq!(state, DROPPED, "{what}: a refused closure must be dropped at once and never run (state {state:#04b})");
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// Whether to print every operation and call (`CUDA_STREAM_FUZZ_TRACE=1`).
fn tracing() -> bool {
    static TRACING: OnceLock<bool> = OnceLock::new();
    *TRACING.get_or_init(|| std::env::var(TRACE_VAR).is_ok_and(|value| value == "1"))
}

/// Counts one call and checks what must hold of every result; returns whether it was `Ok`.
fn note<T>(what: &str, result: &Result<T>) -> bool {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if tracing() {
        let outcome = result.as_ref().map_or_else(kind_of, |_| "Ok".to_string());
        let _ = writeln!(std::io::stderr(), "      {what}: {outcome}");
    }
    match result {
        Ok(_) => {
            OKS.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(error) => {
            ERRORS.fetch_add(1, Ordering::Relaxed);
            assert!(
                !matches!(error, Error::InsideHostFn),
                "{what}: InsideHostFn from a call made outside any host function: {error}"
            );
            assert!(!error.is_sticky(), "{what}: a sticky error with no faulting kernel anywhere: {error}");
            *ERROR_KINDS.lock().unwrap_or_else(PoisonError::into_inner).entry(kind_of(error)).or_default() += 1;
            false
        }
    }
}

/// Counts a call that cannot fail.
fn note_infallible() {
    CALLS.fetch_add(1, Ordering::Relaxed);
    OKS.fetch_add(1, Ordering::Relaxed);
}

fn skip() {
    SKIPPED.fetch_add(1, Ordering::Relaxed);
}

/// A short name for an error: the CUDA API and code, or the variant.
fn kind_of(error: &Error) -> String {
    match error {
        Error::Cuda { api, code } => format!("{api}: {}", code.name()),
        other => format!("{other:?}").split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default().to_string(),
    }
}

/// The per-thread stream of one thread is refused on every other.
fn expect_wrong_thread<T: std::fmt::Debug>(bound: bool, what: &str, result: &Result<T>) {
    if bound {
        assert!(
            matches!(result, Err(Error::WrongThread)),
            "{what}: the main thread's per-thread stream used on another thread must be WrongThread: {result:?}"
        );
    }
}

/// Prints one line of the trace (`CUDA_STREAM_FUZZ_TRACE=1`) that is no call's outcome.
fn trace(line: std::fmt::Arguments<'_>) {
    if tracing() {
        let _ = writeln!(std::io::stderr(), "      {line}");
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string())
}

// ---------------------------------------------------------------------------------------------
// Running programs
// ---------------------------------------------------------------------------------------------

/// A program being run: for the failure messages.
struct Run {
    seed: u64,
    ops: Vec<Op>,
}

/// Runs step `at` of `run`; a panic in it (the crate's, or a failed check) fails the test with
/// the seed, the step and the operation.
fn guarded(run: &Run, at: usize, f: impl FnOnce()) {
    progress(run.seed, at);
    if tracing() {
        let op = run.ops.get(at).map_or_else(|| "end".to_string(), |op| format!("{op:?}"));
        let _ = writeln!(std::io::stderr(), "seed {} op #{at} {op}", run.seed);
    }
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(f));
    if tracing() {
        let (closures, streams, events) = (live_host_fns(), live_streams(), live_events());
        let _ = writeln!(std::io::stderr(), "    live: {closures} host closures, {streams} streams, {events} events");
    }
    if let Err(payload) = outcome {
        let step = match run.ops.get(at) {
            Some(op) => format!("op #{at} of {} ({op:?})", run.ops.len()),
            None => "the end of the program (closing its capture, cleanup and leak checks)".to_string(),
        };
        panic!(
            "api fuzzer: seed {} failed at {step}: {}\n  run this program alone with {SEED_VAR}={}",
            run.seed,
            panic_message(payload.as_ref()),
            run.seed
        );
    }
}

/// Runs the program of `seed` and checks that it left nothing behind; under the race detector
/// for the seeds [`race_check`] picks, with a planted race for some of them.
fn run_program(device: Device, range: PriorityRange, log: &TagLog, seed: u64, baseline: (isize, isize, isize)) {
    let run = Run { seed, ops: generate(seed) };
    let race = race_check(seed);
    // On before anything of the program is made, for all of it and every thread of it; off
    // (with its history) when this drops, after the reports were checked, or in a panic.
    let detector = (race != RaceCheck::Off).then(Detector::report);
    // Its own generator: the program's own operations are those it makes without the detector.
    let mut plant_rng = Rng::new(seed ^ 0x0091_a47e_d0ac_e000);
    let plant_at = (race == RaceCheck::Planted).then(|| plant_rng.below(run.ops.len() + 1));
    let plant_seed = plant_rng.next_u64();
    let mut plant: Option<Plant> = None;
    let mut rng = Rng::new(seed ^ 0x00ff_5eed_00ff_5eed);
    let options = if coin(&mut rng) { StreamOptions::non_blocking() } else { StreamOptions::default() };
    let pool = StreamPool::new(device, options, 1 + rng.below(3));
    note("StreamPool::new", &pool);
    let pool = match pool {
        Ok(pool) => pool,
        Err(error) => panic!("api fuzzer: seed {seed}: a pool without a priority is always made: {error}"),
    };
    let mut world = World::new(device, range, &pool, log);
    world.race_checked = detector.is_some();
    let mut next = 0;
    while next < run.ops.len() {
        // The planted race goes before the first operation at the top level (no capture in
        // progress) from its position on.
        if plant.is_none() && plant_at.is_some_and(|at| next >= at) {
            trace(format_args!("planted race, before op #{next}"));
            guarded(&run, next, || plant = Some(world.plant_race(plant_seed)));
        }
        let op = run.ops[next];
        if let Op::BeginCapture { .. } = op {
            next = world.capture_block(&run, next);
        } else {
            guarded(&run, next, || world.exec(op, None));
            next += 1;
        }
    }
    let end = run.ops.len();
    if plant.is_none() && plant_at.is_some() {
        trace(format_args!("planted race, at the end"));
        guarded(&run, end, || plant = Some(world.plant_race(plant_seed)));
    }
    let mut leftovers = None;
    guarded(&run, end, || leftovers = Some(world.finish(&mut rng)));
    drop(pool);
    let Some(leftovers) = leftovers else { unreachable!("finish either returns or panics") };
    guarded(&run, end, || check_leftovers(device, &leftovers, baseline));
    if let Some(detector) = detector {
        // Every free of the program was made (and checked) by now.
        guarded(&run, end, || check_race_reports(plant.as_ref()));
        drop(detector);
    }
}

/// After a program: its work is done, every closure freed, every completion resolved, and the
/// live counts back at the baseline.
fn check_leftovers(device: Device, leftovers: &Leftovers, baseline: (isize, isize, isize)) {
    let synced = device.synchronize();
    note("Device::synchronize", &synced);
    if leftovers.stranded == 0 {
        assert!(synced.is_ok(), "the device synchronizes once no capture is left: {synced:?}");
    } else {
        let _ =
            writeln!(std::io::stderr(), "api fuzzer: {} streams still capturing after the program", leftovers.stranded);
    }
    let freed = |state: &Arc<AtomicU8>| state.load(Ordering::SeqCst) & DROPPED != 0;
    let settled = || {
        live_host_fns() == baseline.2
            && leftovers.tokens.iter().all(freed)
            && leftovers.graph_tokens.iter().all(freed)
            && leftovers.completions.iter().all(Completion::is_complete)
    };
    let describe = || {
        format!(
            "{} live host closures (baseline {}), {} of {} once-closures and {} of {} graph closures (of which {} ran) \
             not freed, {} of {} completions unresolved",
            live_host_fns(),
            baseline.2,
            leftovers.tokens.iter().filter(|state| !freed(state)).count(),
            leftovers.tokens.len(),
            leftovers.graph_tokens.iter().filter(|state| !freed(state)).count(),
            leftovers.graph_tokens.len(),
            leftovers
                .graph_tokens
                .iter()
                .filter(|state| !freed(state) && state.load(Ordering::SeqCst) & RAN != 0)
                .count(),
            leftovers.completions.iter().filter(|completion| !completion.is_complete()).count(),
            leftovers.completions.len(),
        )
    };
    if poll_until(SETTLE, settled).is_none() {
        let passive = describe();
        // Diagnosis: does more CUDA activity make CUDA release them?
        let mut nudges = 0;
        let nudged = poll_until(SETTLE, || {
            nudges += 1;
            let _ = device.synchronize();
            if let Ok(stream) = Stream::new(device, StreamOptions::non_blocking()) {
                let _ = cuda_stream_tests::empty(&stream);
                let _ = stream.synchronize();
            }
            settled()
        });
        panic!(
            "{SETTLE:?} after the program: {passive}; then after {nudges} rounds of further CUDA calls: {} ({})",
            describe(),
            if nudged.is_some() { "released" } else { "still not released" }
        );
    }
    assert_eq!(live_streams(), baseline.0, "live streams are back at the baseline");
    assert_eq!(live_events(), baseline.1, "live events are back at the baseline");
    assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0, "a host closure ran after it was dropped");
    assert_eq!(
        REFUSALS_MISSED.load(Ordering::SeqCst),
        0,
        "a crate call inside a host function was not refused with InsideHostFn"
    );
}

// ---------------------------------------------------------------------------------------------
// Watchdog
// ---------------------------------------------------------------------------------------------

static PROGRESS_SEED: AtomicU64 = AtomicU64::new(0);
static PROGRESS_STEP: AtomicUsize = AtomicUsize::new(0);
static PROGRESS_SINCE_MS: AtomicU64 = AtomicU64::new(0);
static WATCHING: AtomicBool = AtomicBool::new(false);

fn clock_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Records that step `step` of the program of `seed` starts now.
fn progress(seed: u64, step: usize) {
    PROGRESS_SEED.store(seed, Ordering::SeqCst);
    PROGRESS_STEP.store(step, Ordering::SeqCst);
    PROGRESS_SINCE_MS.store(clock_ms(), Ordering::SeqCst);
}

/// Watches the steps while alive: aborts the process, saying where, when one takes longer than
/// `limit` (a hang would otherwise only end at the runner's timeout, with no seed). It makes no
/// CUDA call, so it never disturbs a Global capture.
struct Watchdog;

impl Watchdog {
    fn start(limit: Duration) -> Watchdog {
        WATCHING.store(true, Ordering::SeqCst);
        progress(0, 0);
        let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        let spawned = std::thread::Builder::new().name("api-fuzzer-watchdog".into()).spawn(move || {
            while WATCHING.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(250));
                let stuck = clock_ms().saturating_sub(PROGRESS_SINCE_MS.load(Ordering::SeqCst));
                if WATCHING.load(Ordering::SeqCst) && stuck > limit_ms {
                    let seed = PROGRESS_SEED.load(Ordering::SeqCst);
                    let _ = writeln!(
                        std::io::stderr(),
                        "api fuzzer: HANG: seed {seed}, step #{} has not returned for {limit:?} (step = the op index; \
                         the program's length means its end and cleanup); run it alone with {SEED_VAR}={seed}. \
                         Aborting.",
                        PROGRESS_STEP.load(Ordering::SeqCst),
                    );
                    std::process::abort();
                }
            }
        });
        spawned.expect("the watchdog thread starts");
        Watchdog
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        WATCHING.store(false, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// Every how many seeds a program runs under the race detector (`CUDA_STREAM_FUZZ_RACE_EVERY`,
/// default [`RACE_EVERY`]; 0: none).
fn race_every() -> u64 {
    static EVERY: OnceLock<u64> = OnceLock::new();
    *EVERY.get_or_init(|| match std::env::var(RACE_EVERY_VAR) {
        Ok(every) => {
            every.trim().parse().unwrap_or_else(|_| panic!("{RACE_EVERY_VAR} must be an integer, got {every:?}"))
        }
        Err(_) => RACE_EVERY,
    })
}

fn seeds() -> std::ops::Range<u64> {
    if let Ok(seed) = std::env::var(SEED_VAR) {
        let seed: u64 = seed.trim().parse().unwrap_or_else(|_| panic!("{SEED_VAR} must be an integer, got {seed:?}"));
        return seed..seed + 1;
    }
    let number = |name: &str| std::env::var(name).ok().and_then(|value| value.trim().parse::<u64>().ok());
    let first = number(FIRST_VAR).unwrap_or(0);
    let programs = number(PROGRAMS_VAR).unwrap_or_else(|| scaled(1_000, 50) as u64);
    first..first + programs
}

#[test]
fn random_api_programs_return_typed_results_and_leave_nothing_behind() {
    let device = gpu_or_skip!();
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let range = device.priority_range().expect("the device's priority range");
    let log = TagLog::new(1024).expect("a tag log");
    // Warm up what the crate creates once (per-thread marker events, the device's priority
    // range), so that the baseline is steady.
    {
        let warm = Stream::new(device, StreamOptions::non_blocking()).expect("a stream");
        warm.wait_stream(BuiltinStream::legacy(device)).expect("wait_stream");
        warm.synchronize().expect("synchronize");
        launches::preload_typed_kernels(device);
        // The homes of the buffers captures may hold (a failed capture leaks its hold).
        graph_memory::make_capture_homes(device);
    }
    let baseline = (live_streams(), live_events(), live_host_fns());
    let seeds = seeds();
    let started = Instant::now();
    {
        let _watchdog = Watchdog::start(Duration::from_secs(scaled(60, 600) as u64));
        for seed in seeds.clone() {
            run_program(device, range, &log, seed, baseline);
        }
    }
    let kinds = ERROR_KINDS.lock().unwrap_or_else(PoisonError::into_inner);
    let kinds: Vec<String> = kinds.iter().map(|(kind, count)| format!("{kind} x{count}")).collect();
    eprintln!(
        "api fuzzer: {} programs (seeds {}..{}), {} calls, {} Ok, {} typed errors, {} host closures run, {} violations",
        seeds.end - seeds.start,
        seeds.start,
        seeds.end,
        CALLS.load(Ordering::SeqCst),
        OKS.load(Ordering::SeqCst),
        ERRORS.load(Ordering::SeqCst),
        HOST_RUNS.load(Ordering::SeqCst),
        VIOLATIONS.load(Ordering::SeqCst),
    );
    eprintln!(
        "api fuzzer: {:.1?}; {} ops skipped as unsafe to run then; {} host callbacks saw an error status; errors: {}",
        started.elapsed(),
        SKIPPED.load(Ordering::SeqCst),
        CALLBACK_ERRORS.load(Ordering::SeqCst),
        if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") },
    );
    let every = race_every();
    eprintln!(
        "api fuzzer: race detector: {} programs under RaceMode::Report ({}), no race reported among the \
         operations the crate ordered; {} planted races, {} reported",
        RACE_PROGRAMS.load(Ordering::SeqCst),
        if every == 0 {
            "none: CUDA_STREAM_FUZZ_RACE_EVERY=0".to_string()
        } else {
            format!("seeds divisible by {every}")
        },
        PLANTS.load(Ordering::SeqCst),
        PLANTS_REPORTED.load(Ordering::SeqCst),
    );
    assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0, "no host closure may run after it was dropped");
    assert_eq!(CALLS.load(Ordering::SeqCst), OKS.load(Ordering::SeqCst) + ERRORS.load(Ordering::SeqCst));
    assert_eq!(PLANTS.load(Ordering::SeqCst), PLANTS_REPORTED.load(Ordering::SeqCst), "every planted race is reported");
}

#[test]
fn programs_are_reproducible_and_use_every_operation() {
    let mut kinds = std::collections::HashSet::new();
    for seed in 0..500 {
        let ops = generate(seed);
        assert_eq!(ops, generate(seed), "seed {seed} always gives the same program");
        assert!((40..=80).contains(&ops.len()), "seed {seed}: {} operations", ops.len());
        kinds.extend(ops.iter().map(std::mem::discriminant));
    }
    assert_eq!(kinds.len(), OP_KINDS, "the generator uses every kind of operation");
}
