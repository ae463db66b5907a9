//! The current-stream guards and the stream pool on a GPU.

use cuda_stream::{BuiltinStream, Device, Error, Ownership, Stream, StreamOptions, StreamPool, StreamRef};
use cuda_stream_tests::{Current, MappedFlag, TagLog, gpu_or_skip, poll_until};
use std::collections::HashSet;
use std::sync::{Barrier, Mutex};
use std::time::Duration;

#[test]
fn the_current_stream_defaults_to_null_nests_and_restores() {
    let device = gpu_or_skip!();
    let null = BuiltinStream::null(device);
    let is_current = |stream: &StreamRef| StreamRef::with_current(device, |s| s == stream);
    assert!(is_current(&null));
    let (outer, inner) = (
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
    );
    outer.as_current(|| {
        assert!(is_current(&outer));
        inner.as_current(|| {
            let current = StreamRef::with_current(device, |s| (s.as_raw(), s.ownership()));
            assert_eq!(current, (inner.as_raw(), Ownership::Owned));
        });
        assert!(is_current(&outer));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            inner.as_current(|| panic!("unwinding through as_current"));
        }));
        assert!(unwound.is_err());
        assert!(is_current(&outer), "restored on panic");
    });
    assert!(is_current(&null));
}

#[test]
fn threads_do_not_see_each_others_current_stream() {
    let device = gpu_or_skip!();
    let mine = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    mine.as_current(|| {
        let theirs = std::thread::scope(|scope| {
            scope.spawn(|| StreamRef::with_current(device, |s| (s.as_raw() as usize, s.ownership()))).join()
        });
        let (handle, ownership) = theirs.unwrap();
        assert_ne!(handle, mine.as_raw() as usize);
        assert_eq!(handle, 0, "another thread sees its device's null stream");
        assert_eq!(ownership, Ownership::Builtin(cuda_stream::Builtin::Null));
    });
}

#[test]
fn launchers_use_the_current_stream_when_given_none() {
    let device = gpu_or_skip!();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&stream, &flag, Duration::from_secs(10)).unwrap();
    let log = TagLog::new(2).unwrap();
    stream.as_current(|| cuda_stream_tests::tag(&Current, &log, 4, Duration::ZERO)).unwrap();
    assert!(poll_until(Duration::from_millis(100), || log.count() > 0).is_none(), "the tag ran on another stream");
    flag.set();
    stream.synchronize().unwrap();
    assert_eq!(log.tags(), vec![4]);
}

#[test]
fn pool_leases_are_exclusive_under_16_threads() {
    let device = gpu_or_skip!();
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 16).unwrap();
    let barrier = Barrier::new(16);
    let held = Mutex::new(HashSet::new());
    std::thread::scope(|scope| {
        for _ in 0..16 {
            scope.spawn(|| {
                for round in 0..200 {
                    let lease = pool.acquire().unwrap();
                    held.lock().unwrap().insert((round, lease.id().unwrap()));
                    cuda_stream_tests::empty(&*lease).unwrap();
                    barrier.wait();
                    drop(lease);
                    barrier.wait();
                }
            });
        }
    });
    let held = held.into_inner().unwrap();
    for round in 0..200 {
        let distinct = held.iter().filter(|(r, _)| *r == round).count();
        assert_eq!(distinct, 16, "round {round}: two holders shared a stream");
    }
    assert_eq!(pool.created(), 16);
}

#[test]
fn pool_reuses_released_streams_refuses_past_its_bound_and_honours_priority() {
    let device = gpu_or_skip!();
    let range = device.priority_range().unwrap();
    let options = StreamOptions::non_blocking().with_priority(range.most_urgent());
    let pool = StreamPool::new(device, options, 2).unwrap();
    let first = pool.acquire().unwrap().id().unwrap();
    let again = pool.acquire().unwrap();
    assert_eq!(again.id().unwrap(), first, "a released stream is reused");
    assert_eq!(pool.created(), 1);
    assert_eq!(again.priority().unwrap(), range.most_urgent());
    assert!(again.is_non_blocking().unwrap());
    let second = pool.acquire().unwrap();
    assert_ne!(*second, *again);
    assert_eq!(pool.acquire().unwrap_err(), Error::PoolExhausted { capacity: 2 });
    drop(second);
    assert!(pool.acquire().is_ok());
    let bad = StreamOptions::non_blocking().with_priority(cuda_stream::Priority(range.most_urgent().value() - 1));
    assert!(matches!(StreamPool::new(device, bad, 4), Err(Error::PriorityOutOfRange { .. })));
}

#[test]
fn the_current_stream_as_a_value_names_its_scope_and_refuses_once_it_ended() {
    let device = gpu_or_skip!();
    let null = BuiltinStream::null(device);
    let outside = StreamRef::current(device);
    assert_eq!(outside.with(|s| s == &*null), Ok(true), "no scope: the null stream");
    let log = TagLog::new(8).unwrap();
    let flag = MappedFlag::new().unwrap();
    let (outer, inner) = (
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
    );
    cuda_stream_tests::wait_flag(&outer, &flag, Duration::from_secs(10)).unwrap();
    let escaped = outer.as_current(|| {
        let current = StreamRef::current(device);
        inner.as_current(|| {
            assert!(StreamRef::with_current(device, |s| s == &*inner), "the innermost scope is current");
            assert_eq!(current.with(|s| s == &*outer), Ok(true), "the value keeps naming its own scope");
            // Work through the value goes to its stream: behind `outer`'s flag kernel.
            current.with(|s| cuda_stream_tests::tag(s, &log, 1, Duration::ZERO)).unwrap().unwrap();
        });
        assert!(current.is_current());
        current
    });
    assert!(!escaped.is_current());
    assert_eq!(escaped.with(|_| ()), Err(Error::NotCurrent), "its scope ended: the stream may be gone");
    let early = poll_until(Duration::from_millis(100), || log.count() > 0);
    assert!(early.is_none(), "the tag ran before `outer`'s kernel: it went to another stream");
    flag.set();
    outer.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1]);
    // A new stream at the same handle value (CUDA reuses them) is not mistaken for the old one.
    let handle = outer.as_raw();
    drop(outer);
    let reused = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    reused.as_current(|| {
        assert_eq!(escaped.with(|_| ()), Err(Error::NotCurrent), "reused handle {}", reused.as_raw() == handle);
    });
}

#[test]
fn as_current_with_device_makes_device_and_stream_current_and_restores_both() {
    let device = gpu_or_skip!();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let inside = stream
        .as_current_with_device(|| (Device::current().unwrap(), StreamRef::with_current(device, |s| s == &*stream)))
        .unwrap();
    assert_eq!(inside, (device, true));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = stream.as_current_with_device(|| panic!("unwinding through as_current_with_device"));
    }));
    assert!(unwound.is_err());
    assert!(StreamRef::with_current(device, |s| s == &*BuiltinStream::null(device)), "restored on panic");
    assert_eq!(Device::current().unwrap(), device);
}

/// Many threads acquire and release as fast as they can. Each holder sets its slot's flag after
/// the acquire and clears it before the release: a flag found set means two holders at once. As
/// many threads as slots never see [`Error::PoolExhausted`] (at most all but one slot is held by
/// the others at any instant); twice as many do, and still never share.
#[test]
fn pool_acquire_under_contention_never_shares_and_exhausts_only_when_all_are_held() {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let device = gpu_or_skip!();
    const SLOTS: usize = 8;
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), SLOTS).unwrap();
    // Create every stream, and name each slot by its stream's id (read at creation: no CUDA call).
    let all: Vec<_> = (0..SLOTS).map(|_| pool.acquire().unwrap()).collect();
    assert_eq!(pool.acquire().unwrap_err(), Error::PoolExhausted { capacity: SLOTS });
    let slot_of: HashMap<u64, usize> =
        all.iter().enumerate().map(|(slot, lease)| (lease.id().unwrap(), slot)).collect();
    drop(all);
    let held: Vec<AtomicBool> = (0..SLOTS).map(|_| AtomicBool::new(false)).collect();
    let rounds = cuda_stream_tests::scaled(100_000, 1_000);
    let hammer = |threads: usize| {
        let (exhausted, barrier) = (AtomicUsize::new(0), Barrier::new(threads));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    barrier.wait();
                    for _ in 0..rounds {
                        let lease = match pool.acquire() {
                            Ok(lease) => lease,
                            Err(Error::PoolExhausted { .. }) => {
                                exhausted.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Err(error) => panic!("acquire failed: {error}"),
                        };
                        let slot = slot_of[&lease.id().unwrap()];
                        assert!(!held[slot].swap(true, Ordering::Relaxed), "slot {slot} leased to two holders");
                        std::hint::spin_loop();
                        held[slot].store(false, Ordering::Relaxed);
                        drop(lease);
                    }
                });
            }
        });
        exhausted.into_inner()
    };
    assert_eq!(hammer(SLOTS), 0, "PoolExhausted while a slot was free");
    hammer(2 * SLOTS);
    assert_eq!(pool.created(), SLOTS, "no stream created past the bound");
    let all: Vec<_> = (0..SLOTS).map(|_| pool.acquire().unwrap()).collect();
    let mut ids: Vec<u64> = all.iter().map(|lease| lease.id().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), SLOTS, "every slot came back, once");
}
