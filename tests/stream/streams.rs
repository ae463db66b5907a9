//! The safe Stream API on a GPU: each CUDA stream semantic proven with a kernel.

use cuda_stream::{
    BorrowedStream, Builtin, BuiltinStream, Device, Error, Ownership, Priority, Stream, StreamOptions, StreamRef,
};
use cuda_stream_tests::{FlagOutcome, ForeignStream, LONG_SPIN, MappedFlag, TagLog, gpu_or_skip, poll_until};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

const FLAG_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the host watches for something that must not happen yet.
const HOLD: Duration = Duration::from_millis(100);

fn blocking(device: Device) -> Stream {
    Stream::new(device, StreamOptions::default()).unwrap()
}

fn non_blocking(device: Device) -> Stream {
    Stream::new(device, StreamOptions::non_blocking()).unwrap()
}

/// Parks `stream` on a kernel that waits for the returned flag.
fn park(stream: &StreamRef) -> MappedFlag {
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(stream, &flag, FLAG_TIMEOUT).unwrap();
    flag
}

/// Whether `log` has `count` entries within `within`.
fn log_reaches(log: &TagLog, count: u32, within: Duration) -> bool {
    poll_until(within, || log.count() >= count).is_some()
}

#[test]
fn legacy_stream_waits_for_blocking_streams_and_not_for_non_blocking_ones() {
    let device = gpu_or_skip!();
    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    let legacy = BuiltinStream::legacy(device);
    let log = TagLog::new(8).unwrap();

    let blocking_stream = blocking(device);
    let flag = park(&blocking_stream);
    cuda_stream_tests::tag(&legacy, &log, 1, Duration::ZERO).unwrap();
    assert!(!log_reaches(&log, 1, HOLD), "legacy work ran before the blocking stream's work ended");
    assert!(!legacy.query().unwrap());
    flag.set();
    legacy.synchronize().unwrap();
    assert_eq!(flag.outcome(), FlagOutcome::Seen);
    assert_eq!(log.tags(), vec![1]);

    let free = non_blocking(device);
    let flag = park(&free);
    cuda_stream_tests::tag(&legacy, &log, 2, Duration::ZERO).unwrap();
    assert!(log_reaches(&log, 2, FLAG_TIMEOUT / 2), "legacy work waited for a non-blocking stream");
    assert!(!free.query().unwrap(), "the non-blocking stream is still parked");
    flag.set();
    free.synchronize().unwrap();
    assert_eq!(flag.outcome(), FlagOutcome::Seen);
}

#[test]
fn blocking_streams_wait_for_the_legacy_stream_and_non_blocking_ones_do_not() {
    let device = gpu_or_skip!();
    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    let legacy = BuiltinStream::legacy(device);
    let (blocking_stream, free) = (blocking(device), non_blocking(device));
    let log = TagLog::new(8).unwrap();
    let flag = park(&legacy);
    cuda_stream_tests::tag(&blocking_stream, &log, 1, Duration::ZERO).unwrap();
    cuda_stream_tests::tag(&free, &log, 2, Duration::ZERO).unwrap();
    assert!(log_reaches(&log, 1, FLAG_TIMEOUT / 2), "the non-blocking stream waited for the legacy stream");
    assert!(!log_reaches(&log, 2, HOLD), "the blocking stream ran while the legacy stream was busy");
    flag.set();
    blocking_stream.synchronize().unwrap();
    assert_eq!(log.tags(), vec![2, 1]);
}

#[test]
fn per_thread_streams_are_distinct_and_synchronize_with_legacy() {
    let device = gpu_or_skip!();
    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    let log = TagLog::new(8).unwrap();
    let mine = BuiltinStream::per_thread(device);
    let flag = park(&mine);
    let other_id = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let theirs = BuiltinStream::per_thread(device);
                cuda_stream_tests::tag(&theirs, &log, 1, Duration::ZERO).unwrap();
                theirs.synchronize().unwrap();
                theirs.id().unwrap()
            })
            .join()
            .unwrap()
    });
    assert_ne!(other_id, mine.id().unwrap(), "each thread has its own per-thread stream");
    assert_eq!(log.tags(), vec![1], "another thread's per-thread stream did not wait for ours");
    assert!(!mine.query().unwrap());
    // The legacy stream waits for the per-thread stream, which is blocking.
    let legacy = BuiltinStream::legacy(device);
    cuda_stream_tests::tag(&legacy, &log, 2, Duration::ZERO).unwrap();
    assert!(!log_reaches(&log, 2, HOLD), "the legacy stream ran while a per-thread stream was busy");
    flag.set();
    legacy.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
}

#[test]
fn the_per_thread_stream_refuses_other_threads() {
    let device = gpu_or_skip!();
    let mine = BuiltinStream::per_thread(device);
    let result = std::thread::scope(|scope| scope.spawn(|| mine.query()).join().unwrap());
    assert_eq!(result, Err(Error::WrongThread));
    assert_eq!(mine.query(), Ok(true));
    let legacy = BuiltinStream::legacy(device);
    let shared = std::thread::scope(|scope| scope.spawn(|| legacy.query()).join().unwrap());
    assert_eq!(shared, Ok(true), "the legacy stream is one stream for every thread");
}

#[test]
fn priorities_are_checked_read_back_and_scheduled_first() {
    let device = gpu_or_skip!();
    let range = device.priority_range().unwrap();
    assert!(range.levels() > 1, "range {range}");
    for bad in [range.most_urgent().value() - 1, range.least_urgent().value() + 1] {
        match Stream::new(device, StreamOptions::non_blocking().with_priority(Priority(bad))) {
            Err(Error::PriorityOutOfRange { requested, range: reported, .. }) => {
                assert_eq!((requested, reported), (bad, range));
            }
            other => panic!("priority {bad} outside {range} gave {other:?}"),
        }
    }
    let high = Stream::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent())).unwrap();
    let low = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent())).unwrap();
    let equal = Stream::new(device, StreamOptions::non_blocking().with_priority(range.least_urgent())).unwrap();
    assert_eq!(high.priority().unwrap(), range.most_urgent());
    assert_eq!(low.priority().unwrap(), range.least_urgent());
    assert_eq!(range.clamp(range.most_urgent().value() - 10), range.most_urgent());

    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    // A backlog that fills every thread slot for many waves: 1024-thread blocks, 2 per SM.
    let sms = cuda_stream_tests::sm_count(device).unwrap();
    let latency_on = |stream: &Stream| {
        let log = TagLog::new(4).unwrap();
        cuda_stream_tests::spin_grid(&low, Duration::from_millis(1), sms * 2 * 30, 1024).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        cuda_stream_tests::tag(stream, &log, 1, Duration::ZERO).unwrap();
        let latency = poll_until(Duration::from_secs(10), || log.count() == 1).expect("the tag kernel ran");
        device.synchronize().unwrap();
        latency
    };
    let at_equal = latency_on(&equal);
    let at_highest = latency_on(&high);
    assert!(
        at_highest * 3 < at_equal,
        "highest priority {at_highest:?} is not well ahead of equal priority {at_equal:?}"
    );
}

#[test]
fn query_is_false_while_work_is_pending() {
    let device = gpu_or_skip!();
    let stream = non_blocking(device);
    let start = Instant::now();
    cuda_stream_tests::spin(&stream, LONG_SPIN).unwrap();
    assert_eq!(stream.query(), Ok(false));
    poll_until(Duration::from_secs(10), || stream.query().unwrap()).expect("the spin ends");
    assert!(start.elapsed() >= LONG_SPIN - Duration::from_millis(5));
}

#[test]
fn wait_event_and_wait_stream_order_work_across_streams() {
    let device = gpu_or_skip!();
    let (producer, consumer, other) = (non_blocking(device), non_blocking(device), non_blocking(device));
    let log = TagLog::new(8).unwrap();
    let flag = park(&producer);
    let event = producer.record_event().unwrap();
    consumer.wait_event(&event).unwrap();
    cuda_stream_tests::tag(&consumer, &log, 1, Duration::ZERO).unwrap();
    other.wait_stream(&producer).unwrap();
    cuda_stream_tests::tag(&other, &log, 2, Duration::ZERO).unwrap();
    assert!(!log_reaches(&log, 1, HOLD), "work ran before the event it waits for");
    assert!(!event.query().unwrap());
    flag.set();
    consumer.synchronize().unwrap();
    other.synchronize().unwrap();
    let mut tags = log.tags();
    tags.sort_unstable();
    assert_eq!(tags, vec![1, 2]);
    assert!(event.query().unwrap());
    // Recording the reusable event again moves its point forward.
    let flag = park(&producer);
    producer.record(&event).unwrap();
    assert!(!event.query().unwrap());
    flag.set();
    event.synchronize().unwrap();
}

/// Runs its closure when the thread's thread-locals are destroyed.
struct AtExit(Option<Box<dyn FnOnce()>>);

impl Drop for AtExit {
    fn drop(&mut self) {
        if let Some(at_exit) = self.0.take() {
            at_exit();
        }
    }
}

thread_local! {
    static AT_EXIT: RefCell<AtExit> = const { RefCell::new(AtExit(None)) };
}

/// A `wait_stream` made while its thread ends (from another thread-local's destructor, run
/// after the thread's marker events are destroyed) still orders the two streams and returns.
/// Reading the markers through `LocalKey::with` panicked there, which aborts the process.
#[test]
fn a_wait_stream_made_while_its_thread_ends_still_orders_the_streams() {
    let device = gpu_or_skip!();
    let (producer, consumer) = (Arc::new(non_blocking(device)), Arc::new(non_blocking(device)));
    let log = TagLog::new(8).unwrap();
    let flag = park(&producer);
    let (sent, waited) = mpsc::channel();
    let (at_exit_producer, at_exit_consumer) = (Arc::clone(&producer), Arc::clone(&consumer));
    let (early_producer, early_consumer) = (Arc::clone(&producer), Arc::clone(&consumer));
    std::thread::spawn(move || {
        // Set first, so destroyed after the markers that the wait below creates (thread-locals
        // are destroyed in the reverse order of their first use).
        AT_EXIT.with(|at_exit| {
            at_exit.borrow_mut().0 = Some(Box::new(move || {
                let _ = sent.send(at_exit_consumer.wait_stream(&*at_exit_producer));
            }));
        });
        // The other way round: the device's marker is made, and `consumer` waits for nothing.
        early_producer.wait_stream(&*early_consumer).unwrap();
    })
    .join()
    .unwrap();
    assert!(matches!(waited.recv_timeout(FLAG_TIMEOUT), Ok(Ok(()))), "the wait at the thread's end failed");
    cuda_stream_tests::tag(&*consumer, &log, 1, Duration::ZERO).unwrap();
    assert!(!log_reaches(&log, 1, HOLD), "work ran before the stream it waits for");
    flag.set();
    consumer.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1]);
}

#[test]
fn fork_waits_for_the_parent_and_join_waits_for_the_child() {
    let device = gpu_or_skip!();
    let parent = non_blocking(device);
    let log = TagLog::new(8).unwrap();
    let flag = park(&parent);
    let child = parent.fork().unwrap();
    assert_eq!(child.priority().unwrap(), parent.priority().unwrap());
    cuda_stream_tests::tag(&child, &log, 1, Duration::from_millis(20)).unwrap();
    parent.wait_stream(&child).unwrap();
    cuda_stream_tests::tag(&parent, &log, 2, Duration::ZERO).unwrap();
    assert!(!log_reaches(&log, 1, HOLD), "the forked stream ran before its parent's work");
    flag.set();
    parent.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
}

#[test]
fn destroying_a_busy_stream_returns_at_once_and_its_work_completes() {
    let device = gpu_or_skip!();
    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    let stream = non_blocking(device);
    let log = TagLog::new(4).unwrap();
    cuda_stream_tests::tag(&stream, &log, 7, LONG_SPIN).unwrap();
    let start = Instant::now();
    stream.destroy().unwrap();
    let took = start.elapsed();
    assert!(took < LONG_SPIN / 2, "destroy blocked for {took:?}");
    assert_eq!(log.count(), 0, "the work had not run yet");
    device.synchronize().unwrap();
    assert_eq!(log.tags(), vec![7]);

    // The same through Drop.
    let stream = non_blocking(device);
    cuda_stream_tests::tag(&stream, &log, 8, LONG_SPIN).unwrap();
    let start = Instant::now();
    drop(stream);
    assert!(start.elapsed() < LONG_SPIN / 2, "drop blocked for {:?}", start.elapsed());
    device.synchronize().unwrap();
    assert_eq!(log.tags(), vec![7, 8]);
}

#[test]
fn a_borrowed_stream_is_never_destroyed() {
    let device = gpu_or_skip!();
    let foreign = ForeignStream::create().unwrap();
    let log = TagLog::new(4).unwrap();
    {
        // SAFETY: the C library keeps the stream alive until `foreign.destroy()` below.
        let borrowed = unsafe { BorrowedStream::borrow_raw_on(foreign.raw(), device) }.unwrap();
        assert_eq!(borrowed.ownership(), Ownership::Borrowed);
        cuda_stream_tests::tag(&borrowed, &log, 1, Duration::ZERO).unwrap();
        borrowed.synchronize().unwrap();
    }
    // The wrapper is gone; the C side still uses its stream, then destroys it itself.
    ForeignStream::c_tag(&foreign.raw(), &log, 2).unwrap();
    // SAFETY: still alive, and the borrow ends with this statement.
    unsafe { BorrowedStream::borrow_raw_on(foreign.raw(), device) }.unwrap().synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
    foreign.destroy().expect("the C library destroys its own stream exactly once");
}

#[test]
fn into_raw_and_from_raw_owned_hand_ownership_over() {
    let device = gpu_or_skip!();
    let stream = non_blocking(device);
    let id = stream.id().unwrap();
    let raw = stream.into_raw();
    // into_raw destroyed nothing: the handle still runs kernels.
    let log = TagLog::new(2).unwrap();
    cuda_stream_tests::tag(&raw, &log, 3, Duration::ZERO).unwrap();
    device.synchronize().unwrap();
    assert_eq!(log.tags(), vec![3]);
    // SAFETY: `raw` came from into_raw and nobody else owns it.
    let owned = unsafe { Stream::from_raw_owned(raw, device) }.unwrap();
    assert_eq!((owned.id().unwrap(), owned.ownership()), (id, Ownership::Owned));
    cuda_stream_tests::empty(&owned).unwrap();
    owned.destroy().unwrap();
    for special in [std::ptr::null_mut(), cuda_stream::sys::cudaStreamLegacy, cuda_stream::sys::cudaStreamPerThread] {
        // SAFETY: special handles are valid for any device.
        let refused = unsafe { Stream::from_raw_owned(special, device) };
        assert!(matches!(refused, Err(Error::BuiltinNotOwnable { .. })), "{refused:?}");
    }
}

#[test]
fn the_null_handle_means_the_null_stream() {
    let device = gpu_or_skip!();
    // SAFETY: the null handle is always valid.
    let null = unsafe { BorrowedStream::borrow_raw_on(std::ptr::null_mut(), device) }.unwrap();
    assert_eq!(null.ownership(), Ownership::Builtin(Builtin::Null));
    let expected = if cuda_stream::NULL_STREAM_IS_PER_THREAD {
        BuiltinStream::per_thread(device)
    } else {
        BuiltinStream::legacy(device)
    };
    assert_eq!(*null, *expected, "handle 0 is the same stream as {expected:?}");
    assert_ne!(BuiltinStream::legacy(device), BuiltinStream::per_thread(device));
    let _ = null;
    // Dropping a built-in stream destroyed nothing: it still runs kernels.
    let log = TagLog::new(2).unwrap();
    cuda_stream_tests::tag(&expected, &log, 5, Duration::ZERO).unwrap();
    expected.synchronize().unwrap();
    assert_eq!(log.tags(), vec![5]);
}

#[test]
fn equality_follows_the_stream_not_the_handle_value() {
    let device = gpu_or_skip!();
    let mut seen_ids = HashSet::new();
    let mut reused_handle = false;
    let mut last_raw = std::ptr::null_mut();
    for _ in 0..20 {
        let stream = non_blocking(device);
        reused_handle |= stream.as_raw() == last_raw;
        last_raw = stream.as_raw();
        assert!(seen_ids.insert(stream.id().unwrap()), "a new stream got an old id");
    }
    eprintln!("handle value reused after destroy: {reused_handle}");
    let stream = non_blocking(device);
    // SAFETY: `stream` outlives the borrowed wrapper.
    let wrapped = unsafe { BorrowedStream::borrow_raw_on(stream.as_raw(), device) }.unwrap();
    assert_eq!(*wrapped, *stream);
    assert_eq!(wrapped.ownership(), Ownership::Borrowed);
    let (view, other): (&StreamRef, _) = (&stream, non_blocking(device));
    let set: HashSet<&StreamRef> = [view, &wrapped, &other].into_iter().collect();
    assert_eq!(set.len(), 2, "the wrapper and the owner are one stream; a live new one is another");
    assert!(format!("{stream:?}").contains("Owned"));
}

#[test]
fn bad_devices_are_refused_with_the_count() {
    let _device = gpu_or_skip!();
    let count = Device::count().unwrap();
    for ordinal in [-1, count, i32::MAX] {
        assert_eq!(Device::new(ordinal), Err(Error::InvalidDevice { ordinal, count }));
    }
}

#[test]
fn a_device_guard_restores_the_previous_device_even_on_panic() {
    let device = gpu_or_skip!();
    let before = Device::current().unwrap();
    {
        let _guard = device.make_current().unwrap();
        assert_eq!(Device::current().unwrap(), device);
    }
    assert_eq!(Device::current().unwrap(), before);
    if let Ok(second) = Device::new(1) {
        let result = std::panic::catch_unwind(|| {
            let _guard = second.make_current().unwrap();
            assert_eq!(Device::current().unwrap(), second);
            panic!("unwinding through the guard");
        });
        assert!(result.is_err());
        assert_eq!(Device::current().unwrap(), before);
    } else {
        eprintln!("one GPU: the panic case of the device guard needs a second device");
    }
}
