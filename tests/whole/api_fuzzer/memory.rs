//! Memory: device buffers (allocated with or without a memory pool, filled, copied from and to
//! host slices, pinned buffers and each other, used on other streams, dropped here or on another
//! thread), memory pools and pinned buffers, also while a capture is in progress. What the
//! program last wrote to a buffer is tracked, and read back where it is certain.

use super::launches::{CAPACITY, MARK};
use super::*;
use cuda_stream::{Access, DeviceBuffer, LaunchConfig, MemPool, PinnedBuffer};

/// Bounds on what one program holds at a time.
pub(crate) const MAX_BUFFERS: usize = 8;
const MAX_PINNED: usize = 4;
const MAX_POOLS: usize = 2;

/// The lengths buffers are made with (in `u32`s): two, so that some copies are refused for
/// their lengths.
pub(crate) const LENGTHS: [usize; 2] = [64, 256];

/// A device buffer of the program: homed on one of [`Mem::homes`].
pub(crate) type Buffer = DeviceBuffer<u32, Arc<Stream>>;

/// A buffer and what it holds.
pub(crate) struct Buf {
    pub(crate) buffer: Buffer,
    /// `Some(byte)` when every byte is certainly `byte`: the last write through the buffer was
    /// made (and returned `Ok`) while no capture was in progress. `None` when unknown.
    pub(crate) holds: Option<u8>,
    /// Graphs may hold its memory apart from it (it was given to them borrowed, then handed
    /// back to the program): their launches write it unseen, so what it holds is never known.
    pub(crate) held_apart: bool,
}

impl Buf {
    /// What it holds after a write: `holds`, unless graphs may write it unseen.
    fn set_holds(&mut self, holds: Option<u8>) {
        self.holds = if self.held_apart { None } else { holds };
    }

    /// After a write during a capture: one that went through (a fill, a copy between buffers
    /// or a typed launch, on a stream of the capture) may be a node of its graph, which holds
    /// the memory and writes it at every launch, unseen. Whether it may.
    fn captured_if<T>(&mut self, result: &Result<T>, capturing: bool) -> bool {
        let captured = capturing && result.is_ok();
        self.held_apart |= captured;
        captured
    }
}

/// A pinned buffer and what it holds, as [`Buf::holds`].
pub(crate) struct Pin {
    pub(crate) buffer: PinnedBuffer<u32>,
    pub(crate) holds: Option<u8>,
}

/// The memory a program holds.
#[derive(Default)]
pub(crate) struct Mem {
    /// The home streams of the buffers (made on demand, never captured: no operation of the
    /// program other than the memory ones reaches them).
    pub(crate) homes: Vec<Arc<Stream>>,
    pub(crate) buffers: Vec<Buf>,
    pub(crate) pinned: Vec<Pin>,
    pub(crate) pools: Vec<MemPool>,
    /// `MemPool::new` failed outside a capture: pools are not made again in this program.
    pub(crate) no_pools: bool,
}

impl Mem {
    /// A home stream, by `pick`: made on demand, one non-blocking and one blocking.
    pub(crate) fn home(&mut self, device: Device, pick: u32) -> Option<Arc<Stream>> {
        if self.homes.len() < 2 {
            let non_blocking = self.homes.is_empty();
            let options = if non_blocking { StreamOptions::non_blocking() } else { StreamOptions::default() };
            let stream = Stream::new(device, options);
            note("Stream::new (a buffer's home)", &stream);
            if let Ok(stream) = stream {
                self.homes.push(Arc::new(stream));
            }
        }
        (!self.homes.is_empty()).then(|| Arc::clone(&self.homes[pick as usize % self.homes.len()]))
    }

    /// Drops everything in a random order, buffers before their homes.
    pub(crate) fn drop_all(&mut self, rng: &mut Rng) {
        while !self.buffers.is_empty() || !self.pinned.is_empty() || !self.pools.is_empty() {
            match rng.below(3) {
                0 if !self.buffers.is_empty() => drop(self.buffers.swap_remove(rng.below(self.buffers.len()))),
                1 if !self.pinned.is_empty() => drop(self.pinned.swap_remove(rng.below(self.pinned.len()))),
                2 if !self.pools.is_empty() => drop(self.pools.swap_remove(rng.below(self.pools.len()))),
                _ => {}
            }
        }
        self.homes.clear();
    }
}

/// The `u32` whose four bytes are `tag`.
pub(crate) fn word(tag: u8) -> u32 {
    u32::from_ne_bytes([tag; 4])
}

/// A stream for an operation, as [`World::pick`], from the slots alone (so that the program's
/// memory can be borrowed mutably meanwhile).
pub(crate) fn pick_in<'a>(slots: &'a [Slot], pick: u32, origin: Option<&'a Stream>) -> Option<&'a StreamRef> {
    if let Some(origin) = origin {
        if pick % 3 == 0 || slots.is_empty() {
            return Some(origin);
        }
    }
    (!slots.is_empty()).then(|| &*slots[pick as usize % slots.len()].stream)
}

/// The index of the buffer `b` picks among `buffers` and the stream `s` picks for a use of it
/// (see [`pick_in`]); `None` (the operation is skipped) while there is no buffer or no stream.
fn buffer_use<'a>(
    buffers: usize,
    slots: &'a [Slot],
    b: u32,
    s: u32,
    origin: Option<&'a Stream>,
) -> Option<(usize, &'a StreamRef)> {
    if buffers == 0 {
        return None;
    }
    Some((b as usize % buffers, pick_in(slots, s, origin)?))
}

/// Two distinct elements of `items`, the first mutable.
fn two<T>(items: &mut [T], first: usize, second: usize) -> (&mut T, &T) {
    assert_ne!(first, second);
    if first < second {
        let (low, high) = items.split_at_mut(second);
        (&mut low[first], &high[0])
    } else {
        let (low, high) = items.split_at_mut(first);
        (&mut high[0], &low[second])
    }
}

/// What a buffer holds after a write that gave `result` and would leave `written`: known only
/// for an `Ok` made while no capture was in progress.
fn after_write<T>(result: &Result<T>, capturing: bool, written: Option<u8>) -> Option<u8> {
    if result.is_ok() && !capturing { written } else { None }
}

/// A copy between buffers of different lengths is refused for its size, before anything else.
fn expect_size<T: std::fmt::Debug>(what: &str, result: &Result<T>) {
    assert!(matches!(result, Err(Error::Size(_))), "{what} between different lengths must be refused: {result:?}");
}

/// Values read back from a buffer whose bytes are known.
pub(crate) fn expect_bytes(what: &str, holds: Option<u8>, values: &[u32]) {
    if let Some(tag) = holds {
        let wrong = values.iter().filter(|&&value| value != word(tag)).count();
        assert_eq!(
            wrong,
            0,
            "{what}: {wrong} of {} words differ from {:#010x}, what the last ordered write left (first {:?})",
            values.len(),
            word(tag),
            values.iter().find(|&&value| value != word(tag))
        );
    }
}

/// The capture in progress, to be checked after a refused call: only while it is intact and no
/// completion of the program is pending (the reactor's queries may invalidate it meanwhile).
fn watch<'a, 'b>(active: Option<&'a Active<'b>>, quiet: bool) -> Option<&'a Active<'b>> {
    active.filter(|active| quiet && capture_intact(active.origin, active.capture.id()))
}

/// Notes `result` of `what`; a call refused with `CaptureMisuse` was refused before CUDA saw
/// it: the capture is intact.
fn note_intact<T>(watched: Option<&Active<'_>>, what: &str, result: &Result<T>) {
    note(what, result);
    if let (Some(active), Err(Error::CaptureMisuse(_))) = (watched, result) {
        assert!(
            capture_intact(active.origin, active.capture.id()),
            "{what}: a call refused with CaptureMisuse must leave the capture in progress intact"
        );
    }
}

/// `bytes` set to `byte` on `stream`, as a launch inside `use_on` (an untyped write the crate
/// only orders).
fn raw_fill(stream: &StreamRef, ptr: *mut u32, bytes: usize, byte: u8) -> Result<()> {
    // SAFETY: `ptr` is the address `use_on` lent for `stream`: a live allocation of `bytes`
    // bytes on the stream's device, used only by work enqueued here, on `stream`.
    let code = unsafe { sys::cudaMemsetAsync(ptr.cast(), i32::from(byte), bytes, stream.as_raw()) };
    check(code, "cudaMemsetAsync")
}

impl<'p> World<'p> {
    /// A new device buffer: uninitialized (perhaps from a pool of the program), zeroed, or
    /// made from a slice of `tag`s.
    pub(crate) fn buffer_new(&mut self, s: u32, how: u8, len: u8, tag: u8, active: Option<&Active<'_>>) {
        let capturing = active.is_some();
        let watched = watch(active, self.quiet());
        if self.mem.buffers.len() >= MAX_BUFFERS {
            return skip();
        }
        let Some(home) = self.mem.home(self.device, s) else { return skip() };
        let len = LENGTHS[usize::from(len) % LENGTHS.len()];
        let (made, written) = match how % 4 {
            0 => (Buffer::new(home, len), None),
            1 if !self.mem.pools.is_empty() => {
                let pool = &self.mem.pools[usize::from(tag) % self.mem.pools.len()];
                (Buffer::new_in(pool, home, len), None)
            }
            1 | 2 => (Buffer::zeroed(home, len), Some(0)),
            _ => (Buffer::from_slice(home, &vec![word(tag); len]), Some(tag)),
        };
        note_intact(watched, "DeviceBuffer::new", &made);
        let holds = after_write(&made, capturing, written);
        if let Ok(buffer) = made {
            assert_eq!(buffer.len(), len, "a buffer has the length it was made with");
            self.mem.buffers.push(Buf { buffer, holds, held_apart: false });
        }
    }

    /// A write to a buffer, on any stream of the program (the captured one too): a fill, a
    /// copy from a slice, another buffer or a pinned buffer, or an untyped write (or a kernel
    /// that writes nothing) through `use_on`.
    pub(crate) fn buffer_write(&mut self, b: u32, s: u32, how: u8, tag: u8, other: u32, active: Option<&Active<'_>>) {
        let origin = active.map(|active| active.origin);
        let capturing = active.is_some();
        let watched = watch(active, self.quiet());
        let declare = self.race_checked;
        let Some((index, stream)) = buffer_use(self.mem.buffers.len(), &self.slots, b, s, origin) else {
            return skip();
        };
        let mem = &mut self.mem;
        // A write that the capture may have taken: its graph may hold the buffer.
        let mut captured = false;
        match how % 6 {
            0 => {
                let result = mem.buffers[index].buffer.fill_bytes(stream, tag);
                note_intact(watched, "DeviceBuffer::fill_bytes", &result);
                captured = mem.buffers[index].captured_if(&result, capturing);
                mem.buffers[index].set_holds(after_write(&result, capturing, Some(tag)));
            }
            1 => {
                let buf = &mut mem.buffers[index];
                let result = buf.buffer.copy_from_slice(stream, &vec![word(tag); buf.buffer.len()]);
                note_intact(watched, "DeviceBuffer::copy_from_slice", &result);
                buf.set_holds(after_write(&result, capturing, Some(tag)));
            }
            2 => {
                let from = other as usize % mem.buffers.len();
                if from == index {
                    return skip();
                }
                let (to, from) = two(&mut mem.buffers, index, from);
                let result = to.buffer.copy_from(stream, &from.buffer);
                note_intact(watched, "DeviceBuffer::copy_from", &result);
                if to.buffer.len() != from.buffer.len() {
                    expect_size("DeviceBuffer::copy_from", &result);
                }
                captured = to.captured_if(&result, capturing);
                to.set_holds(after_write(&result, capturing, from.holds));
            }
            3 => {
                if mem.pinned.is_empty() {
                    return skip();
                }
                let at = other as usize % mem.pinned.len();
                let pin = &mut mem.pinned[at];
                let buf = &mut mem.buffers[index];
                let result = buf.buffer.copy_from_pinned(stream, &mut pin.buffer);
                note_intact(watched, "DeviceBuffer::copy_from_pinned", &result);
                if buf.buffer.len() != pin.buffer.len() {
                    expect_size("DeviceBuffer::copy_from_pinned", &result);
                }
                buf.set_holds(after_write(&result, capturing, pin.holds));
            }
            4 => {
                let buf = &mut mem.buffers[index];
                let (len, bytes) = (buf.buffer.len(), buf.buffer.len() * size_of::<u32>());
                let fill = |on: &StreamRef, ptr: *mut u32| {
                    // Under the race detector the raw fill is declared: `use_on` orders it.
                    if declare {
                        on.declare_accesses("use_on: cudaMemsetAsync (raw)", &[Access::write(ptr.cast_const(), len)])?;
                    }
                    raw_fill(on, ptr, bytes, tag)
                };
                let result = buf.buffer.use_on(stream, fill).and_then(|done| done);
                note_intact(watched, "DeviceBuffer::use_on (a fill)", &result);
                buf.set_holds(after_write(&result, capturing, Some(tag)));
            }
            5 if tag % 2 == 0 => {
                // A typed launch given the buffer itself (captured during a capture of the
                // program): the kernel counts in word 0 and writes the tag after it.
                let buf = &mut mem.buffers[index];
                let config = LaunchConfig::new(1, 1);
                // SAFETY: the kernel writes at most 1 + CAPACITY words, fewer than any buffer has.
                let result = unsafe { MARK.launch(stream, &config, (&mut buf.buffer, CAPACITY, u32::from(tag))) };
                note_intact(watched, "Kernel::launch (a buffer argument)", &result);
                captured = buf.captured_if(&result, capturing);
                buf.set_holds(None);
            }
            _ => {
                let buf = &mut mem.buffers[index];
                let result = buf.buffer.use_on(stream, |on, _| cuda_stream_tests::empty(on)).and_then(|done| done);
                note_intact(watched, "DeviceBuffer::use_on (a kernel)", &result);
                let kept = buf.holds;
                buf.set_holds(after_write(&result, capturing, kept));
            }
        }
        if let (true, Some(active)) = (captured, active) {
            self.graph_mem.program_buffer_captured(active.generation);
        }
    }

    /// A read of a buffer: into a slice (checked where its bytes are known), into a pinned
    /// buffer, or into a slice of the wrong length (refused).
    pub(crate) fn buffer_read(&mut self, b: u32, s: u32, how: u8, other: u32, active: Option<&Active<'_>>) {
        let origin = active.map(|active| active.origin);
        let capturing = active.is_some();
        let watched = watch(active, self.quiet());
        let Some((index, stream)) = buffer_use(self.mem.buffers.len(), &self.slots, b, s, origin) else {
            return skip();
        };
        let mem = &mut self.mem;
        let buf = &mem.buffers[index];
        match how % 4 {
            0 => {
                let mut values = vec![0u32; buf.buffer.len()];
                let result = buf.buffer.copy_to_slice(stream, &mut values);
                note_intact(watched, "DeviceBuffer::copy_to_slice", &result);
                if result.is_ok() && !capturing {
                    expect_bytes("DeviceBuffer::copy_to_slice", buf.holds, &values);
                }
            }
            1 => {
                let values = buf.buffer.to_vec();
                note_intact(watched, "DeviceBuffer::to_vec", &values);
                if let (Ok(values), false) = (&values, capturing) {
                    assert_eq!(values.len(), buf.buffer.len(), "to_vec gives every element");
                    expect_bytes("DeviceBuffer::to_vec", buf.holds, values);
                }
            }
            2 => {
                if mem.pinned.is_empty() {
                    return skip();
                }
                let at = other as usize % mem.pinned.len();
                let pin = &mut mem.pinned[at];
                let result = buf.buffer.copy_to_pinned(stream, &mut pin.buffer);
                note_intact(watched, "DeviceBuffer::copy_to_pinned", &result);
                if buf.buffer.len() != pin.buffer.len() {
                    expect_size("DeviceBuffer::copy_to_pinned", &result);
                }
                // A refused copy leaves the pinned buffer as it was only if nothing was
                // enqueued: unknown either way.
                pin.holds = after_write(&result, capturing, buf.holds);
            }
            _ => {
                let mut values = vec![0u32; buf.buffer.len() + 1];
                let result = buf.buffer.copy_to_slice(stream, &mut values);
                note_intact(watched, "DeviceBuffer::copy_to_slice (wrong length)", &result);
                expect_size("DeviceBuffer::copy_to_slice", &result);
            }
        }
    }

    /// Drops a buffer, here or on a thread of its own (its free goes on its home stream).
    pub(crate) fn buffer_drop(&mut self, b: u32, elsewhere: bool) {
        if self.mem.buffers.is_empty() {
            return skip();
        }
        let buf = self.mem.buffers.remove(b as usize % self.mem.buffers.len());
        if elsewhere {
            let dropped = std::thread::spawn(move || drop(buf)).join();
            assert!(dropped.is_ok(), "a device buffer dropped on another thread panicked");
        } else {
            drop(buf);
        }
    }

    /// Pinned buffers: made zeroed or from a slice, read and written on the host (after the
    /// copies in flight; checked where known), dropped here or on another thread.
    pub(crate) fn pinned_op(&mut self, p: u32, action: u8, tag: u8, capturing: bool) {
        let pinned = &mut self.mem.pinned;
        let index = (!pinned.is_empty()).then(|| p as usize % pinned.len());
        match (action % 6, index) {
            (0 | 1, _) => {
                if pinned.len() >= MAX_PINNED {
                    return skip();
                }
                let len = LENGTHS[usize::from(tag) % LENGTHS.len()];
                let (made, written) = if action % 6 == 0 {
                    (PinnedBuffer::zeroed(len), Some(0))
                } else {
                    (PinnedBuffer::from_slice(&vec![word(tag); len]), Some(tag))
                };
                note("PinnedBuffer::new", &made);
                if let Ok(buffer) = made {
                    assert_eq!(buffer.len(), len, "a pinned buffer has the length it was made with");
                    pinned.push(Pin { buffer, holds: written });
                }
            }
            (2, Some(index)) => {
                let pin = &mut pinned[index];
                let holds = pin.holds;
                let values = pin.buffer.as_slice();
                note("PinnedBuffer::as_slice", &values);
                if let (Ok(values), false) = (values, capturing) {
                    expect_bytes("PinnedBuffer::as_slice", holds, values);
                }
            }
            (3, Some(index)) => {
                let pin = &mut pinned[index];
                let values = pin.buffer.as_mut_slice();
                note("PinnedBuffer::as_mut_slice", &values);
                match values {
                    Ok(values) => {
                        values.fill(word(tag));
                        pin.holds = Some(tag);
                    }
                    Err(_) => pin.holds = None,
                }
            }
            (4, Some(index)) => drop(pinned.remove(index)),
            (_, Some(index)) => {
                let pin = pinned.remove(index);
                let dropped = std::thread::spawn(move || drop(pin)).join();
                assert!(dropped.is_ok(), "a pinned buffer dropped on another thread panicked");
            }
            (_, None) => skip(),
        }
    }

    /// Memory pools: made (buffers then draw from them), trimmed, asked for their figures, and
    /// dropped with buffers of theirs still alive.
    pub(crate) fn pool_mem_op(&mut self, action: u8, bytes: u32, capturing: bool) {
        let mem = &mut self.mem;
        match action % 4 {
            0 => {
                if mem.no_pools || mem.pools.len() >= MAX_POOLS {
                    return skip();
                }
                let pool = MemPool::new(self.device);
                note("MemPool::new", &pool);
                match pool {
                    Ok(pool) => {
                        assert_eq!(pool.device(), self.device, "a pool is of the device it was made on");
                        mem.pools.push(pool);
                    }
                    Err(_) if !capturing => mem.no_pools = true,
                    Err(_) => {}
                }
            }
            _ if mem.pools.is_empty() => skip(),
            1 => {
                let pool = &mem.pools[bytes as usize % mem.pools.len()];
                note("MemPool::trim_to", &pool.trim_to(bytes as usize % (1 << 20)));
            }
            2 => {
                let pool = &mem.pools[bytes as usize % mem.pools.len()];
                note("MemPool::stats", &pool.stats());
            }
            _ => {
                let index = bytes as usize % mem.pools.len();
                drop(mem.pools.remove(index));
            }
        }
    }
}
