//! Bursts of threads doing random operations on the shared streams.

use super::*;

/// What the threads of a `Threads` operation share.
pub(crate) struct Shared<'a> {
    pub(crate) device: Device,
    pub(crate) pool: &'a StreamPool,
    pub(crate) log: &'a TagLog,
    pub(crate) streams: &'a [&'a StreamRef],
    pub(crate) events: &'a [&'a Event],
}

impl<'p> World<'p> {
    /// 2 to 4 scoped threads doing random operations on the program's streams, at once.
    pub(crate) fn threads(&mut self, count: usize, seed: u64) {
        let streams: Vec<&StreamRef> = self.slots.iter().map(|slot| &*slot.stream).collect();
        let events: Vec<&Event> =
            self.events.iter().filter(|event| event.taint.is_none()).map(|event| &*event.event).collect();
        let shared = Shared { device: self.device, pool: self.pool, log: self.log, streams: &streams, events: &events };
        let tokens = std::thread::scope(|scope| {
            let shared = &shared;
            let handles: Vec<_> = (0..count)
                .map(|thread| {
                    let seed = seed ^ (thread as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    scope.spawn(move || thread_ops(thread, seed, shared))
                })
                .collect();
            let mut tokens = Vec::new();
            let mut failure = None;
            for handle in handles {
                match handle.join() {
                    Ok(mine) => tokens.extend(mine),
                    Err(payload) => {
                        failure.get_or_insert_with(|| panic_message(payload.as_ref()));
                    }
                }
            }
            if let Some(failure) = failure {
                panic!("a fuzzer thread failed: {failure}");
            }
            tokens
        });
        self.tokens.extend(tokens);
    }
}

/// A few random operations on the shared streams, on a thread of a `Threads` operation. No
/// capture is active meanwhile. The main thread's per-thread stream is refused here.
pub(crate) fn thread_ops(thread: usize, seed: u64, shared: &Shared<'_>) -> Vec<Arc<AtomicU8>> {
    let mut rng = Rng::new(seed);
    let mut tokens = Vec::new();
    let mut own_default_used = false;
    let device = shared.device;
    let streams = shared.streams;
    for step in 0..3 + rng.below(6) {
        let what = format!("thread {thread} step {step}");
        let action = rng.below(12);
        let s = streams.get(rng.below(streams.len().max(1))).copied();
        let other = streams.get(rng.below(streams.len().max(1))).copied();
        let (Some(s), Some(other)) = (s, other) else {
            // No shared stream: only this thread's own.
            let mine = BuiltinStream::per_thread(device);
            note(&what, &cuda_stream_tests::empty(&mine));
            own_default_used = true;
            continue;
        };
        let bound = is_thread_bound(s);
        match action {
            0 => {
                // The launch helper makes no thread check: the main thread's per-thread handle
                // means this thread's own per-thread stream here.
                own_default_used |= bound;
                note(&what, &kernel(s, shared.log, byte(&mut rng), byte(&mut rng)));
            }
            1 => {
                let result = s.query();
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
            2 => {
                let result = s.synchronize();
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
            3 => {
                let result = s.record_event().and_then(|event| other.wait_event(&event));
                note(&what, &result);
                expect_wrong_thread(bound || is_thread_bound(other), &what, &result);
            }
            4 => {
                let result = other.wait_stream(s);
                note(&what, &result);
                expect_wrong_thread(bound || is_thread_bound(other), &what, &result);
            }
            5 => {
                if shared.events.is_empty() {
                    skip();
                    continue;
                }
                let result = s.wait_event(shared.events[rng.below(shared.events.len())]);
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
            6 => {
                let (result, state) = once_host_fn(s, rng.below(4) == 0, coin(&mut rng));
                expect_wrong_thread(bound, &what, &result);
                tokens.push(state);
            }
            7 => {
                let lease = shared.pool.acquire();
                note(&what, &lease);
                if let Ok(lease) = lease {
                    note(&what, &cuda_stream_tests::empty(&lease));
                    if coin(&mut rng) {
                        tokens.push(once_host_fn(&lease, false, false).1);
                    }
                    let result = s.wait_stream(&lease);
                    note(&what, &result);
                    expect_wrong_thread(bound, &what, &result);
                }
            }
            8 => {
                let inner = [s, other];
                let innermost = inner[1];
                nest(device, &inner, &mut || {
                    let result = StreamRef::with_current(device, |current| {
                        assert!(current == innermost, "{what}: with_current sees the innermost as_current");
                        current.query()
                    });
                    note(&what, &result);
                    expect_wrong_thread(is_thread_bound(innermost), &what, &result);
                });
                expect_nothing_current(device);
            }
            9 => {
                let options = if coin(&mut rng) { StreamOptions::non_blocking() } else { StreamOptions::default() };
                let mine = Stream::new(device, options);
                note(&what, &mine);
                if let Ok(mine) = mine {
                    note(&what, &kernel(&mine, shared.log, byte(&mut rng), byte(&mut rng)));
                    tokens.push(once_host_fn(&mine, rng.below(4) == 0, coin(&mut rng)).1);
                    let result = mine.wait_stream(s);
                    note(&what, &result);
                    expect_wrong_thread(bound, &what, &result);
                    if coin(&mut rng) {
                        note(&what, &mine.destroy());
                    }
                }
            }
            10 => {
                let mine = BuiltinStream::per_thread(device);
                note(&what, &cuda_stream_tests::empty(&mine));
                note(&what, &mine.query());
                own_default_used = true;
            }
            _ => {
                let result = block_on(s.completion());
                note(&what, &result);
                expect_wrong_thread(bound, &what, &result);
            }
        }
    }
    if own_default_used {
        // Nothing of this thread's own default stream is left pending when the thread exits.
        note("per-thread stream synchronize", &BuiltinStream::per_thread(device).synchronize());
    }
    tokens
}
