//! The completion-latency benchmark: how long after a stream's work ends does the task waiting
//! for it see that it has ended?
//!
//! Method: a kernel waits for a flag in mapped host memory. The waiter is armed, the host
//! sleeps 3 ms, takes a timestamp and sets the flag; the kernel exits, and the waiter takes a
//! timestamp when it observes the completion. Latency = observed − set: it includes the flag's
//! trip to the GPU and the kernel's exit, the same for every variant. Variants, interleaved
//! (the order rotates every repetition), each waiting on its own thread:
//!
//! 1. floor: a thread spinning on `cudaEventQuery` (raw FFI) of an event recorded after the
//!    kernel;
//! 2. the floor for a parked waiter: a thread spinning on that query unparks a parked thread
//!    (what any waker of a parked thread pays on top of noticing the completion);
//! 3. a raw C++ host function (`cudaLaunchHostFunc`, `kernels/bench_floor.cu`) that sets a flag
//!    the thread spins on;
//! 4. `StreamRef::completion()` awaited with `block_on` (a parked thread, woken), the reactor
//!    waiting as the device does (`ReactorWait::AsDevice`, the default: under CUDA's default
//!    schedule it spins while the future is pending);
//! 5. `Event::completion()` awaited the same way;
//! 6. as 4, awaited by a busy executor: a thread that spins on a flag its waker sets (as an
//!    executor busy with other tasks checks its queue) and then polls; this is when the future
//!    resolves, without the parked thread's wake-up;
//! 7. as 4, with the reactor backing off (`ReactorWait::BackOff` with the default hot window:
//!    what a device set to `cudaDeviceScheduleBlockingSync` gets, little CPU while waiting);
//! 8. to 10. the **flag-woken** prototype (issue 26, part 4; local to this benchmark, the
//!    crate's reactor is unchanged): instead of an event, the stream writes a sequence number
//!    into a word of mapped pinned memory after the work (`cuStreamWriteValue32`, through
//!    `StreamRef::write_value_raw`: the design of NVIDIA's cuda-async reactor), and a thread
//!    of its own (`flag-reactor`) polls the words with plain atomic loads, no CUDA call, and
//!    wakes the wakers. Awaited as 4 (block_on, spinning), as 6 (busy executor, spinning) and
//!    as 7 (block_on, backing off with the same hot window and naps as the crate's reactor).
//!
//! Prints a table (medians and min..max of 50 repetitions, µs, and the CPU time per repetition
//! of the polling thread: the crate's reactor, or the flag reactor for 8 to 10, each read from
//! `/proc/self/task/*/stat`, at the kernel's 10 ms tick), the flag-against-event comparison at
//! equal pacing (latency and CPU side by side: the issue adopts the flag design only if it is
//! faster at equal CPU cost), both reactors' CPU time while idle, and writes them as JSON to
//! `$BENCH_OUT/bench-completion-latency.json` (default `target/`). `--quick` runs 10
//! repetitions. The goal: within 2× of the floor; the parked variants are also compared with
//! the parked floor.

use cuda_stream::completion::{
    DEFAULT_HOT_WINDOW, REACTOR_THREAD_NAME, ReactorWait, pending_completions, reactor_wait, set_reactor_wait,
};
use cuda_stream::{Event, MappedWords, Stream, StreamOptions, StreamRef, check, sys};
use cuda_stream_tests::{MappedFlag, Stats, block_on, poll_until, thread_cpu_ticks};
use std::ffi::c_void;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

unsafe extern "C" {
    fn cs_bench_set_flag_host_fn(flag: *mut c_void);
}

/// How long the kernel is held before the flag is set.
const HELD: Duration = Duration::from_millis(3);
/// The goal: every variant of ours within this factor of the floor.
const GOAL: f64 = 2.0;

#[derive(Copy, Clone, PartialEq)]
enum Variant {
    Floor,
    FloorParked,
    HostFn,
    Stream,
    Event,
    StreamBusyExecutor,
    StreamBackOff,
    Flag,
    FlagBusyExecutor,
    FlagBackOff,
}

impl Variant {
    const ALL: [Variant; 10] = [
        Variant::Floor,
        Variant::FloorParked,
        Variant::HostFn,
        Variant::Stream,
        Variant::Event,
        Variant::StreamBusyExecutor,
        Variant::StreamBackOff,
        Variant::Flag,
        Variant::FlagBusyExecutor,
        Variant::FlagBackOff,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Floor => "floor: thread spinning on cudaEventQuery",
            Variant::FloorParked => "parked floor: the spinning thread unparks",
            Variant::HostFn => "raw C++ host fn, thread spinning on its flag",
            Variant::Stream => "StreamRef::completion (block_on)",
            Variant::Event => "Event::completion (block_on)",
            Variant::StreamBusyExecutor => "StreamRef::completion (busy executor)",
            Variant::StreamBackOff => "StreamRef::completion, backing off (block_on)",
            Variant::Flag => "flag-woken prototype (block_on)",
            Variant::FlagBusyExecutor => "flag-woken prototype (busy executor)",
            Variant::FlagBackOff => "flag-woken prototype, backing off (block_on)",
        }
    }

    /// The event-polling variant this flag variant is compared with (same executor, same pace).
    fn event_counterpart(self) -> Option<Variant> {
        match self {
            Variant::Flag => Some(Variant::Stream),
            Variant::FlagBusyExecutor => Some(Variant::StreamBusyExecutor),
            Variant::FlagBackOff => Some(Variant::StreamBackOff),
            _ => None,
        }
    }

    fn ours(self) -> bool {
        !matches!(self, Variant::Floor | Variant::FloorParked | Variant::HostFn)
    }

    /// Whether the waiting thread parks until it is woken.
    fn parks(self) -> bool {
        matches!(
            self,
            Variant::FloorParked
                | Variant::Stream
                | Variant::Event
                | Variant::StreamBackOff
                | Variant::Flag
                | Variant::FlagBackOff
        )
    }
}

/// What the variants share: the stream, and the events they record on it.
struct Bench {
    stream: Stream,
    raw_event: sys::cudaEvent_t,
    event: Arc<Event>,
    flags: FlagReactor,
}

// SAFETY: `raw_event` is a CUDA event handle, which any thread may use; it lives as long as
// the `Bench` (destroyed in `main` after every waiter has joined).
unsafe impl Sync for Bench {}

/// One repetition of `variant`: the latency, and the reactor's CPU ticks meanwhile.
fn measure(bench: &Bench, variant: Variant) -> (Duration, u64) {
    let stream = &bench.stream;
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(stream, &flag, Duration::from_secs(1)).unwrap();
    let host_fn_flag = AtomicI32::new(0);
    match variant {
        Variant::Floor | Variant::FloorParked => {
            // SAFETY: both handles are live; the event and the stream are of one device.
            check(unsafe { sys::cudaEventRecord(bench.raw_event, stream.as_raw()) }, "cudaEventRecord").unwrap();
        }
        Variant::HostFn => {
            let data = (&raw const host_fn_flag).cast_mut().cast::<c_void>();
            // SAFETY: the host function stores to the `int` behind `data`, an `AtomicI32` (the
            // same layout) that outlives it: this function waits for the store below.
            let code = unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(cs_bench_set_flag_host_fn), data) };
            check(code, "cudaLaunchHostFunc").unwrap();
        }
        Variant::Event => stream.record(&bench.event).unwrap(),
        Variant::Stream | Variant::StreamBusyExecutor | Variant::StreamBackOff => {}
        Variant::Flag | Variant::FlagBusyExecutor | Variant::FlagBackOff => {}
    }
    let wait = match variant {
        Variant::StreamBackOff | Variant::FlagBackOff => ReactorWait::BackOff { hot_window: DEFAULT_HOT_WINDOW },
        _ => ReactorWait::AsDevice,
    };
    let previous_wait = set_reactor_wait(wait);
    // The flag reactor paces itself as the crate's does under the default on this device
    // (Auto: spinning), or backs off with the same window.
    bench.flags.set_back_off(variant == Variant::FlagBackOff);
    let ticks_before = reactor_ticks();
    let (armed, is_armed) = mpsc::channel();
    let (set, observed) = std::thread::scope(|scope| {
        let waiter = scope.spawn(|| match variant {
            Variant::Floor => {
                armed.send(()).unwrap();
                spin_until_complete(bench.raw_event)
            }
            Variant::FloorParked => {
                let (complete, waiter) = (AtomicBool::new(false), std::thread::current());
                std::thread::scope(|inner| {
                    inner.spawn(|| {
                        spin_until_complete(bench.raw_event);
                        complete.store(true, Ordering::Release);
                        waiter.unpark();
                    });
                    armed.send(()).unwrap();
                    while !complete.load(Ordering::Acquire) {
                        std::thread::park();
                    }
                    Instant::now()
                })
            }
            Variant::HostFn => {
                armed.send(()).unwrap();
                while host_fn_flag.load(Ordering::Acquire) == 0 {
                    std::hint::spin_loop();
                }
                Instant::now()
            }
            Variant::StreamBusyExecutor => {
                let done = stream.completion();
                armed.send(()).unwrap();
                busy_executor(done).unwrap();
                Instant::now()
            }
            Variant::Stream | Variant::StreamBackOff | Variant::Event => {
                let done = if variant == Variant::Event { bench.event.completion() } else { stream.completion() };
                armed.send(()).unwrap();
                block_on(done).unwrap();
                Instant::now()
            }
            Variant::Flag | Variant::FlagBackOff => {
                let done = bench.flags.completion(stream);
                armed.send(()).unwrap();
                block_on(done);
                Instant::now()
            }
            Variant::FlagBusyExecutor => {
                let done = bench.flags.completion(stream);
                armed.send(()).unwrap();
                busy_executor(done);
                Instant::now()
            }
        });
        is_armed.recv().unwrap();
        std::thread::sleep(HELD);
        let set = Instant::now();
        flag.set();
        (set, waiter.join().unwrap())
    });
    let ticks = reactor_ticks() - ticks_before;
    set_reactor_wait(previous_wait);
    stream.synchronize().unwrap();
    (observed.saturating_duration_since(set), ticks)
}

/// Spins on `cudaEventQuery` of `event` until it reports completion; returns when it did.
fn spin_until_complete(event: sys::cudaEvent_t) -> Instant {
    loop {
        // SAFETY: a live event (the `Bench`'s, destroyed after every waiter has joined).
        let code = unsafe { sys::cudaEventQuery(event) };
        if code != sys::cudaError::cudaErrorNotReady {
            let observed = Instant::now();
            check(code, "cudaEventQuery").unwrap();
            return observed;
        }
    }
}

/// Runs `future` to completion on this thread the way an executor busy with other tasks does:
/// its waker sets a flag, which the thread checks between its (here: no) other tasks, and it
/// polls the future once the flag is set. No thread is parked or woken.
fn busy_executor<F: Future>(future: F) -> F::Output {
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::Release);
        }
    }
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        while !flag.0.swap(false, Ordering::Acquire) {
            std::hint::spin_loop();
        }
    }
}

/// The polling threads' CPU ticks so far: the crate's reactor and the flag reactor (0 for one
/// not started). Each variant keeps one of them busy; the other is parked, at no CPU cost.
fn reactor_ticks() -> u64 {
    thread_cpu_ticks(REACTOR_THREAD_NAME).unwrap_or(0) + thread_cpu_ticks(FLAG_REACTOR_THREAD).unwrap_or(0)
}

/// The flag reactor's thread name (15 bytes at most, as Linux keeps).
const FLAG_REACTOR_THREAD: &str = "flag-reactor";
/// Words of the flag reactor: completions pending at once, at most.
const FLAG_SLOTS: usize = 64;

/// The flag-woken completion prototype: each completion owns a slot (a word of mapped pinned
/// memory) until it resolves; the stream writes the slot's next sequence number after the work
/// (`cuStreamWriteValue32`); one thread polls the pending slots with atomic loads (no CUDA
/// call) and wakes the wakers of those whose number arrived. Its pacing copies the crate's
/// reactor: spinning while anything is pending, or backing off (spin through the hot window
/// after each arrival or resolution, yield as long again, then nap a sixteenth of the time
/// since, 20 µs to 1 ms, woken early by an arrival); parked at no CPU cost when idle.
struct FlagReactor {
    shared: Arc<FlagShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct FlagShared {
    /// The slots, written by streams, read by the reactor thread.
    words: MappedWords<u32>,
    /// Free slots, with the sequence number each was last given.
    slots: Mutex<Vec<(usize, u32)>>,
    registry: Mutex<FlagRegistry>,
    arrived: Condvar,
    back_off: AtomicBool,
    stop: AtomicBool,
}

struct FlagRegistry {
    incoming: Vec<FlagEntry>,
    parked: bool,
}

struct FlagEntry {
    slot: usize,
    target: u32,
    signal: Arc<FlagSignal>,
}

/// A completion's state: resolved, and the waker to call.
#[derive(Default)]
struct FlagSignal {
    state: Mutex<(bool, Option<Waker>)>,
}

/// A future that resolves when the stream's write of its slot's number is seen.
struct FlagCompletion {
    signal: Arc<FlagSignal>,
}

impl Future for FlagCompletion {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.signal.state.lock().unwrap();
        if state.0 {
            return Poll::Ready(());
        }
        if !state.1.as_ref().is_some_and(|waker| waker.will_wake(cx.waker())) {
            state.1 = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl FlagReactor {
    fn new() -> FlagReactor {
        let shared = Arc::new(FlagShared {
            words: MappedWords::new(FLAG_SLOTS).unwrap(),
            slots: Mutex::new((0..FLAG_SLOTS).map(|slot| (slot, 0)).collect()),
            registry: Mutex::new(FlagRegistry { incoming: Vec::new(), parked: false }),
            arrived: Condvar::new(),
            back_off: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let polled = Arc::clone(&shared);
        let thread =
            std::thread::Builder::new().name(FLAG_REACTOR_THREAD.to_string()).spawn(move || polled.run()).unwrap();
        FlagReactor { shared, thread: Some(thread) }
    }

    fn set_back_off(&self, back_off: bool) {
        self.shared.back_off.store(back_off, Ordering::Relaxed);
    }

    /// A future that resolves when the work enqueued on `stream` so far has completed: the
    /// stream writes the slot's next number after it, and the reactor watches for it.
    fn completion(&self, stream: &StreamRef) -> FlagCompletion {
        let (slot, last) = self.shared.slots.lock().unwrap().pop().expect("a free flag slot");
        let target = last.wrapping_add(1);
        // SAFETY: a word of `words`, which lives until every stream has finished (the reactor
        // is dropped after the benchmark's streams are synchronized); the host only reads it,
        // atomically.
        unsafe { stream.write_value_raw(self.shared.words.as_ptr().add(slot), target) }.unwrap();
        let signal = Arc::new(FlagSignal::default());
        let mut registry = self.shared.registry.lock().unwrap();
        registry.incoming.push(FlagEntry { slot, target, signal: Arc::clone(&signal) });
        if registry.parked {
            self.shared.arrived.notify_one();
        }
        FlagCompletion { signal }
    }
}

impl Drop for FlagReactor {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.arrived.notify_one();
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

impl FlagShared {
    fn run(&self) {
        let mut pending: Vec<FlagEntry> = Vec::new();
        let mut woken: Vec<Waker> = Vec::new();
        let mut active = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            {
                let mut registry = self.registry.lock().unwrap();
                while registry.incoming.is_empty() && pending.is_empty() && !self.stop.load(Ordering::SeqCst) {
                    registry.parked = true;
                    registry = self.arrived.wait(registry).unwrap();
                    registry.parked = false;
                }
                if !registry.incoming.is_empty() {
                    pending.append(&mut registry.incoming);
                    active = Instant::now();
                }
            }
            let words = self.words.words();
            let mut index = 0;
            while index < pending.len() {
                let entry = &pending[index];
                // The stream's write is the slot's next number (cyclic, as a GEQ wait reads it).
                if (words[entry.slot].load(Ordering::Acquire).wrapping_sub(entry.target) as i32) < 0 {
                    index += 1;
                    continue;
                }
                let entry = pending.swap_remove(index);
                self.slots.lock().unwrap().push((entry.slot, entry.target));
                let mut state = entry.signal.state.lock().unwrap();
                state.0 = true;
                woken.extend(state.1.take());
                active = Instant::now();
            }
            for waker in woken.drain(..) {
                waker.wake();
            }
            if pending.is_empty() {
                continue;
            }
            let since = active.elapsed();
            if !self.back_off.load(Ordering::Relaxed) || since < DEFAULT_HOT_WINDOW {
                std::hint::spin_loop();
            } else if since < DEFAULT_HOT_WINDOW * 2 {
                std::thread::yield_now();
            } else {
                let nap = (since / 16).clamp(Duration::from_micros(20), Duration::from_millis(1));
                let registry = self.registry.lock().unwrap();
                if registry.incoming.is_empty() {
                    let mut registry = registry;
                    registry.parked = true;
                    registry = self.arrived.wait_timeout(registry, nap).unwrap().0;
                    registry.parked = false;
                }
            }
        }
    }
}

// The words are touched only atomically by the host; the reactor's state is behind locks.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<FlagShared>();
    shared::<AtomicU32>();
};

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let reps = if quick { 10 } else { 50 };
    let Some(device) = cuda_stream_tests::gpu::example_device("completion latency benchmark") else { return };
    assert_eq!(reactor_wait(), ReactorWait::AsDevice, "the default setting");
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut raw_event = std::ptr::null_mut();
    let _current = device.make_current().unwrap();
    // SAFETY: a valid out-pointer; destroyed at the end of `main`.
    check(unsafe { sys::cudaEventCreateWithFlags(&mut raw_event, sys::cudaEventDisableTiming) }, "cudaEventCreate")
        .unwrap();
    let event = Arc::new(Event::new(device, cuda_stream::EventFlags::default()).unwrap());
    let bench = Bench { stream, raw_event, event, flags: FlagReactor::new() };
    let per_second = cuda_stream_tests::clock_ticks_per_second();
    let schedule = match cuda_stream_tests::device_schedule_flag() {
        sys::cudaDeviceScheduleAuto => "Auto",
        sys::cudaDeviceScheduleSpin => "Spin",
        sys::cudaDeviceScheduleYield => "Yield",
        _ => "BlockingSync",
    };

    for variant in Variant::ALL {
        measure(&bench, variant); // warm-up
    }
    let mut samples: Vec<(Vec<f64>, u64)> = Variant::ALL.iter().map(|_| (Vec::new(), 0)).collect();
    for rep in 0..reps {
        for turn in 0..Variant::ALL.len() {
            let index = (rep + turn) % Variant::ALL.len();
            let (latency, ticks) = measure(&bench, Variant::ALL[index]);
            samples[index].0.push(latency.as_secs_f64() * 1e6);
            samples[index].1 += ticks;
        }
    }

    println!(
        "completion latency on {} (driver {}): work ends (a held kernel released after {HELD:?}) -> the waiting \
         task observes it; {reps} repetitions, interleaved, µs",
        device.name().unwrap(),
        cuda_stream::driver_version().unwrap()
    );
    println!("device schedule: cudaDeviceSchedule{schedule}; goal: each of ours within {GOAL}x of the floor");
    println!(
        "{:<46} {:>9} {:>9} {:>9}   {:<18} {:>18}",
        "variant", "median", "/floor", "/parked", "min..max", "polling CPU ms/rep"
    );
    let stats: Vec<Stats> = samples.iter().map(|(latencies, _)| Stats::of(latencies.clone())).collect();
    let median_of = |wanted| stats[Variant::ALL.iter().position(|&variant| variant == wanted).unwrap()].median;
    let (floor, parked_floor) = (median_of(Variant::Floor), median_of(Variant::FloorParked));
    let mut json = Vec::new();
    for ((variant, s), (_, ticks)) in Variant::ALL.iter().zip(&stats).zip(&samples) {
        let over = s.median / floor;
        let over_parked = variant.parks().then(|| s.median / parked_floor);
        let cpu_ms = *ticks as f64 / per_second * 1e3 / reps as f64;
        let verdict = match (variant.ours(), over <= GOAL) {
            (false, _) => "",
            (true, true) => "  goal met",
            (true, false) => "  goal NOT met",
        };
        println!(
            "{:<46} {:>9.1} {:>9.2} {:>9}   {:<18} {:>18.3}{verdict}",
            variant.name(),
            s.median,
            over,
            over_parked.map_or("-".to_string(), |over| format!("{over:.2}")),
            format!("{:.1}..{:.1}", s.min, s.max),
            cpu_ms
        );
        json.push(format!(
            "{{\"variant\":\"{}\",\"median_us\":{:.2},\"min_us\":{:.2},\"max_us\":{:.2},\"over_floor\":{:.3},\"over_parked_floor\":{},\"reactor_cpu_ms_per_rep\":{:.4}}}",
            variant.name(),
            s.median,
            s.min,
            s.max,
            over,
            over_parked.map_or("null".to_string(), |over| format!("{over:.3}")),
            cpu_ms
        ));
    }

    // The question: the flag design against the event reactor, at equal pacing.
    println!("flag-woken against event-polling, same executor and pace (adopt the flag only if faster at equal CPU):");
    let cpu_of = |index: usize| samples[index].1 as f64 / per_second * 1e3 / reps as f64;
    let mut comparison = Vec::new();
    for (flag_index, flag_variant) in Variant::ALL.iter().enumerate() {
        let Some(event_variant) = flag_variant.event_counterpart() else { continue };
        let event_index = Variant::ALL.iter().position(|&variant| variant == event_variant).unwrap();
        let (flag_median, event_median) = (stats[flag_index].median, stats[event_index].median);
        let (flag_cpu, event_cpu) = (cpu_of(flag_index), cpu_of(event_index));
        println!(
            "  {:<46} {:>7.1} µs vs {:>7.1} µs ({:+.1} µs); CPU {:.3} vs {:.3} ms/rep",
            event_variant.name(),
            flag_median,
            event_median,
            flag_median - event_median,
            flag_cpu,
            event_cpu
        );
        comparison.push(format!(
            "{{\"flag\":\"{}\",\"event\":\"{}\",\"flag_median_us\":{flag_median:.2},\"event_median_us\":{event_median:.2},\"flag_cpu_ms_per_rep\":{flag_cpu:.4},\"event_cpu_ms_per_rep\":{event_cpu:.4}}}",
            flag_variant.name(),
            event_variant.name()
        ));
    }

    // The reactor idle: nothing pending, then one second of nothing.
    let settled = poll_until(Duration::from_secs(5), || pending_completions() == 0).is_some();
    assert!(settled, "futures still pending after the benchmark");
    std::thread::sleep(Duration::from_millis(50));
    let before = reactor_ticks();
    let idle = Duration::from_secs(1);
    std::thread::sleep(idle);
    let idle_ticks = reactor_ticks() - before;
    println!(
        "reactor CPU while idle (both polling threads): {idle_ticks} clock ticks ({:.1} ms) in {idle:?}",
        idle_ticks as f64 / per_second * 1e3
    );

    drop(bench.flags);
    drop(bench.event);
    drop(bench.stream);
    // SAFETY: created above; every waiter that used it has joined.
    check(unsafe { sys::cudaEventDestroy(bench.raw_event) }, "cudaEventDestroy").unwrap();
    let document = format!(
        "{{\"device\":\"{}\",\"driver\":{},\"schedule\":\"{schedule}\",\"held_ms\":{},\"repetitions\":{reps},\"goal_over_floor\":{GOAL},\"variants\":[\n{}\n],\"flag_against_event\":[\n{}\n],\"idle_reactor_ticks_per_s\":{idle_ticks}}}\n",
        device.name().unwrap(),
        cuda_stream::driver_version().unwrap(),
        HELD.as_secs_f64() * 1e3,
        json.join(",\n"),
        comparison.join(",\n")
    );
    let path = cuda_stream_tests::bench::write_json("bench-completion-latency.json", &document);
    println!("json: {}", path.display());
}
