//! Completion futures on a GPU, woken by the event-polling reactor (`cuda_stream::completion`):
//! after the work and not before, many at once from several threads, through an event with no
//! stream created, dropped early, with the reactor spinning, waiting as the device's scheduling
//! flag says (spinning under Auto, backing off under BlockingSync), an idle reactor at no CPU
//! cost, and a process that exits with futures pending. After a fault: `fault_child` in
//! `tests/whole/soundness.rs`.

use cuda_stream::completion::{
    DEFAULT_HOT_WINDOW, REACTOR_THREAD_NAME, ReactorWait, pending_completions, reactor_wait, set_reactor_wait,
};
use cuda_stream::{Device, Stream, check, live_events, live_host_fns, live_streams, sys};
use cuda_stream_tests::{
    FlagOutcome, LONG_SPIN, MappedFlag, TagLog, block_on, gpu_or_skip, non_blocking_stream, poll_until,
    thread_cpu_ticks,
};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The tests count the reactor's pending futures and its CPU time: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    assert!(settled(), "an earlier test left futures pending");
    guard
}

/// Waits until the reactor watches nothing.
fn settled() -> bool {
    poll_until(Duration::from_secs(5), || pending_completions() == 0).is_some()
}

/// A stream whose work waits until `flag` is set, or `timeout`.
fn parked_for(device: Device, timeout: Duration) -> (Stream, MappedFlag) {
    let stream = non_blocking_stream(device);
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&stream, &flag, timeout).unwrap();
    (stream, flag)
}

fn parked(device: Device) -> (Stream, MappedFlag) {
    parked_for(device, Duration::from_secs(20))
}

/// Sets how the reactor waits for a scope, restoring the previous setting also on panic.
struct Waiting(ReactorWait);

impl Waiting {
    fn set(wait: ReactorWait) -> Waiting {
        Waiting(set_reactor_wait(wait))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        set_reactor_wait(self.0);
    }
}

#[test]
fn a_stream_completion_resolves_only_after_the_held_work() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let (stream, flag) = parked(device);
    let done = stream.completion();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!done.is_complete(), "resolved while the kernel was held");
    assert_eq!(pending_completions(), 1);
    flag.set();
    block_on(done).unwrap();
    assert_eq!(flag.outcome(), FlagOutcome::Seen, "the kernel ended on the flag, not on its timeout");
    assert!(stream.query().unwrap(), "the stream's work is done when the future resolves");
    assert_eq!(pending_completions(), 0, "the reactor let go of the future before waking the task");
    assert_eq!(live_host_fns(), 0, "no host function is involved");
}

#[test]
fn completions_of_two_streams_resolve_in_the_order_their_work_ends() {
    let device = gpu_or_skip!();
    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    let _serial = serial();
    let (a, b) = (non_blocking_stream(device), non_blocking_stream(device));
    let start = Instant::now();
    cuda_stream_tests::spin(&a, LONG_SPIN).unwrap();
    cuda_stream_tests::spin(&b, LONG_SPIN / 2).unwrap();
    let (done_a, done_b) = (a.completion(), b.completion());
    assert!(!done_a.is_complete() && !done_b.is_complete());
    block_on(async {
        done_b.await.unwrap();
        assert!(!a.query().unwrap(), "b finished first");
        done_a.await.unwrap();
    });
    let took = start.elapsed();
    assert!(took >= LONG_SPIN - Duration::from_millis(5), "resolved after {took:?}, before the kernel ended");
    assert!(a.query().unwrap());
}

#[test]
fn many_futures_on_many_streams_all_resolve() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let (streams, per_stream) = (16, 8);
    let streams: Vec<Stream> = (0..streams).map(|_| non_blocking_stream(device)).collect();
    let kernel = |stream: usize| Duration::from_micros(200 * (stream as u64 % 4 + 1));
    let start = Instant::now();
    // Four awaiting threads, each with every fourth future, in reverse order of enqueue.
    let mut shares: Vec<Vec<cuda_stream::Completion>> = (0..4).map(|_| Vec::new()).collect();
    for (index, stream) in streams.iter().enumerate() {
        for round in 0..per_stream {
            cuda_stream_tests::spin(stream, kernel(index)).unwrap();
            shares[(index + round) % 4].push(stream.completion());
        }
    }
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let awaiting: Vec<_> = shares
            .into_iter()
            .map(|share| scope.spawn(move || share.into_iter().rev().map(block_on).collect::<Vec<_>>()))
            .collect();
        awaiting.into_iter().flat_map(|thread| thread.join().unwrap()).collect()
    });
    let took = start.elapsed();
    assert_eq!(outcomes.len(), streams.len() * per_stream);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let longest = kernel(3) * per_stream as u32;
    assert!(took >= longest, "all resolved after {took:?}, before the longest stream's {longest:?} of work");
    assert!(streams.iter().all(|stream| stream.query().unwrap()));
    assert!(settled());
}

#[test]
fn an_event_completion_creates_no_stream_and_resolves_after_the_recorded_work() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let (stream, flag) = parked(device);
    let log = TagLog::new(4).unwrap();
    cuda_stream_tests::tag(&stream, &log, 1, Duration::ZERO).unwrap();
    let event = Arc::new(stream.record_event().unwrap());
    cuda_stream_tests::tag(&stream, &log, 2, LONG_SPIN).unwrap();
    let (streams, events) = (live_streams(), live_events());
    let done = event.completion();
    assert_eq!((live_streams(), live_events()), (streams, events), "no stream and no event created");
    std::thread::sleep(Duration::from_millis(50));
    assert!(!done.is_complete(), "resolved while the work before the event was held");
    flag.set();
    block_on(done).unwrap();
    assert_eq!(log.tags(), vec![1], "resolved at the event, not at the end of the stream");
    assert_eq!(Arc::strong_count(&event), 1, "the reactor released its clone before waking the task");
    stream.synchronize().unwrap();
    assert_eq!((live_streams(), live_events()), (streams, events));
}

#[test]
fn an_awaited_event_outlives_its_owners_drop_until_the_future_resolves() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let (stream, flag) = parked(device);
    let event = Arc::new(stream.record_event().unwrap());
    let events = live_events();
    let done = event.completion();
    drop(event);
    assert_eq!(live_events(), events, "the reactor's clone keeps the awaited event alive");
    flag.set();
    block_on(done).unwrap();
    assert_eq!(live_events(), events - 1, "and destroys it once the future has resolved");
}

#[test]
fn a_future_dropped_before_completion_leaves_nothing_pending() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let (stream, flag) = parked(device);
    let event = Arc::new(stream.record_event().unwrap());
    let futures = (stream.completion(), event.completion());
    assert_eq!(pending_completions(), 2);
    drop(futures);
    assert!(settled(), "the reactor noticed both drops");
    assert_eq!(Arc::strong_count(&event), 1, "and let go of the event");
    assert!(!stream.query().unwrap(), "the work is still held");
    flag.set();
    stream.synchronize().unwrap();
    block_on(stream.completion()).unwrap();
    assert!(settled());
}

#[test]
fn with_the_reactor_spinning_futures_resolve_and_the_idle_reactor_still_sleeps() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let waiting = Waiting::set(ReactorWait::Spin);
    let (stream, flag) = parked(device);
    let done = stream.completion();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!done.is_complete());
    flag.set();
    block_on(done).unwrap();
    assert!(settled());
    assert_idle_for(Duration::from_millis(300));
    drop(waiting);
    assert_eq!(reactor_wait(), ReactorWait::AsDevice);
}

/// The reactor's CPU time, in clock ticks, while one future waits `held` for its work.
fn reactor_ticks_while_pending(device: Device, held: Duration) -> u64 {
    let (stream, flag) = parked(device);
    let done = stream.completion();
    // The reactor has started (the first future of the process starts it) and taken the arrival.
    std::thread::sleep(Duration::from_millis(20));
    let spent = reactor_ticks_over(held);
    flag.set();
    block_on(done).unwrap();
    assert!(settled());
    spent
}

/// The reactor's CPU time, in clock ticks, over the next `held`.
fn reactor_ticks_over(held: Duration) -> u64 {
    let ticks = || thread_cpu_ticks(REACTOR_THREAD_NAME).expect("the reactor thread runs, under its name");
    let before = ticks();
    std::thread::sleep(held);
    ticks() - before
}

#[test]
fn by_default_the_reactor_waits_as_the_devices_synchronize_does() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let held = Duration::from_millis(400);
    let (full, spent) = (cuda_stream_tests::ticks_in(held), reactor_ticks_while_pending(device, held));
    match cuda_stream_tests::device_schedule_flag() {
        // CUDA's default (Auto), Spin and Yield: the reactor queries without pause, as a
        // synchronize would (yielding, with nothing else to run, takes the core as well).
        sys::cudaDeviceScheduleAuto | sys::cudaDeviceScheduleSpin | sys::cudaDeviceScheduleYield => {
            assert!(spent * 2 >= full, "spinning, the reactor ran {spent} of {full} ticks");
        }
        _ => {
            assert!(spent * 10 <= full, "on a BlockingSync device the reactor ran {spent} of {full} ticks");
        }
    }
    let waiting = Waiting::set(ReactorWait::BackOff { hot_window: DEFAULT_HOT_WINDOW });
    let spent = reactor_ticks_while_pending(device, held);
    assert!(spent * 10 <= full, "backing off, the reactor ran {spent} of {full} ticks");
    drop(waiting);
    println!("reactor ticks over {held:?}: spinning under Auto, then {spent} backing off, of {full}");
}

#[test]
fn a_new_setting_reaches_a_future_already_pending() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let waiting = Waiting::set(ReactorWait::BackOff { hot_window: DEFAULT_HOT_WINDOW });
    let (stream, flag) = parked(device);
    let done = stream.completion();
    // Past the hot window: the reactor naps.
    std::thread::sleep(Duration::from_millis(50));
    let held = Duration::from_millis(400);
    let backing_off = reactor_ticks_over(held);
    set_reactor_wait(ReactorWait::Spin);
    let spinning = reactor_ticks_over(held);
    flag.set();
    block_on(done).unwrap();
    drop(waiting);
    assert!(settled());
    let full = cuda_stream_tests::ticks_in(held);
    assert!(backing_off * 10 <= full, "backing off, the reactor ran {backing_off} of {full} ticks");
    assert!(spinning * 2 >= full, "told to spin while the future was pending, it ran {spinning} of {full} ticks");
}

#[test]
fn on_a_blocking_sync_device_the_reactor_backs_off() {
    let _device = gpu_or_skip!();
    cuda_stream_tests::child_test_prints("blocking_sync_child", &["blocking sync: the reactor backed off"]);
}

#[test]
#[ignore = "child process of on_a_blocking_sync_device_the_reactor_backs_off"]
fn blocking_sync_child() {
    // Before anything initializes the device: its context is created with this flag.
    // SAFETY: sets a flag of the calling thread's device (0); no pointer.
    check(unsafe { sys::cudaSetDeviceFlags(sys::cudaDeviceScheduleBlockingSync) }, "cudaSetDeviceFlags").unwrap();
    let device = Device::new(0).unwrap();
    let schedule = cuda_stream_tests::device_schedule_flag();
    assert_eq!(schedule, sys::cudaDeviceScheduleBlockingSync, "schedule flag {schedule:#x}");
    assert_eq!(reactor_wait(), ReactorWait::AsDevice);
    let held = Duration::from_millis(400);
    let (full, spent) = (cuda_stream_tests::ticks_in(held), reactor_ticks_while_pending(device, held));
    assert!(spent * 10 <= full, "on a BlockingSync device the reactor ran {spent} of {full} ticks");
    println!("blocking sync: the reactor backed off ({spent} of {full} ticks)");
}

#[test]
fn an_idle_reactor_uses_no_cpu() {
    let device = gpu_or_skip!();
    let _serial = serial();
    let stream = non_blocking_stream(device);
    for _ in 0..20 {
        cuda_stream_tests::spin(&stream, Duration::from_micros(100)).unwrap();
        block_on(stream.completion()).unwrap();
    }
    assert!(settled());
    assert_idle_for(Duration::from_millis(500));
}

/// After a short settle, the reactor thread's CPU time does not grow over `idle` (one clock
/// tick of tolerance, for a tick that was already under way).
fn assert_idle_for(idle: Duration) {
    std::thread::sleep(Duration::from_millis(50));
    let spent = reactor_ticks_over(idle);
    assert!(spent <= 1, "the idle reactor used {spent} clock ticks of CPU in {idle:?}");
}

#[test]
fn exiting_with_pending_futures_neither_hangs_nor_crashes() {
    let _device = gpu_or_skip!();
    cuda_stream_tests::child_test_prints("exit_child", &["exit: 2 futures pending, the reactor spinning"]);
}

#[test]
#[ignore = "child process of exiting_with_pending_futures_neither_hangs_nor_crashes"]
fn exit_child() {
    let device = Device::new(0).unwrap();
    // The reactor spins, so that exit finds it in cuEventQuery as often as it can.
    set_reactor_wait(ReactorWait::Spin);
    let (stream, flag) = parked_for(device, Duration::from_secs(2));
    let event = Arc::new(stream.record_event().unwrap());
    let pending = (stream.completion(), event.completion());
    std::thread::sleep(Duration::from_millis(20));
    println!("exit: {} futures pending, the reactor spinning", pending_completions());
    // Nothing is dropped: the process exits with the work held and the futures pending.
    std::mem::forget((stream, flag, event, pending));
}
