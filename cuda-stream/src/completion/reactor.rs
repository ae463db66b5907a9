//! The reactor that wakes [`Completion`](crate::Completion)s: one thread per process, started
//! on the first future, that polls the events the futures wait on with `cuEventQuery`. The
//! design, its costs and its guarantees are in the [`completion`](crate::completion) module
//! docs; this is the mechanism.
//!
//! Locks, never nested except as written: `REGISTRY` (arrivals, the reactor's parking),
//! `POLLING` (held by the reactor around every CUDA call it makes, taken once by the exit hook)
//! then `FREE` (the free list of internal events) or a future's `Signal` (resolved during a
//! pass). A dropped pending future takes no lock: it waits for the pass it saw running (the
//! pass count of [`reactor_passes`], odd during a pass), so neither the reactor nor a stream of
//! drops can keep the other out.
//!
//! A child process made by `fork` has no reactor thread, and may have inherited these locks
//! held by it: a `pthread_atfork` hook marks the child, whose futures then resolve at once
//! with [`Error::ReactorUnavailable`], and whose drops and exit take no lock.

use super::signal::Signal;
use crate::call::reactor_passes;
use crate::device::Device;
use crate::event::Event;
use crate::ffi::error::{Error, Result};
use crate::sys;
use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The name of the reactor thread, as tools such as `top -H` and `/proc/self/task/*/comm` show
/// it (Linux keeps 15 bytes of a thread's name).
pub const REACTOR_THREAD_NAME: &str = "cuda-reactor";

/// The hot window of [`ReactorWait::BackOff`] for the futures of a device that blocks
/// (`cudaDeviceScheduleBlockingSync`) under [`ReactorWait::AsDevice`].
pub const DEFAULT_HOT_WINDOW: Duration = Duration::from_micros(50);

/// How the reactor waits between its queries while completion futures are pending; with none
/// pending it always blocks, at no CPU cost. Set with [`set_reactor_wait`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReactorWait {
    /// The default: the reactor waits as each pending future's device waits in its own
    /// synchronize, by the device's scheduling flag
    /// ([`cudaSetDeviceFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html),
    /// read with `cuDevicePrimaryCtxGetState` when a future arrives):
    /// * `cudaDeviceScheduleAuto` (CUDA's default) and `cudaDeviceScheduleSpin`: as
    ///   [`ReactorWait::Spin`]. (Auto spins while the process has no more CUDA contexts than
    ///   logical processors, which is the case this crate serves; it yields otherwise.)
    /// * `cudaDeviceScheduleYield`: queries without pause too, yielding the core between
    ///   passes.
    /// * `cudaDeviceScheduleBlockingSync`: [`ReactorWait::BackOff`] with
    ///   [`DEFAULT_HOT_WINDOW`].
    ///
    /// The most eager pending future sets the pace. So a pending future costs about the CPU a
    /// `synchronize` of its device costs: a busy core where that spins; where it blocks, the
    /// back-off's cost (about 100 µs of one core per arrival or resolution, a whole core from
    /// about 10,000 a second, and up to a thousand wake-ups a second while anything is
    /// pending). The flags read are the primary context's, the context of every event this
    /// crate creates.
    AsDevice,
    /// Queries without pause while anything is pending: the lowest latency, and one busy core
    /// for as long as a future waits.
    Spin,
    /// Spins through `hot_window` after each arrival or resolution, yields for as long again,
    /// then naps a sixteenth of the time since that activity (20 µs growing to 1 ms), woken
    /// early by an arrival. Work that completes inside the window is seen within about a
    /// microsecond; a future that waited `t` longer sees its completion about `t / 16` late,
    /// at most about 1 ms. The CPU cost: up to twice the window of one core per arrival or
    /// resolution. Windows saturate at `u64::MAX - 2` nanoseconds (about 584 years).
    BackOff {
        /// How long the reactor spins after each arrival or resolution.
        hot_window: Duration,
    },
}

/// The back-off naps: a sixteenth of the time since the last activity, within these bounds.
const NAP_DIVISOR: u32 = 16;
const SHORTEST_NAP: Duration = Duration::from_micros(20);
const LONGEST_NAP: Duration = Duration::from_millis(1);

/// How many idle internal events the free list keeps, all devices together.
const FREE_EVENTS: usize = 64;

/// The [`ReactorWait`] in force, as [`ReactorWait::encode`] packs it.
static WAIT: AtomicU64 = AtomicU64::new(ReactorWait::AS_DEVICE);
/// Futures registered and not yet resolved or found dropped.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Futures registered so far, counted under `REGISTRY`: a reactor with futures pending looks at
/// the registry only when this moved, instead of locking it between every two passes (where a
/// thread registering a future would meet it).
static ARRIVALS: AtomicU64 = AtomicU64::new(0);
static REGISTRY: Mutex<Registry> = Mutex::new(Registry { incoming: Vec::new(), parked: false, started: false });
/// Signalled when something arrives while the reactor is parked, or the wait setting changes.
static ARRIVED: Condvar = Condvar::new();
/// Held by the reactor around each polling pass, the only place it calls CUDA.
static POLLING: Mutex<()> = Mutex::new(());
/// Set by the exit hook: the reactor makes no CUDA call any more.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Idle internal events, for [`internal_event`].
static FREE: Mutex<Vec<Event>> = Mutex::new(Vec::new());

/// What the reactor shares with the threads that register futures.
struct Registry {
    /// Registered since the reactor last looked.
    incoming: Vec<Entry>,
    /// Whether the reactor waits on `ARRIVED` (idle, or napping in its back-off).
    parked: bool,
    /// Whether the reactor thread runs.
    started: bool,
}

/// One pending future: the event it waits on, and its signal.
struct Entry {
    watched: Watched,
    signal: Arc<Signal>,
    /// The outcome of this pass's query, once there is one.
    outcome: Option<Result<()>>,
    /// How its device waits, read at the reactor's first pass over it.
    schedule: Option<Schedule>,
}

/// How a device's synchronize waits, by its `cudaDeviceSchedule*` flag; the most eager first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Schedule {
    Spin,
    Yield,
    Block,
}

impl Schedule {
    /// The device's flag, read from its primary context; `Block` (the cheapest in CPU) if it
    /// cannot be read.
    fn of(device: Device) -> Schedule {
        let flags = crate::ffi::driver::primary_context_state(device.ordinal())
            .map_or(sys::cudaDeviceScheduleBlockingSync, |(flags, _)| flags);
        match flags & sys::cudaDeviceScheduleMask {
            sys::cudaDeviceScheduleBlockingSync => Schedule::Block,
            sys::cudaDeviceScheduleYield => Schedule::Yield,
            _ => Schedule::Spin,
        }
    }
}

/// The event a future waits on, owned by the reactor's entry so that it stays valid for every
/// query the reactor makes.
#[derive(Debug)]
pub(crate) enum Watched {
    /// An internal event, recorded by [`StreamRef::completion`](crate::StreamRef::completion),
    /// back to the free list once the entry is gone.
    Internal(Event),
    /// The user's event ([`Event::completion`]), kept alive by this clone of the `Arc`.
    User(Arc<Event>),
}

impl Watched {
    fn event(&self) -> &Event {
        match self {
            Watched::Internal(event) => event,
            Watched::User(event) => event,
        }
    }

    /// Gives the event back: to the free list, or the `Arc` clone dropped.
    fn release(self) {
        match self {
            Watched::Internal(event) => recycle(event),
            Watched::User(event) => drop(event),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ReactorWait {
    const AS_DEVICE: u64 = u64::MAX;
    const SPIN: u64 = u64::MAX - 1;

    /// One word: the two named settings at the top of the range, else the window in ns.
    fn encode(self) -> u64 {
        match self {
            ReactorWait::AsDevice => ReactorWait::AS_DEVICE,
            ReactorWait::Spin => ReactorWait::SPIN,
            ReactorWait::BackOff { hot_window } => {
                u64::try_from(hot_window.as_nanos()).unwrap_or(u64::MAX).min(ReactorWait::SPIN - 1)
            }
        }
    }

    fn decode(word: u64) -> ReactorWait {
        match word {
            ReactorWait::AS_DEVICE => ReactorWait::AsDevice,
            ReactorWait::SPIN => ReactorWait::Spin,
            nanos => ReactorWait::BackOff { hot_window: Duration::from_nanos(nanos) },
        }
    }
}

/// How the reactor waits now (see [`set_reactor_wait`]).
pub fn reactor_wait() -> ReactorWait {
    ReactorWait::decode(WAIT.load(Ordering::Relaxed))
}

/// Sets how the reactor waits between its queries while completion futures are pending, for
/// every future of the process, and returns the previous setting. The default is
/// [`ReactorWait::AsDevice`]: a pending future costs the CPU a synchronize of its device
/// costs. Takes effect at once, also for futures already pending.
pub fn set_reactor_wait(wait: ReactorWait) -> ReactorWait {
    let previous = WAIT.swap(wait.encode(), Ordering::Relaxed);
    if lock(&REGISTRY).parked {
        ARRIVED.notify_one();
    }
    ReactorWait::decode(previous)
}

/// How many completion futures the reactor watches: registered and not yet resolved. A future
/// dropped before it resolves is counted until the reactor's next pass (at most about 1 ms
/// later), which then releases its event.
pub fn pending_completions() -> usize {
    PENDING.load(Ordering::SeqCst)
}

/// An internal event of `device` to record for a completion: an idle one from the free list,
/// or a new one.
///
/// Reuse is sound because an event reaches the free list only once nothing can query it any
/// more (the reactor dropped its entry, or the record failed before it was registered), and a
/// reused event is popped by one caller, which records it before registering it. These events
/// are never exposed, so no stream waits on them and a new record changes nobody's view.
pub(crate) fn internal_event(device: Device) -> Result<Event> {
    refuse_in_forked_child()?;
    let reused = {
        let mut free = lock(&FREE);
        free.iter().rposition(|event| event.device() == device).map(|index| free.swap_remove(index))
    };
    match reused {
        Some(event) => Ok(event),
        None => Event::internal(device),
    }
}

/// Returns an internal event to the free list, or destroys it when the list is full.
pub(crate) fn recycle(event: Event) {
    let mut free = lock(&FREE);
    if free.len() < FREE_EVENTS {
        free.push(event);
    } else {
        drop(free);
        drop(event);
    }
}

/// Hands `watched` to the reactor, which resolves `signal` when the event completes (or fails),
/// starting the reactor thread on first use. Registered under the lock the reactor takes
/// arrivals under, and it is woken if parked: no arrival is missed.
///
/// # Errors
/// [`Error::ReactorUnavailable`] if the thread cannot be started; `watched` is released.
pub(crate) fn watch(watched: Watched, signal: Arc<Signal>) -> Result<()> {
    refuse_in_forked_child()?;
    let mut registry = lock(&REGISTRY);
    if !registry.started {
        if let Err(error) = start() {
            drop(registry);
            watched.release();
            return Err(Error::ReactorUnavailable(error.kind()));
        }
        registry.started = true;
    }
    registry.incoming.push(Entry { watched, signal, outcome: None, schedule: None });
    ARRIVALS.fetch_add(1, Ordering::Release);
    PENDING.fetch_add(1, Ordering::SeqCst);
    if registry.parked {
        ARRIVED.notify_one();
    }
    Ok(())
}

/// [`Error::ReactorUnavailable`] in a child process made by `fork` after the reactor started
/// (checked before any lock: the reactor may have held them when the process forked).
fn refuse_in_forked_child() -> Result<()> {
    if reactor_passes::in_forked_child() {
        return Err(Error::ReactorUnavailable(std::io::ErrorKind::Unsupported));
    }
    Ok(())
}

unsafe extern "C" {
    /// The C library's `atexit`: `callback` runs at `exit`, before the handlers registered
    /// earlier (CUDA's own teardown among them, registered when CUDA initialized).
    fn atexit(callback: extern "C" fn()) -> c_int;
    /// POSIX `pthread_atfork`: `child` runs in the child process after a `fork`.
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

/// Runs at process exit, before CUDA tears itself down: waits for the reactor's polling pass in
/// progress, if any, and stops it from making another CUDA call. In a forked child (no reactor,
/// `POLLING` perhaps inherited locked) it does nothing. Never unwinds.
extern "C" fn stop_polling_at_exit() {
    if reactor_passes::in_forked_child() {
        return;
    }
    EXITING.store(true, Ordering::SeqCst);
    drop(lock(&POLLING));
}

/// Runs in the child of a `fork` (one thread, a copy of the parent's memory): marks it as a
/// process without a reactor. Async-signal-safe: one atomic store.
extern "C" fn mark_forked_child() {
    reactor_passes::mark_forked_child();
}

/// Registers the process hooks, once per process (also when a spawn fails and a later future
/// tries again): the exit hook and the fork hook.
fn hook_process() -> std::io::Result<()> {
    static HOOKED: AtomicBool = AtomicBool::new(false);
    if HOOKED.load(Ordering::SeqCst) {
        return Ok(());
    }
    // SAFETY: both are plain C-ABI functions that never unwind and only touch statics, which
    // live until the process ends.
    if unsafe { atexit(stop_polling_at_exit) } != 0 {
        return Err(std::io::ErrorKind::OutOfMemory.into());
    }
    // SAFETY: as above; `None` for the hooks not wanted.
    let code = unsafe { pthread_atfork(None, None, Some(mark_forked_child)) };
    if code != 0 {
        // Registered at exit already, and harmless to have twice: retried only on this path.
        return Err(std::io::Error::from_raw_os_error(code));
    }
    HOOKED.store(true, Ordering::SeqCst);
    Ok(())
}

fn start() -> std::io::Result<()> {
    hook_process()?;
    std::thread::Builder::new().name(REACTOR_THREAD_NAME.to_string()).spawn(run).map(drop)
}

/// Takes `POLLING` and begins a pass ([`reactor_passes`]) until the returned guard drops.
fn begin_pass() -> Pass {
    let polling = lock(&POLLING);
    Pass { pass: reactor_passes::Pass::begin(), _polling: polling }
}

/// A pass in progress, under `POLLING`: on drop (also on unwind) the pass ends, then `POLLING` is
/// released (the fields drop in this order).
struct Pass {
    pass: reactor_passes::Pass,
    _polling: MutexGuard<'static, ()>,
}

/// The reactor thread. It runs in CUDA's Relaxed capture-interaction mode
/// (`cudaThreadExchangeStreamCaptureMode`): its queries touch only events whose last record
/// was made outside any capture (a capturing stream refuses `completion`, and an event marked
/// as captured is never queried), so they are safe while another thread captures, and in that
/// mode CUDA lets them run instead of invalidating a Global capture, this crate's or anyone's. Should the mode not be set, the reactor queries
/// through the crate's refusals instead and waits while a capture forbids it.
fn run() {
    let query = {
        // Its first CUDA call too is made under the lock the exit hook takes: a process that
        // exits as the thread starts never sees it call into CUDA's teardown.
        let _polling = lock(&POLLING);
        if EXITING.load(Ordering::SeqCst) {
            park_forever();
        }
        // The driver's exchange: the runtime's would make device 0's primary context current
        // on this fresh thread, creating it in a process that uses only other devices (seen
        // on two H100s). The thread keeps the mode for its whole life (`serve` never returns),
        // so nothing is restored.
        let relaxed = sys::cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed;
        if crate::ffi::driver::thread_exchange_capture_mode(relaxed).is_ok() { Query::Relaxed } else { Query::Checked }
    };
    serve(query);
}

/// What the reactor does once the process is exiting: CUDA may be torn down under it, so it
/// never calls CUDA again.
fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// How the reactor queries an event.
#[derive(Copy, Clone)]
enum Query {
    /// Straight to `cuEventQuery`: the thread is in Relaxed capture mode.
    Relaxed,
    /// Through the crate's refusals, whose refusal during a capture means "not yet".
    Checked,
}

impl Query {
    /// Queries `event` in `pass`, unless its last record went into a capture (a graph node,
    /// which CUDA refuses to query, invalidating the capture): that is an error for its future.
    /// Called with no capture of this crate beginning or ending (see [`serve`]), so a record
    /// into a capture made before the call is seen here; the mark is read after the pass began
    /// ([`reactor_passes::Pass::query`]), so a record that marked it later waits for this pass.
    fn ready(self, pass: &reactor_passes::Pass, event: &Event) -> Result<bool> {
        pass.query(&Polling { query: self, event })
    }
}

/// An event as a pass queries it: its mark, then its query in CUDA the reactor's way.
struct Polling<'a> {
    query: Query,
    event: &'a Event,
}

impl reactor_passes::Polled for Polling<'_> {
    type Error = Error;

    fn refuse_captured(&self) -> Result<()> {
        self.event.refuse_captured()
    }

    fn query(&self) -> Result<bool> {
        match self.query {
            Query::Relaxed => crate::ffi::driver::event_query(self.event.as_raw()),
            // The pass holds the capture-transition lock already: the refusals are asked
            // directly (not through `Event::query`, which would take it again).
            Query::Checked => match crate::call::live_captures::refuse_unsafe_call() {
                Err(Error::CaptureMisuse(_)) => Ok(false),
                Err(other) => Err(other),
                Ok(()) => crate::ffi::driver::event_query(self.event.as_raw()),
            },
        }
    }
}

fn serve(query: Query) {
    // Devices whose primary context a sticky error poisoned: that lasts until the process exits.
    let mut poisoned: Vec<(Device, Error)> = Vec::new();
    let mut pending: Vec<Entry> = Vec::new();
    let mut woken: Vec<Waker> = Vec::new();
    let mut released: Vec<Arc<Signal>> = Vec::new();
    // The newest arrival or resolution: the hot window and the naps count from it.
    let mut active = Instant::now();
    let mut arrivals_seen = 0;
    loop {
        if take_arrivals(&mut pending, &mut arrivals_seen) {
            active = Instant::now();
        }
        let (pace, word) = {
            // No capture of this crate begins or ends during the pass: none can end while one
            // of its events is queried (CUDA 13.0 crashed when that raced). Taken before the
            // pass begins: a record into a capture (which holds it shared too) waits for the
            // pass in progress after marking its event, and must never wait for a pass that
            // waits for this lock.
            let _transitions = crate::call::transitions::no_capture_transitions();
            let polling = begin_pass();
            if EXITING.load(Ordering::SeqCst) {
                break;
            }
            let word = WAIT.load(Ordering::Relaxed);
            let wait = ReactorWait::decode(word);
            if poll(&polling.pass, query, wait, &mut poisoned, &mut pending, &mut woken, &mut released) {
                active = Instant::now();
            }
            (Pace::of(wait, &pending), word)
        };
        // Outside every lock: wakers are the executor's code, and so are their drops (a
        // dropped future's signal may hold one).
        for signal in released.drain(..) {
            quietly(move || drop(signal));
        }
        for waker in woken.drain(..) {
            quietly(|| waker.wake());
        }
        if !pending.is_empty() {
            pace.pause(active.elapsed(), word);
        }
    }
    park_forever();
}

/// Runs `f`, catching a panic (an executor's waker that panics must not stop the reactor);
/// the panic hook has printed it.
fn quietly(f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

/// Moves new arrivals into `pending`; with nothing to poll, blocks until something arrives
/// (no CPU). Returns whether anything arrived. `seen` is the [`ARRIVALS`] count taken last: with
/// futures pending and no new arrival counted, it returns at once, taking no lock (an arrival
/// it misses so is taken at the next call, or seen by the nap, which checks under the lock).
fn take_arrivals(pending: &mut Vec<Entry>, seen: &mut u64) -> bool {
    if !pending.is_empty() && ARRIVALS.load(Ordering::Acquire) == *seen {
        return false;
    }
    let mut registry = lock(&REGISTRY);
    while registry.incoming.is_empty() && pending.is_empty() {
        registry.parked = true;
        registry = ARRIVED.wait(registry).unwrap_or_else(PoisonError::into_inner);
        registry.parked = false;
    }
    let arrived = !registry.incoming.is_empty();
    pending.append(&mut registry.incoming);
    *seen = ARRIVALS.load(Ordering::Relaxed);
    arrived
}

/// How the reactor waits between passes while futures are pending.
#[derive(Copy, Clone)]
enum Pace {
    Spin,
    Yield,
    BackOff(Duration),
}

impl Pace {
    /// The pace `wait` asks for, given the `pending` futures' devices.
    fn of(wait: ReactorWait, pending: &[Entry]) -> Pace {
        match wait {
            ReactorWait::Spin => Pace::Spin,
            ReactorWait::BackOff { hot_window } => Pace::BackOff(hot_window),
            ReactorWait::AsDevice => match pending.iter().filter_map(|entry| entry.schedule).min() {
                Some(Schedule::Spin) => Pace::Spin,
                Some(Schedule::Yield) => Pace::Yield,
                Some(Schedule::Block) | None => Pace::BackOff(DEFAULT_HOT_WINDOW),
            },
        }
    }

    /// Waits before the next pass, `since` the last activity. Backing off, it spins through
    /// the hot window, yields for as long again, then naps, woken early by an arrival or a
    /// change of the setting: it naps only if the setting is still `word` (the encoded word
    /// the pace was chosen under), read under the lock [`set_reactor_wait`] takes after its
    /// change, so a change is never slept through.
    fn pause(self, since: Duration, word: u64) {
        let hot = match self {
            Pace::Spin => return std::hint::spin_loop(),
            Pace::Yield => return std::thread::yield_now(),
            Pace::BackOff(hot) => hot,
        };
        if since < hot {
            std::hint::spin_loop();
        } else if since < hot.saturating_mul(2) {
            std::thread::yield_now();
        } else {
            let nap = (since / NAP_DIVISOR).clamp(SHORTEST_NAP, LONGEST_NAP);
            let mut registry = lock(&REGISTRY);
            if registry.incoming.is_empty() && WAIT.load(Ordering::Relaxed) == word {
                registry.parked = true;
                registry = ARRIVED.wait_timeout(registry, nap).unwrap_or_else(PoisonError::into_inner).0;
                registry.parked = false;
            }
        }
    }
}

/// One pass (`pass`, in progress): reads the devices' schedules of new arrivals (under `wait` =
/// [`ReactorWait::AsDevice`]), queries the event of every pending future whose `Completion`
/// still exists, removes the resolved and the dropped ones (releasing their events first, so that a
/// resolved future's event is no longer held by the reactor), and collects the wakers to call.
/// Returns whether any future resolved.
///
/// A sticky error poisons its context for good, so every future of that context, pending now or
/// registered later, resolves with that error (what its own event reads cannot be trusted).
/// Poisoning is kept per primary context, the context of every event this crate creates; an
/// event of unknown context (borrowed) is neither poisoned nor poisons.
fn poll(
    pass: &reactor_passes::Pass,
    query: Query,
    wait: ReactorWait,
    poisoned: &mut Vec<(Device, Error)>,
    pending: &mut Vec<Entry>,
    woken: &mut Vec<Waker>,
    released: &mut Vec<Arc<Signal>>,
) -> bool {
    // The devices' schedules, read once per pass for the new arrivals, when the setting uses them.
    let mut schedules: Vec<(Device, Schedule)> = Vec::new();
    let unread = pending.iter_mut().filter(|entry| entry.schedule.is_none() && wait == ReactorWait::AsDevice);
    for entry in unread {
        let device = entry.watched.event().device();
        let schedule = match schedules.iter().find(|(known, _)| *known == device) {
            Some(&(_, schedule)) => schedule,
            None => {
                let schedule = Schedule::of(device);
                schedules.push((device, schedule));
                schedule
            }
        };
        entry.schedule = Some(schedule);
    }
    for entry in pending.iter_mut().filter(|entry| !is_dropped(entry)) {
        match query.ready(pass, entry.watched.event()) {
            Ok(true) => entry.outcome = Some(Ok(())),
            Ok(false) => {}
            Err(error) => {
                if let Some(device) = primary_device(entry) {
                    if error.is_sticky() && !poisoned.iter().any(|(known, _)| *known == device) {
                        poisoned.push((device, error.clone()));
                    }
                }
                entry.outcome = Some(Err(error));
            }
        }
    }
    // A poisoned device's results cannot be trusted, "complete" included (seen on CUDA 13.0:
    // after a fault, events of other streams of the context stayed pending while their kernels
    // ran on, then read as complete): every future of that device resolves with its sticky error.
    for entry in pending.iter_mut() {
        let Some(device) = primary_device(entry) else { continue };
        if let Some((_, error)) = poisoned.iter().find(|(known, _)| *known == device) {
            if !matches!(&entry.outcome, Some(Err(own)) if own.is_sticky()) {
                entry.outcome = Some(Err(error.clone()));
            }
        }
    }
    let mut resolved = false;
    let mut index = 0;
    while index < pending.len() {
        let dropped = is_dropped(&pending[index]);
        if !dropped && pending[index].outcome.is_none() {
            index += 1;
            continue;
        }
        let Entry { watched, signal, outcome, .. } = pending.swap_remove(index);
        watched.release();
        PENDING.fetch_sub(1, Ordering::SeqCst);
        if let (false, Some(outcome)) = (dropped, outcome) {
            resolved = true;
            woken.extend(signal.resolve(outcome));
        }
        released.push(signal);
    }
    resolved
}

/// The device whose primary context the entry's event belongs to: every event this crate
/// creates (see [`Device::make_current`]). `None` for an event borrowed with the unsafe
/// [`Event::from_raw`], whose context is not known: a fault seen on it poisons nothing else,
/// and a poisoned primary context does not decide its outcome.
fn primary_device(entry: &Entry) -> Option<Device> {
    let event = entry.watched.event();
    event.is_owned().then(|| event.device())
}

/// Whether the entry's `Completion` is gone: the reactor holds the only reference to its
/// signal (`Completion` is not `Clone`, so the count only falls).
fn is_dropped(entry: &Entry) -> bool {
    Arc::strong_count(&entry.signal) == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_survives_its_encoding_and_huge_windows_saturate() {
        for wait in [
            ReactorWait::AsDevice,
            ReactorWait::Spin,
            ReactorWait::BackOff { hot_window: Duration::ZERO },
            ReactorWait::BackOff { hot_window: DEFAULT_HOT_WINDOW },
        ] {
            assert_eq!(ReactorWait::decode(wait.encode()), wait);
        }
        let huge = ReactorWait::BackOff { hot_window: Duration::MAX }.encode();
        assert_eq!(ReactorWait::decode(huge), ReactorWait::BackOff { hot_window: Duration::from_nanos(u64::MAX - 2) });
    }

    #[test]
    fn the_setting_is_swapped_and_restored() {
        assert_eq!(reactor_wait(), ReactorWait::AsDevice, "the default");
        let previous = set_reactor_wait(ReactorWait::Spin);
        assert_eq!((previous, reactor_wait()), (ReactorWait::AsDevice, ReactorWait::Spin));
        assert_eq!(set_reactor_wait(previous), ReactorWait::Spin);
        assert_eq!(reactor_wait(), ReactorWait::AsDevice);
    }
}

#[cfg(test)]
mod passes {
    use super::*;
    use crate::call::reactor_passes::wait_for_pass;

    /// The tests below hold `POLLING` or stand in for the reactor: one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// The reactor's hand-off (`begin_pass`, then a pass) against threads that drop pending
    /// futures in a loop through the real `wait_for_pass` (a `select!` with a timeout in a
    /// loop, on several executor threads). Host-only: the pass is a 2 µs spin standing in for
    /// the queries. The reactor must keep polling: while it does not, no future is woken and
    /// every dropped entry (with its event) piles up in `incoming`.
    #[test]
    fn droppers_in_a_loop_do_not_starve_the_reactor() {
        let _serial = lock(&SERIAL);
        let spin = |d: Duration| {
            let until = Instant::now() + d;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        };
        let (stop, passes, drops) = (AtomicBool::new(false), AtomicUsize::new(0), AtomicUsize::new(0));
        let mut longest = Duration::ZERO;
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        spin(Duration::from_nanos(200)); // creating the next future
                        wait_for_pass();
                        drops.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _pass = begin_pass();
                    spin(Duration::from_micros(2));
                    passes.fetch_add(1, Ordering::Relaxed);
                }
            });
            let (began, mut last, mut since) = (Instant::now(), 0, Instant::now());
            while began.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
                let now = passes.load(Ordering::Relaxed);
                if now == last {
                    longest = longest.max(since.elapsed());
                } else {
                    (last, since) = (now, Instant::now());
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        let (passes, drops) = (passes.into_inner(), drops.into_inner());
        println!("2 s: {passes} passes, {drops} drops; longest stretch without a pass {longest:?}");
        // Starved, the reactor would make no pass for the whole run. Ten spinning threads share
        // a machine that may have two cores and other work: the scheduler alone can keep one
        // off its core for tens of milliseconds (73 ms seen on a loaded two-core host), so
        // the bound is a quarter of the run.
        assert!(
            longest < Duration::from_millis(500),
            "no pass for {longest:?} ({passes} passes, {drops} drops in 2 s)"
        );
    }

    unsafe extern "C" {
        fn fork() -> c_int;
        fn _exit(status: c_int) -> !;
        fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    }

    /// A process that forks while the reactor is in a pass (under the default on an Auto
    /// device, nearly always while a future is pending): the child inherits `POLLING` locked by
    /// a thread it does not have. Its exit hook, a drop's wait for the pass and a new future
    /// must neither take that lock nor wait for that pass. Host-only: a thread holds `POLLING`
    /// as the reactor does.
    #[test]
    fn a_child_forked_during_a_pass_can_exit() {
        let _serial = lock(&SERIAL);
        let (held, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _pass = lock(&POLLING);
                held.wait();
                release.wait();
            });
            held.wait();
            hook_process().unwrap();
            // SAFETY: the child only spawns a thread, sleeps and `_exit`s.
            let pid = unsafe { fork() };
            if pid == 0 {
                let hook = std::thread::spawn(|| {
                    stop_polling_at_exit();
                    wait_for_pass();
                    refuse_in_forked_child().is_err()
                });
                std::thread::sleep(Duration::from_secs(1));
                let refused = hook.is_finished() && hook.join().unwrap_or(false);
                // SAFETY: ends the child without running its Rust or C exit handlers.
                unsafe { _exit(if refused { 0 } else { 1 }) }
            }
            let mut status = 0;
            // SAFETY: a valid out-pointer; `pid` is our child.
            assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
            release.wait();
            assert_eq!(
                status, 0,
                "in the child, exit or a drop waited for the parent's reactor, or a future was not refused"
            );
        });
    }
}
