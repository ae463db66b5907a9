//! Streams: owned, built-in and borrowed ones, kernels, host functions, nested `as_current`,
//! pool leases.

use super::*;

pub(crate) fn builtin_of(stream: &StreamRef) -> Option<Builtin> {
    match stream.ownership() {
        Ownership::Builtin(builtin) => Some(builtin),
        _ => None,
    }
}

/// The legacy stream: never part of a capture.
pub(crate) fn is_legacy(stream: &StreamRef) -> bool {
    match builtin_of(stream) {
        Some(Builtin::Legacy) => true,
        Some(Builtin::Null) => !NULL_STREAM_IS_PER_THREAD,
        _ => false,
    }
}

/// A per-thread stream: usable only on the thread that made it.
pub(crate) fn is_thread_bound(stream: &StreamRef) -> bool {
    match builtin_of(stream) {
        Some(Builtin::PerThread) => true,
        Some(Builtin::Null) => NULL_STREAM_IS_PER_THREAD,
        _ => false,
    }
}

/// A tiny kernel: empty, a tag of at most 20 µs, or a spin of at most 50 µs.
pub(crate) fn kernel(stream: &StreamRef, log: &TagLog, kind: u8, micros: u8) -> Result<()> {
    match kind % 3 {
        0 => cuda_stream_tests::empty(stream),
        1 => {
            let tag = TAGS.fetch_add(1, Ordering::Relaxed);
            cuda_stream_tests::tag(stream, log, tag, Duration::from_micros(u64::from(micros % 21)))
        }
        _ => cuda_stream_tests::spin(stream, Duration::from_micros(u64::from(micros % 51))),
    }
}

/// Enqueues a `FnOnce` host function (or a host callback) holding a drop flag, and checks what
/// must hold of the result. Returns the result and the flag.
pub(crate) fn once_host_fn(stream: &StreamRef, probe: bool, callback: bool) -> (Result<()>, Arc<AtomicU8>) {
    let status = stream.capture_status();
    note("StreamRef::capture_status", &status);
    let capturing = matches!(status, Ok(CaptureStatus::Active | CaptureStatus::Invalidated));
    let (token, state) = Token::new();
    let (what, result) = if callback {
        let result = stream.launch_host_callback(move |status| {
            token.run();
            if status.is_err() {
                CALLBACK_ERRORS.fetch_add(1, Ordering::Relaxed);
            }
            if probe {
                probe_refusal();
            }
        });
        ("StreamRef::launch_host_callback", result)
    } else {
        let result = stream.launch_host_fn(move || {
            token.run();
            if probe {
                probe_refusal();
            }
        });
        ("StreamRef::launch_host_fn", result)
    };
    note(what, &result);
    if capturing {
        assert!(
            matches!(result, Err(Error::CaptureMisuse(_))),
            "{what} on a capturing stream must be refused with CaptureMisuse: {result:?}"
        );
    }
    if result.is_err() {
        expect_dropped_unrun(&state, what);
    }
    (result, state)
}

/// Runs `innermost` inside `as_current` of each stream in turn, checking at every level that
/// `with_current` sees the innermost stream, before and after the levels inside it.
pub(crate) fn nest(device: Device, streams: &[&StreamRef], innermost: &mut dyn FnMut()) {
    let Some((first, rest)) = streams.split_first() else {
        innermost();
        return;
    };
    first.as_current(|| {
        assert!(StreamRef::with_current(device, |current| current == *first), "as_current makes the stream current");
        nest(device, rest, innermost);
        assert!(
            StreamRef::with_current(device, |current| current == *first),
            "the outer stream is current again after an inner as_current returned"
        );
    });
}

/// Nothing is current on this thread: `with_current` sees the null stream.
pub(crate) fn expect_nothing_current(device: Device) {
    assert!(
        StreamRef::with_current(device, |current| *current == *BuiltinStream::null(device)),
        "with no as_current running, the current stream is the null stream"
    );
}

impl<'p> World<'p> {
    /// Operations through a `BorrowedStream` wrapping the handle of a stream the program owns.
    pub(crate) fn borrowed(&mut self, s: u32, action: u8, e: u32, active: Option<&mut Active<'_>>) {
        let origin: Option<&Stream> = active.as_ref().map(|active| active.origin);
        let generation = active.as_ref().map(|active| active.generation);
        let Some(owner) = self.pick_owned(s, origin) else { return skip() };
        let mut tokens = Vec::new();
        let mut graph_tokens = Vec::new();
        let mut record = None;
        {
            // SAFETY: `owner` is a `Stream` this program owns (a slot, or the stream being
            // captured), borrowed here for the whole block: nothing drops, moves or destroys it
            // before `view`, which does not leave the block, is gone.
            let view = unsafe { BorrowedStream::borrow_raw_on(owner.as_raw(), self.device) }.unwrap();
            note_infallible();
            assert_eq!(view.ownership(), Ownership::Borrowed, "a borrowed ordinary handle is Borrowed");
            assert!(*view == **owner, "a borrowed view compares equal to the stream it borrows");
            match action % 7 {
                0 => {
                    note("BorrowedStream query", &view.query());
                }
                1 => {
                    note("kernel on a BorrowedStream", &cuda_stream_tests::empty(&view));
                }
                2 => tokens.push(once_host_fn(&view, action % 2 == 0, false).1),
                3 => {
                    if let Some(index) = self.event_index(e) {
                        let result = view.record(&self.events[index].event);
                        note("BorrowedStream record", &result);
                        record = Some((index, result, records_into_capture(&view)));
                    }
                }
                4 => view.as_current(|| {
                    let (is_view, is_owner) =
                        StreamRef::with_current(self.device, |current| (current == &*view, current == &**owner));
                    assert!(is_view && is_owner, "as_current of a borrowed view makes it (and so its owner) current");
                }),
                5 => {
                    note("StreamRef::wait_stream (owner on its view)", &owner.wait_stream(&view));
                    note("StreamRef::wait_stream (view on its owner)", &view.wait_stream(owner));
                }
                _ => match active {
                    Some(active) => graph_tokens.push(capture_host_fn(&mut active.capture, &view, action % 2 == 0)),
                    None => {
                        note("BorrowedStream capture_status", &view.capture_status());
                    }
                },
            }
        }
        self.tokens.extend(tokens);
        self.graph_tokens.extend(graph_tokens);
        if let Some((index, result, into)) = record {
            self.recorded(index, &result, generation, into);
        }
    }

    /// Pool leases: used and released, exhausted, joined with a slot.
    pub(crate) fn pool_op(&mut self, s: u32, action: u8, origin: Option<&Stream>) {
        let pool = self.pool;
        let mut tokens = Vec::new();
        match action % 4 {
            0 | 1 => {
                let lease = pool.acquire();
                note("StreamPool::acquire", &lease);
                if let Ok(lease) = lease {
                    note("kernel on a lease", &kernel(&lease, self.log, action / 4, action));
                    if action % 4 == 1 {
                        tokens.push(once_host_fn(&lease, false, action % 8 == 5).1);
                    }
                }
            }
            2 => {
                let mut leases = Vec::new();
                for _ in 0..pool.capacity() {
                    let lease = pool.acquire();
                    note("StreamPool::acquire", &lease);
                    leases.extend(lease.ok());
                }
                for (index, lease) in leases.iter().enumerate() {
                    for other in &leases[index + 1..] {
                        assert!(**lease != **other, "a pool never leases one stream to two holders");
                    }
                }
                if leases.len() == pool.capacity() {
                    let extra = pool.acquire();
                    note("StreamPool::acquire (exhausted)", &extra);
                    assert!(
                        matches!(extra, Err(Error::PoolExhausted { capacity }) if capacity == pool.capacity()),
                        "a pool with every stream leased must be PoolExhausted: {extra:?}"
                    );
                }
                for lease in &leases {
                    note("kernel on a lease", &cuda_stream_tests::empty(lease));
                }
            }
            _ => {
                let lease = pool.acquire();
                note("StreamPool::acquire", &lease);
                if let (Ok(lease), Some((stream, _))) = (lease, self.pick(s, origin)) {
                    note("StreamRef::wait_stream (on a lease)", &stream.wait_stream(&lease));
                    // A lease never joins a capture: it is not joined back before the capture ends.
                    if origin.is_none() {
                        note("StreamRef::wait_stream (a lease on a stream)", &lease.wait_stream(stream));
                    }
                }
            }
        }
        self.tokens.extend(tokens);
    }
}

impl<'p> World<'p> {
    /// Runs one of the operations on streams (and kernels, host functions, completions, `as_current`) ([`World::exec`]).
    pub(crate) fn stream_op(&mut self, op: Op, active: Option<&mut Active<'_>>) {
        let origin: Option<&Stream> = active.as_ref().map(|active| active.origin);
        let capturing = active.is_some();
        let device = self.device;
        match op {
            Op::NewStream { kind, priority } => {
                if self.slots.len() >= MAX_STREAMS {
                    return skip();
                }
                let non_blocking = kind % 2 == 1;
                let options = if non_blocking { StreamOptions::non_blocking() } else { StreamOptions::default() };
                let range = self.range;
                let outside = kind % 8 >= 6;
                let options = match kind % 8 {
                    0 | 1 => options,
                    2..=5 => options
                        .with_priority(Priority(range.most_urgent().value() + (priority % range.levels()) as i32)),
                    _ if priority % 2 == 0 => {
                        options.with_priority(Priority(range.least_urgent().value() + 1 + (priority % 3) as i32))
                    }
                    _ => options.with_priority(Priority(range.most_urgent().value() - 1 - (priority % 3) as i32)),
                };
                let stream = Stream::new(device, options);
                note("Stream::new", &stream);
                if outside {
                    assert!(
                        matches!(stream, Err(Error::PriorityOutOfRange { .. })),
                        "a priority outside {range} must be refused: {options:?} gave {stream:?}"
                    );
                }
                if let Ok(stream) = stream {
                    self.slots.push(Slot { stream: HeldStream::Owned(stream), non_blocking });
                }
            }
            Op::DropStream { s } => match self.removable(s, capturing) {
                Some(index) => drop(self.slots.remove(index)),
                None => skip(),
            },
            Op::DestroyStream { s } => match self.removable(s, capturing) {
                Some(index) => match self.slots.remove(index).stream {
                    HeldStream::Owned(stream) => {
                        note("Stream::destroy", &stream.destroy());
                    }
                    // A built-in stream has nothing to destroy.
                    HeldStream::Builtin(_) => {}
                },
                None => skip(),
            },
            Op::TakeBuiltin { which } => {
                let (null, legacy, per_thread) =
                    (BuiltinStream::null(device), BuiltinStream::legacy(device), BuiltinStream::per_thread(device));
                note_infallible();
                assert_eq!(*null == *per_thread, NULL_STREAM_IS_PER_THREAD, "the null stream is the per-thread one");
                assert_eq!(*null == *legacy, !NULL_STREAM_IS_PER_THREAD, "the null stream is the legacy one");
                assert!(*legacy != *per_thread, "the legacy and per-thread streams differ");
                if self.slots.len() >= MAX_STREAMS {
                    return skip();
                }
                let stream = [null, legacy, per_thread].into_iter().nth(usize::from(which % 3));
                if let Some(stream) = stream {
                    self.slots.push(Slot { stream: HeldStream::Builtin(stream), non_blocking: false });
                }
            }
            Op::StreamInfo { s } => {
                let Some((stream, target)) = self.pick(s, origin) else { return skip() };
                let priority = stream.priority();
                note("StreamRef::priority", &priority);
                if let Ok(priority) = priority {
                    assert!(self.range.contains(priority), "priority {priority:?} is outside {}", self.range);
                }
                let non_blocking = stream.is_non_blocking();
                note("StreamRef::is_non_blocking", &non_blocking);
                let expected = match target {
                    Target::Origin => Some(true),
                    Target::Slot(index) => {
                        let slot = &self.slots[index];
                        matches!(slot.stream, HeldStream::Owned(_)).then_some(slot.non_blocking)
                    }
                };
                if let (Ok(non_blocking), Some(expected)) = (non_blocking, expected) {
                    assert_eq!(non_blocking, expected, "an owned stream keeps the flags it was created with");
                }
                note("StreamRef::capture_status", &stream.capture_status());
                note("StreamRef::capture_info", &stream.capture_info());
                let id = stream.id();
                note("StreamRef::id", &id);
                if stream.ownership() == Ownership::Owned {
                    assert!(id.is_ok(), "a stream this crate created knows its id without asking CUDA: {id:?}");
                    assert_eq!(stream.id().ok(), id.ok(), "a stream's id never changes");
                }
            }
            Op::WaitStream { s, other } => {
                let (Some((stream, _)), Some((other, _))) = (self.pick(s, origin), self.pick(other, origin)) else {
                    return skip();
                };
                note("StreamRef::wait_stream", &stream.wait_stream(other));
            }
            Op::Fork { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let child = stream.fork();
                note("StreamRef::fork", &child);
                // Kept even beyond MAX_STREAMS: a fork of the captured stream is in the capture,
                // and is joined back before the capture ends.
                if let Ok(child) = child {
                    self.slots.push(Slot { stream: HeldStream::Owned(child), non_blocking: true });
                }
            }
            Op::Query { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                note("StreamRef::query", &stream.query());
            }
            Op::Synchronize { s } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                note("StreamRef::synchronize", &stream.synchronize());
            }
            Op::HostFn { s, probe } | Op::HostCallback { s, probe } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let (_, state) = once_host_fn(stream, probe, matches!(op, Op::HostCallback { .. }));
                self.tokens.push(state);
            }
            Op::Completion { s, block } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                let completion = stream.completion();
                note_infallible();
                let _ = completion.is_complete();
                // Blocking is safe only when no capture is active: then every stream's work is
                // real work, none of it waiting on anything the host does later.
                if block && !capturing {
                    note("Completion (block_on)", &block_on(completion));
                } else {
                    self.completions.push(completion);
                }
            }
            Op::Kernel { s, kind, micros } => {
                let Some((stream, _)) = self.pick(s, origin) else { return skip() };
                note("kernel launch", &kernel(stream, self.log, kind, micros));
            }
            Op::Current { picks, depth, action } => {
                let depth = 1 + usize::from(depth % 3);
                let streams: Vec<&StreamRef> =
                    picks[..depth].iter().filter_map(|pick| self.pick(*pick, origin).map(|(s, _)| s)).collect();
                let Some(&innermost) = streams.last() else { return skip() };
                let log = self.log;
                nest(device, &streams, &mut || {
                    StreamRef::with_current(device, |current| {
                        assert!(current == innermost, "with_current sees the innermost as_current");
                        let result = match action % 3 {
                            0 => current.query().map(drop),
                            1 => kernel(current, log, action / 3, action),
                            _ => cuda_stream_tests::empty(&CurrentStream),
                        };
                        note("an operation on the current stream", &result);
                    });
                });
                expect_nothing_current(device);
            }
            Op::DeviceSync => {
                if capturing {
                    return skip();
                }
                note("Device::synchronize", &device.synchronize());
            }
            _ => unreachable!(
                "not one of the operations on streams (and kernels, host functions, completions, `as_current`): {op:?}"
            ),
        }
    }
}
