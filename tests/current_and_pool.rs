//! The current-stream guards and the stream pool on a GPU.

use cuda_stream::{Error, Ownership, Stream, StreamOptions, StreamPool};
use cuda_stream_tests::{Current, MappedFlag, TagLog, gpu_or_skip, poll_until};
use std::collections::HashSet;
use std::sync::{Barrier, Mutex};
use std::time::Duration;

#[test]
fn the_current_stream_defaults_to_null_nests_and_restores() {
    let device = gpu_or_skip!();
    let null = Stream::null(device).unwrap();
    assert_eq!(Stream::with_current(device, |s| s.id()).unwrap(), null.id());
    let (outer, inner) = (
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
        Stream::new(device, StreamOptions::non_blocking()).unwrap(),
    );
    {
        let _outer = outer.make_current();
        assert_eq!(Stream::with_current(device, |s| s.id()).unwrap(), outer.id());
        {
            let _inner = inner.make_current();
            let current = Stream::with_current(device, |s| (s.id(), s.ownership())).unwrap();
            assert_eq!(current, (inner.id(), Ownership::Borrowed));
        }
        assert_eq!(Stream::with_current(device, |s| s.id()).unwrap(), outer.id());
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _inner = inner.make_current();
            panic!("unwinding through a current-stream guard");
        }));
        assert!(unwound.is_err());
        assert_eq!(Stream::with_current(device, |s| s.id()).unwrap(), outer.id(), "restored on panic");
    }
    assert_eq!(Stream::with_current(device, |s| s.id()).unwrap(), null.id());
}

#[test]
fn threads_do_not_see_each_others_current_stream() {
    let device = gpu_or_skip!();
    let mine = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let _guard = mine.make_current();
    let null_id = Stream::null(device).unwrap().id();
    let theirs = std::thread::scope(|scope| scope.spawn(|| Stream::with_current(device, |s| s.id()).unwrap()).join());
    let theirs = theirs.unwrap();
    assert_ne!(theirs, mine.id());
    if !cuda_stream::NULL_STREAM_IS_PER_THREAD {
        assert_eq!(theirs, null_id);
    }
}

#[test]
fn launchers_use_the_current_stream_when_given_none() {
    let device = gpu_or_skip!();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&stream, &flag, Duration::from_secs(10)).unwrap();
    let log = TagLog::new(2).unwrap();
    {
        let _current = stream.make_current();
        cuda_stream_tests::tag(&Current, &log, 4, Duration::ZERO).unwrap();
    }
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
                    held.lock().unwrap().insert((round, lease.id()));
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
    let options = StreamOptions::non_blocking().with_priority(range.highest());
    let pool = StreamPool::new(device, options, 2).unwrap();
    let first = pool.acquire().unwrap().id();
    let again = pool.acquire().unwrap();
    assert_eq!(again.id(), first, "a released stream is reused");
    assert_eq!(pool.created(), 1);
    assert_eq!(again.priority().unwrap(), range.highest());
    assert!(again.is_non_blocking().unwrap());
    let second = pool.acquire().unwrap();
    assert_ne!(second.id(), again.id());
    assert_eq!(pool.acquire().unwrap_err(), Error::PoolExhausted { capacity: 2 });
    drop(second);
    assert!(pool.acquire().is_ok());
    let bad = StreamOptions::non_blocking().with_priority(cuda_stream::Priority(range.greatest - 1));
    assert!(matches!(StreamPool::new(device, bad, 4), Err(Error::PriorityOutOfRange { .. })));
}
