//! Typed launches with launch attributes, stream memory operations, SM partitions and their
//! streams, and graphs with conditional nodes.

use super::*;
use cuda_stream::{
    Access, BarrierScope, DeviceBuffer, DeviceWords, LaunchConfig, MappedWords, MemOp, MemSyncDomain, SmPartition,
    WaitValue,
};

cuda_stream::kernel! {
    /// `y = a * x + y` over `n` elements.
    static SAXPY = fn cs_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
    /// Appends `tag` to the log (`log[0]` counts, `log[1..]` holds up to `capacity` tags).
    pub(crate) static MARK = fn cs_cond_mark(log: *mut u32, capacity: u32, tag: u32);
}

/// The elements of a typed launch's buffers.
const N: usize = 256;
/// The tags a conditional graph's log holds.
pub(crate) const CAPACITY: u32 = 4;
/// Partition streams a program holds at a time.
const MAX_PARTITION_STREAMS: usize = 2;

/// Loads the typed kernels on `device` and checks their declarations (a typed kernel's first
/// launch does it): before the programs, so that no program loads one during a capture.
pub(crate) fn preload_typed_kernels(device: Device) {
    for attributes in [SAXPY.attributes(device), MARK.attributes(device)] {
        attributes.expect("the typed kernels load");
    }
    let stream = Stream::new(device, StreamOptions::non_blocking()).expect("a stream");
    let mut y = DeviceBuffer::<f32, _>::zeroed(&stream, N).expect("a buffer");
    let config = LaunchConfig::new(1, N as u32);
    let launched = y.use_on(&stream, |on, y| {
        // SAFETY: `y` holds N floats on the stream's device, lent by `use_on` for this launch.
        unsafe { SAXPY.launch(on, &config, (0.0, y.cast_const(), y, N as u32)) }
    });
    launched.and_then(|done| done).expect("a typed launch");
    let mut log = DeviceBuffer::<u32, _>::zeroed(&stream, 1 + CAPACITY as usize).expect("a buffer");
    let marked = log.use_on(&stream, |on, log| {
        // SAFETY: `log` holds 1 + CAPACITY u32 on the stream's device, lent for this launch.
        unsafe { MARK.launch(on, &LaunchConfig::new(1, 1), (log, CAPACITY, 1)) }
    });
    marked.and_then(|done| done).expect("a typed launch");
    stream.synchronize().expect("synchronize");
}

impl<'p> World<'p> {
    /// `y = a * x + y` launched with a launch attribute (none, a priority, the remote memory
    /// synchronization domain, cooperative, programmatic dependent) on one stream, the buffers
    /// homed on another; `y` read back where the launch was made. Never during a capture.
    pub(crate) fn typed_launch(&mut self, s: u32, other: u32, attr: u8, a: u8) {
        let (Some((home, _)), Some((on, _))) = (self.pick(s, None), self.pick(other, None)) else { return skip() };
        let (a, k) = (f32::from(a % 8), f32::from(a / 8 % 8));
        // `x` is homed on the launch's stream (its address is for kernels there), `y` elsewhere
        // (`use_on` orders the launch with it both ways).
        let x = DeviceBuffer::from_slice(on, &[1.0f32; N]);
        note("DeviceBuffer::from_slice", &x);
        let y = DeviceBuffer::from_slice(home, &[k; N]);
        note("DeviceBuffer::from_slice", &y);
        let (Ok(x), Ok(mut y)) = (x, y) else { return };
        let range = self.range;
        let config = LaunchConfig::new(1, N as u32);
        let config = match attr % 5 {
            0 => config,
            1 => config.priority(Priority(range.most_urgent().value() + (u32::from(attr) % range.levels()) as i32)),
            2 => config.mem_sync_domain(MemSyncDomain::Remote),
            3 => config.cooperative(),
            _ => config.programmatic_dependent(),
        };
        let x_ptr = x.as_ptr();
        let declare = self.race_checked;
        let launched = y.use_on(on, |on, y| {
            // Under the race detector the launch declares what it reads and writes: `x` on its
            // home stream, `y` through `use_on`, both ordered by the crate.
            let accesses = [Access::read(x_ptr, N), Access::write(y.cast_const(), N)];
            let config = if declare { config.accesses(&accesses) } else { config };
            // SAFETY: `x` holds N floats homed on `on` (freed there after this launch), `y`
            // holds N floats lent by `use_on` for work enqueued here on `on`.
            unsafe { SAXPY.launch(on, &config, (a, x_ptr, y, N as u32)) }
        });
        let launched = launched.and_then(|done| done);
        note("Kernel::launch (SAXPY)", &launched);
        if launched.is_ok() {
            let values = y.to_vec();
            note("DeviceBuffer::to_vec", &values);
            if let Ok(values) = values {
                let wrong = values.iter().filter(|&&value| value != a + k).count();
                assert_eq!(wrong, 0, "a typed launch (attribute {}) computed {a} * 1 + {k} wrongly", attr % 5);
            }
        }
    }

    /// Stream memory operations on mapped or device words: writes, waits already met, a
    /// batch, an index out of range; the written word read back once the stream is done.
    pub(crate) fn mem_ops(&mut self, s: u32, action: u8, tag: u8, active: Option<&Active<'_>>) {
        let origin = active.map(|active| active.origin);
        let capturing = active.is_some();
        let Some((stream, _)) = self.pick(s, origin) else { return skip() };
        let value = u32::from(tag) + 1;
        match action % 5 {
            0..=2 => {
                let words = MappedWords::<u32>::new(2);
                note("MappedWords::new", &words);
                let Ok(words) = words else { return };
                // Every wait is met already (a word never exceeds 256): nothing waits forever.
                let met = WaitValue::greater_or_equal(0);
                let (result, index) = match action % 5 {
                    0 => (words.write_value(stream, 0, value), 0),
                    1 => (words.wait_value(stream, 0, met).and_then(|()| words.write_value(stream, 1, value)), 1),
                    _ => {
                        let ops = [
                            MemOp::Write { index: 0, value },
                            MemOp::Barrier(BarrierScope::Device),
                            MemOp::Wait { index: 0, wait: met },
                            MemOp::Write { index: 1, value },
                        ];
                        (words.mem_ops(stream, &ops), 1)
                    }
                };
                note("MappedWords (write, wait, batch)", &result);
                if result.is_ok() && !capturing {
                    let synced = stream.synchronize();
                    note("StreamRef::synchronize", &synced);
                    if synced.is_ok() {
                        let seen = words.words()[index].load(Ordering::Acquire);
                        assert_eq!(seen, value, "a word a stream wrote, once the stream is done");
                    }
                }
            }
            3 => {
                let words = MappedWords::<u32>::new(2);
                note("MappedWords::new", &words);
                let Ok(words) = words else { return };
                let result = words.write_value(stream, 2, value);
                note("MappedWords::write_value (out of range)", &result);
                assert!(
                    capturing || matches!(result, Err(Error::WordOutOfRange { index: 2, len: 2 })),
                    "an index out of range is refused before CUDA: {result:?}"
                );
            }
            _ => {
                let words = DeviceWords::<u32>::zeroed(stream, 2);
                note("DeviceWords::zeroed", &words);
                let Ok(words) = words else { return };
                let written = words.write_value(stream, 0, value);
                note("DeviceWords::write_value", &written);
                let values = words.to_vec(stream);
                note("DeviceWords::to_vec", &values);
                if let (Ok(()), Ok(values), false) = (written, values, capturing) {
                    assert_eq!(values, [value, 0], "device words read back after a write on their stream");
                }
            }
        }
    }

    /// SM partitions (skipped for the program when the device makes none) and their streams:
    /// made, used with the program's streams (kernels, waits both ways, host functions,
    /// completions, a buffer, a capture whose graph the program keeps), dropped. Never during
    /// a capture. Partition streams are not slots: a raw borrow of one is refused.
    pub(crate) fn partition(&mut self, pick: u32, action: u8) {
        if self.no_partitions {
            return skip();
        }
        if self.partition_streams.is_empty() || action % 7 == 0 {
            if self.partition_streams.len() >= MAX_PARTITION_STREAMS {
                return skip();
            }
            let partitions: Result<Vec<SmPartition>> = self.device.split_sms(8, 1);
            note("Device::split_sms", &partitions);
            let Ok(partitions) = partitions else {
                self.no_partitions = true;
                return;
            };
            let range = self.range;
            let priority =
                (pick % 2 == 1).then(|| Priority(range.most_urgent().value() + (pick % range.levels()) as i32));
            for partition in &partitions {
                let stream = partition.stream(priority);
                note("SmPartition::stream", &stream);
                if let Ok(stream) = stream {
                    let non_blocking = stream.is_non_blocking();
                    note("StreamRef::is_non_blocking", &non_blocking);
                    if let Ok(non_blocking) = non_blocking {
                        assert!(non_blocking, "a partition's stream is non-blocking");
                    }
                    self.partition_streams.push(stream);
                }
            }
            // The streams keep their partitions alive.
            drop(partitions);
            return;
        }
        let part = &self.partition_streams[pick as usize % self.partition_streams.len()];
        let slot = self.pick(pick / 7, None).map(|(stream, _)| stream);
        match (action % 7, slot) {
            (1, Some(slot)) => {
                note("kernel launch (partition)", &kernel(part, self.log, action, action));
                note("StreamRef::wait_stream (a partition's)", &slot.wait_stream(part));
            }
            (2, Some(slot)) => {
                note("StreamRef::wait_stream (on a partition)", &part.wait_stream(slot));
                let (_, state) = once_host_fn(part, false, pick % 2 == 0);
                self.tokens.push(state);
            }
            (3, _) => {
                note("Completion (partition, block_on)", &block_on(part.completion()));
            }
            (4, Some(slot)) => {
                let buffer = DeviceBuffer::<u32, _>::zeroed(part, 64);
                note("DeviceBuffer::zeroed (partition)", &buffer);
                if let Ok(mut buffer) = buffer {
                    let filled = buffer.fill_bytes(slot, action);
                    note("DeviceBuffer::fill_bytes", &filled);
                    let values = buffer.to_vec();
                    note("DeviceBuffer::to_vec", &values);
                    if let (Ok(()), Ok(values)) = (filled, values) {
                        assert!(values.iter().all(|&value| value == word(action)), "a partition's buffer");
                    }
                }
            }
            (5, _) => {
                let begun = AnyCapture::begin(part, 1 + action % 2);
                note("StreamRef::begin_capture (partition)", &begun);
                if let Ok(capture) = begun {
                    note("kernel launch (partition, captured)", &kernel(part, self.log, action, action));
                    let graph = capture.end();
                    note("Capture::end (partition)", &graph);
                    if let Ok(graph) = graph {
                        if self.graphs.len() < MAX_GRAPHS {
                            self.graphs.push(graph);
                        }
                    }
                }
            }
            (6, _) => {
                let index = pick as usize % self.partition_streams.len();
                drop(self.partition_streams.remove(index));
            }
            _ => skip(),
        }
    }

    /// A graph with an if node whose condition has a default value, built node by node (the
    /// body's tag kernel runs only when the value is nonzero), launched on the log's home
    /// stream and read back. Never during a capture, nor under compute-sanitizer (where every
    /// launch of a graph with a conditional node faults, CUDA 13.0: see
    /// `tests/graph/conditional.rs`).
    pub(crate) fn conditional(&mut self, value: u8, tag: u8) {
        if cuda_stream_tests::under_sanitizer() {
            return skip();
        }
        let Some(home) = self.mem.home(self.device, u32::from(tag)) else { return skip() };
        let log = DeviceBuffer::<u32, _>::zeroed(home, 1 + CAPACITY as usize);
        note("DeviceBuffer::zeroed", &log);
        let Ok(mut log) = log else { return };
        let log_ptr = log.as_mut_ptr();
        let (value, tag) = (u32::from(value % 3), u32::from(tag));
        let graph = Graph::new(self.device);
        note("Graph::new", &graph);
        let Ok(mut graph) = graph else { return };
        // Under the race detector the kernel nodes declare their writes of the log: the graph
        // is launched only on the log's home stream, and the log read back there.
        let log_access = [Access::write(log_ptr.cast_const(), 1 + CAPACITY as usize)];
        let one = LaunchConfig::new(1, 1);
        let one = if self.race_checked { one.accesses(&log_access) } else { one };
        let built = (|| -> Result<()> {
            let mut root = graph.builder();
            let when = root.condition(Some(value))?;
            let (branch, mut body) = root.add_if(&when, &[])?;
            // SAFETY: `log` holds 1 + CAPACITY u32 on the graph's device and outlives every
            // launch of the graph: it is dropped after the executable and a synchronizing read.
            unsafe { body.add_kernel(&MARK, &one, (log_ptr, CAPACITY, tag), &[]) }?;
            drop(body);
            // SAFETY: as above.
            unsafe { root.add_kernel(&MARK, &one, (log_ptr, CAPACITY, tag + 1), &[branch]) }?;
            Ok(())
        })();
        note("GraphBuilder (if node)", &built);
        if built.is_err() {
            return;
        }
        let exec = graph.instantiate();
        note("Graph::instantiate (conditional)", &exec);
        let Ok(exec) = exec else { return };
        let launched = exec.launch(&*log.stream());
        note("GraphExec::launch (conditional)", &launched);
        let values = log.to_vec();
        note("DeviceBuffer::to_vec", &values);
        if let (Ok(()), Ok(values)) = (launched, values) {
            let expected = if value != 0 { vec![2, tag, tag + 1] } else { vec![1, tag + 1] };
            assert_eq!(
                values[..expected.len()],
                expected[..],
                "an if node with the default value {value} ran {values:?}"
            );
        }
        drop(exec);
        drop(graph);
    }
}
