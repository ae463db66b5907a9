//! Hardware queues on a GPU: `CUDA_DEVICE_MAX_CONNECTIONS` (8 by default, at most 32) is how
//! many work queues a context's streams map onto, and work on one queue runs in order. A stream
//! that waits on an event holds its queue: everything behind it on that queue waits too, even
//! work of unrelated streams (a false dependency). Proven with kernels: a blocker stream's
//! kernel waits for a host flag in mapped memory, and "parked" streams wait on an event
//! recorded after it. Then one tag kernel goes on each of 8 fresh streams:
//!
//! * default queues (this process): every queue holds a parked stream, so no fresh kernel runs
//!   until the flag is released;
//! * 32 queues (a child process started with `CUDA_DEVICE_MAX_CONNECTIONS=32`): a few parked
//!   streams leave most queues free, and every fresh kernel runs at once.
//!
//! Which queue a stream gets is the driver's choice; the counts below make each outcome hold
//! for any assignment that spreads streams over all queues (round robin in creation order, or
//! least loaded first), not for one particular mapping.
//!
//! The flag is released and the device synchronized on every path, failures included (a guard),
//! and the flag kernel gives up after 20 s, so nothing can hang.

use cuda_stream::{Device, Stream, StreamOptions, StreamPool};
use cuda_stream_tests::{FlagOutcome, MappedFlag, TagLog, gpu_or_skip, non_blocking_stream, poll_until};
use std::time::Duration;

const FRESH: u32 = 8;
/// Tags of the parked streams' kernels start here; the fresh streams' are 1..=FRESH.
const PARKED_TAG: u32 = 1000;
const FLAG_TIMEOUT: Duration = Duration::from_secs(20);

/// Sets the flag and waits for the device when dropped, assertion failures included.
struct Release<'a> {
    flag: &'a MappedFlag,
    device: Device,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.flag.set();
        let _ = self.device.synchronize();
    }
}

/// Parks `parked` streams behind the blocker, launches a tag kernel on each of [`FRESH`] new
/// streams, and watches the log for up to `watch` (less when all fresh kernels run sooner)
/// while the flag is held. Returns every tag the log held then (a 0 is a kernel caught
/// between claiming its entry and writing it). Checks on the way what CUDA
/// guarantees whatever the queues: parked work waits for the flag, the flag kernel was still
/// waiting when the watch ended, and after the release every kernel ran.
fn fresh_kernels_beside_parked_streams(device: Device, parked: u32, watch: Duration) -> Vec<u32> {
    let started = std::time::Instant::now();
    let log = TagLog::new(parked + FRESH).unwrap();
    let flag = MappedFlag::new().unwrap();
    let release = Release { flag: &flag, device };
    let blocker = non_blocking_stream(device);
    cuda_stream_tests::wait_flag(&blocker, &flag, FLAG_TIMEOUT).unwrap();
    let flag_seen = blocker.record_event().unwrap();
    let parked_streams: Vec<Stream> = (0..parked)
        .map(|i| {
            let stream = non_blocking_stream(device);
            stream.wait_event(&flag_seen).unwrap();
            // A kernel behind the wait: the wait is certainly in the queue, not deferred.
            cuda_stream_tests::tag(&stream, &log, PARKED_TAG + i, Duration::ZERO).unwrap();
            stream
        })
        .collect();
    let fresh: Vec<Stream> = (1..=FRESH).map(|_| non_blocking_stream(device)).collect();
    for (tag, stream) in (1..=FRESH).zip(&fresh) {
        cuda_stream_tests::tag(stream, &log, tag, Duration::ZERO).unwrap();
    }
    println!("{parked} parked and {FRESH} fresh streams enqueued after {:?}", started.elapsed());
    let took = poll_until(watch, || fresh_tags(&log.tags()) == FRESH as usize);
    let seen = log.tags();
    assert_eq!(flag.outcome(), FlagOutcome::Pending, "the flag kernel was still waiting throughout the watch");
    assert!(seen.iter().all(|tag| *tag < PARKED_TAG), "parked work ran before the event it waits on: {seen:?}");
    println!("{parked} parked streams: tags seen while the flag was held {seen:?} (all fresh after {took:?})");
    drop(release);
    assert_eq!(flag.outcome(), FlagOutcome::Seen);
    assert_eq!(log.count(), parked + FRESH, "after the release every kernel ran");
    drop((parked_streams, fresh));
    seen
}

/// How many of `tags` are the fresh streams' (1..=FRESH).
fn fresh_tags(tags: &[u32]) -> usize {
    tags.iter().filter(|tag| (1..=FRESH).contains(*tag)).count()
}

// With Q queues (8 by default) and Q parked streams created one after another, each queue gets
// one when the driver spreads streams over its queues (round robin or least loaded first): no
// queue is left without a parked wait ahead of later work, so each fresh kernel, whichever
// queue it lands on, waits behind one. (With 4 × Q parked streams, the flag kernel timed out
// before the watch began, on an H100 with CUDA 13.0: the setup was held up for its whole 20 s;
// where exactly was not isolated.)
#[test]
fn streams_beyond_the_hardware_queues_wait_behind_a_parked_stream() {
    let device = gpu_or_skip!();
    let queues = Device::hardware_queues();
    println!("CUDA_DEVICE_MAX_CONNECTIONS: {:?} -> {queues} queues", std::env::var("CUDA_DEVICE_MAX_CONNECTIONS"));
    let pool = StreamPool::with_hardware_queues(device, StreamOptions::non_blocking()).unwrap();
    assert_eq!(pool.capacity(), queues);
    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    let parked = queues as u32;
    let seen = fresh_kernels_beside_parked_streams(device, parked, Duration::from_millis(200));
    assert!(seen.is_empty(), "with every one of {queues} queues parked, kernels ran within 200 ms: {seen:?}");
    let expected = [format!("32 queues: {FRESH} of {FRESH} fresh kernels ran beside 8 parked streams")];
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    cuda_stream_tests::child_test_prints_with(
        "thirty_two_queues_child",
        &[("CUDA_DEVICE_MAX_CONNECTIONS", "32".to_string())],
        &expected,
    );
}

// 32 queues, 8 parked streams: with the blocker, 9 streams hold queues. Assigned in rotation or
// least loaded first, the 8 fresh streams (17 streams in all, created one after another in a
// fresh process) each get a queue of their own, free of any parked wait, so all 8 kernels run
// while the flag is held.
#[test]
#[ignore = "child process of streams_beyond_the_hardware_queues_wait_behind_a_parked_stream"]
fn thirty_two_queues_child() {
    let device = gpu_or_skip!();
    assert_eq!(Device::hardware_queues(), 32, "started with CUDA_DEVICE_MAX_CONNECTIONS=32");
    let ran = fresh_tags(&fresh_kernels_beside_parked_streams(device, 8, Duration::from_secs(2)));
    println!("32 queues: {ran} of {FRESH} fresh kernels ran beside 8 parked streams");
    assert_eq!(ran, FRESH as usize);
}
