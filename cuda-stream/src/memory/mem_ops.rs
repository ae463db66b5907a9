//! Stream memory operations
//! ([CUDA_MEMOP](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)): a
//! stream that waits until a 32- or 64-bit word in memory meets a condition
//! (`cuStreamWaitValue32`/`64`), a stream that writes a word (`cuStreamWriteValue32`/`64`),
//! and both, with memory barriers, in one call (`cuStreamBatchMemOp`). The driver's `_v2`
//! entry points, fetched by version 12000.
//!
//! # The words
//! The operations take *words*, never a raw address, in safe code:
//! * [`MappedWords`]: host memory mapped into every device's address space
//!   (`cudaHostAlloc` with `cudaHostAllocMapped | cudaHostAllocPortable`; with unified
//!   addressing the device address is the host address). The host reads and writes them only
//!   through atomics ([`MappedWords::words`]) while streams wait on them and write them: a
//!   stream held until the host writes a value, a flag a stream raises for the host.
//! * [`DeviceWords`]: device memory of one device (`cudaMalloc`): streams and kernels of that
//!   device signal each other through it without a trip to the host; the host reads it with a
//!   copy ([`DeviceWords::to_vec`]).
//!
//! # The race detector does not see them
//! Memory operations tell the [race detector](crate::race) nothing, neither the words they
//! touch nor the order they make. Their words are how streams and the host signal each other:
//! a wait on a value and the write that meets it order work at run time, by which write comes
//! first, not by an event enqueued before, so the detector's model (records, waits,
//! synchronizes) has no edge for them. Told of their accesses, it would report the signalling
//! itself as races (a stream writes a word that another stream waits on, with no event
//! between); not told, work ordered only by a memory operation may be reported as racing. Work
//! whose order rests on memory operations is best checked with the detector off for it
//! ([`race_scope`](crate::race_scope) with [`RaceMode::Off`](crate::RaceMode::Off)).
//!
//! Not a [`DeviceBuffer`](crate::DeviceBuffer): CUDA refuses stream memory operations on
//! memory of the stream-ordered allocator (`cudaMallocAsync`, default and explicit pools:
//! `CUDA_ERROR_INVALID_VALUE`, probed on CUDA 13.0, driver 580), while `cudaMalloc` memory
//! and mapped host memory work. Nor pageable memory (refused the same way).
//!
//! # Lifetimes: the memory outlives every operation, and a drop never waits
//! A word may be waited on by a stream for as long as nobody writes it, so a drop cannot wait
//! for the operations: it would block forever. And the memory cannot go back to CUDA while
//! any stream of the device waits: `cudaFreeHost`, `cudaHostUnregister` and `cudaFree` all
//! block until **every** stream of the device is idle (probed on driver 580: each blocked for
//! as long as an unrelated stream waited for a value, while `cudaHostAlloc`, `cudaMalloc`,
//! stream and event creation returned at once). So:
//! * Words are carved from blocks this crate allocates once and never frees: a dropped
//!   [`MappedWords`] or [`DeviceWords`] returns its block to a free list of the process, from
//!   which a later allocation of the same size class takes it (zeroed). The pinned and device
//!   memory kept is the most the process had in use at once (in blocks of a power of two
//!   bytes, at least 64; small ones carved from 64 KiB). [`live_words`] counts the blocks in
//!   use.
//! * A block goes back to the free list only once no operation may touch it: each operation
//!   (outside a capture) records an internal event after it on its stream (one event per
//!   stream, recorded again); the drop returns the block at once if those events have
//!   completed, and otherwise hands it to a host function on a private stream of each device
//!   involved that waits for them: the block returns when that runs. The drop itself makes a
//!   few asynchronous calls and returns: it never waits for the device, so dropping the words
//!   a stream waits on (while another stream will write them, say) neither blocks nor frees
//!   early. Where even that cannot be arranged (a fault, inside a host function's own CUDA
//!   ban it moves to another thread first), the block is leaked, never reused.
//! * In a capture, an operation becomes a graph node that every launch replays: the graph
//!   itself keeps the block (a CUDA user object holding a reference), for as long as the graph
//!   or an executable made from it exists. A stream that waits on a value nobody writes keeps
//!   its block until the process ends.
//! * Kernels reach the words through [`MappedWords::use_on`] / [`DeviceWords::use_on`], which
//!   note the use like an operation; the raw address ([`MappedWords::as_ptr`]) is for the
//!   rest, under the launch's own `unsafe` contract.
//!
//! # Bounds, alignment, support
//! Indices are checked before CUDA sees them ([`Error::WordOutOfRange`]); words are aligned to
//! their size by construction, and the raw entry points ([`StreamRef::wait_value_raw`],
//! [`StreamRef::write_value_raw`]) refuse a null or misaligned address
//! ([`Error::MisalignedWord`]). A batch holds at most 255 operations (CUDA: "less than 256";
//! [`Error::Size`] beyond). What a device supports is in [`MemOpSupport`]: 64-bit
//! operations, [`Condition::Nor`], and [`WaitValue::with_flush`] (remote-write flushes; not on
//! an H100 or H200, where CUDA returns `cudaErrorNotSupported`); CUDA's own error is returned
//! for what the device lacks.
//!
//! # Writes and barriers
//! A write is preceded by a memory fence, scoped to the stream, with the semantics of
//! `__threadfence_system()`: the `_v2` calls have no other mode (they refuse the v1 flag
//! `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER` with `cudaErrorInvalidValue`). An explicit
//! barrier, of system or device scope, is a batch operation: [`MemOp::Barrier`].
//!
//! # What CUDA does not see
//! NVIDIA: "Synchronization ordering established through these APIs is not visible to CUDA":
//! a stream waiting for a word that a later kernel of the *same* stream writes waits forever,
//! and work ordered only through words should also be ordered through events where CUDA's
//! scheduler must know it. Operations on words are not ordered with each other across streams
//! (that is their purpose): order them as you order kernels.

use super::DeviceCopy;
use crate::call::live_captures;
use crate::call::sync_debug::{self, SyncKind};
use crate::call::transitions::no_capture_transitions;
use crate::device::keep_alive::{graph_mutations, keep_alive};
use crate::device::{Device, same_device};
use crate::event::Event;
use crate::ffi::driver::{self, MemOpParams};
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::{call_outside_host_fn, refuse_inside_host_fn};
use crate::stream::capture_status::{CaptureStatus, capture_state};
use crate::stream::{AsStream, Builtin, Stream, StreamOptions, StreamRef};
use crate::sys;
use std::ffi::{c_uint, c_void};
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A word that stream memory operations wait on and write: `u32` or `u64` (64-bit operations
/// need [`MemOpSupport::sixty_four_bit`]). Sealed.
pub trait Word: DeviceCopy + Eq + Hash + fmt::Debug + sealed::Sealed {
    /// The atomic type of the same size and alignment, through which the host reads and
    /// writes mapped words ([`MappedWords::words`]).
    type Atomic: Send + Sync + fmt::Debug;
}

mod sealed {
    /// What the operations need of a word, in terms the driver takes.
    pub trait Sealed: Copy {
        /// 64 bits wide (else 32).
        const WIDE: bool;
        /// The value, zero-extended.
        fn to_bits(self) -> u64;
    }
}

impl Word for u32 {
    type Atomic = AtomicU32;
}

impl sealed::Sealed for u32 {
    const WIDE: bool = false;
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
}

impl Word for u64 {
    type Atomic = AtomicU64;
}

impl sealed::Sealed for u64 {
    const WIDE: bool = true;
    fn to_bits(self) -> u64 {
        self
    }
}

// The atomic views of the words: the same size and alignment as the words (std documents the
// same size and bit validity; the alignment is checked here).
const _: () = {
    assert!(size_of::<AtomicU32>() == 4 && align_of::<AtomicU32>() == 4);
    assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
};

/// The condition of a wait (`CUstreamWaitValue_flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Condition {
    /// `CU_STREAM_WAIT_VALUE_GEQ`: `(int32_t)(*addr - value) >= 0` (`int64_t` for 64-bit
    /// words), a *cyclic* greater-or-equal that ignores wraparound: a counter that wrapped past
    /// zero still counts as ahead of a value less than 2³¹ (2⁶³) behind it.
    GreaterOrEqual,
    /// `CU_STREAM_WAIT_VALUE_EQ`: `*addr == value`.
    Equal,
    /// `CU_STREAM_WAIT_VALUE_AND`: `(*addr & value) != 0`, some bit of the mask is set.
    And,
    /// `CU_STREAM_WAIT_VALUE_NOR`: `~(*addr | value) != 0`, some bit is clear in both the
    /// word and the value. Needs [`MemOpSupport::wait_nor`].
    Nor,
}

/// What a stream waits for: a [`Condition`] against a value, optionally followed by a flush
/// of remote writes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaitValue<W> {
    /// The comparison.
    pub condition: Condition,
    /// The value (a mask for [`Condition::And`] and [`Condition::Nor`]).
    pub value: W,
    /// `CU_STREAM_WAIT_VALUE_FLUSH`: after the wait, remote writes that reached the device
    /// before the wait was satisfied are visible to later work. Needs
    /// [`MemOpSupport::flush_remote_writes`] (`cudaErrorNotSupported` otherwise).
    pub flush: bool,
}

impl<W: Word> WaitValue<W> {
    /// Until the word is at least `value`, cyclically ([`Condition::GreaterOrEqual`]).
    pub fn greater_or_equal(value: W) -> WaitValue<W> {
        WaitValue { condition: Condition::GreaterOrEqual, value, flush: false }
    }

    /// Until the word equals `value` ([`Condition::Equal`]).
    pub fn equal(value: W) -> WaitValue<W> {
        WaitValue { condition: Condition::Equal, value, flush: false }
    }

    /// Until the word has a bit of `mask` set ([`Condition::And`]).
    pub fn and(mask: W) -> WaitValue<W> {
        WaitValue { condition: Condition::And, value: mask, flush: false }
    }

    /// Until some bit is clear in both the word and `value` ([`Condition::Nor`]).
    pub fn nor(value: W) -> WaitValue<W> {
        WaitValue { condition: Condition::Nor, value, flush: false }
    }

    /// The same wait, followed by a flush of remote writes (`CU_STREAM_WAIT_VALUE_FLUSH`).
    pub fn with_flush(self) -> WaitValue<W> {
        WaitValue { flush: true, ..self }
    }

    /// Whether a word holding `word` releases this wait: the condition as CUDA states it,
    /// evaluated on the host.
    pub fn is_met_by(&self, word: W) -> bool {
        let (word, value) = (word.to_bits(), self.value.to_bits());
        let bits = if W::WIDE { u64::MAX } else { u64::from(u32::MAX) };
        match self.condition {
            Condition::GreaterOrEqual if W::WIDE => (word.wrapping_sub(value) as i64) >= 0,
            Condition::GreaterOrEqual => ((word as u32).wrapping_sub(value as u32) as i32) >= 0,
            Condition::Equal => word == value,
            Condition::And => word & value != 0,
            Condition::Nor => !(word | value) & bits != 0,
        }
    }

    fn flags(&self) -> c_uint {
        let condition = match self.condition {
            Condition::GreaterOrEqual => driver::WAIT_VALUE_GEQ,
            Condition::Equal => driver::WAIT_VALUE_EQ,
            Condition::And => driver::WAIT_VALUE_AND,
            Condition::Nor => driver::WAIT_VALUE_NOR,
        };
        if self.flush { condition | driver::WAIT_VALUE_FLUSH } else { condition }
    }
}

/// The scope of a [`MemOp::Barrier`] (`CUstreamMemoryBarrier_flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BarrierScope {
    /// `CU_STREAM_MEMORY_BARRIER_TYPE_SYS`: system-wide (host and peers see the order).
    System,
    /// `CU_STREAM_MEMORY_BARRIER_TYPE_GPU`: limited to the GPU.
    Device,
}

/// One operation of a batch ([`MappedWords::mem_ops`], [`DeviceWords::mem_ops`]:
/// `cuStreamBatchMemOp`), on the words of one [`MappedWords`] or [`DeviceWords`] by index.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemOp<W> {
    /// Later operations and work wait until word `index` meets `wait`.
    Wait {
        /// Which word.
        index: usize,
        /// The condition.
        wait: WaitValue<W>,
    },
    /// Writes `value` to word `index`, after a memory fence.
    Write {
        /// Which word.
        index: usize,
        /// The value.
        value: W,
    },
    /// A memory barrier (`CU_STREAM_MEM_OP_BARRIER`, a `_v2` operation).
    Barrier(BarrierScope),
    /// `CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES`: what [`WaitValue::with_flush`] does, alone.
    /// Needs [`MemOpSupport::flush_remote_writes`].
    FlushRemoteWrites,
}

/// What a device supports of stream memory operations (`cuDeviceGetAttribute`). Plain waits
/// and writes of 32-bit words need nothing (CUDA 12 and later).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemOpSupport {
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS`: waits and writes of `u64` words.
    pub sixty_four_bit: bool,
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR`: [`Condition::Nor`].
    pub wait_nor: bool,
    /// `CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES`: [`WaitValue::with_flush`] and
    /// [`MemOp::FlushRemoteWrites`] (a platform feature; not on an H100 or H200).
    pub flush_remote_writes: bool,
}

impl MemOpSupport {
    /// What `device` supports
    /// ([`cuDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    ///
    /// # Errors
    /// [`Error::InsideHostFn`]; CUDA's errors (an invalid device).
    pub fn of(device: Device) -> Result<MemOpSupport> {
        refuse_inside_host_fn()?;
        let attribute = |attribute| driver::device_attribute(device.ordinal(), attribute).map(|value| value != 0);
        Ok(MemOpSupport {
            sixty_four_bit: attribute(driver::ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)?,
            wait_nor: attribute(driver::ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR)?,
            flush_remote_writes: attribute(driver::ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES)?,
        })
    }
}

/// How many blocks of words are in use: held by a [`MappedWords`] or [`DeviceWords`], by an
/// operation that may still touch them, or by a graph that replays operations on them. A
/// block returns to the free list (and this count falls) once none of these holds it.
pub fn live_words() -> usize {
    LIVE_BLOCKS.load(Ordering::SeqCst)
}

/// Host memory mapped into every device's address space, as `len` words of `W` that the host
/// reads and writes with atomics while streams wait on them and write them. See the
/// [module docs](crate::memory::mem_ops) for the rules (lifetimes, capture, support).
///
/// ```no_run
/// use cuda_stream::{Device, MappedWords, Stream, StreamOptions, WaitValue};
/// use std::sync::atomic::Ordering;
///
/// # fn main() -> cuda_stream::Result<()> {
/// let stream = Stream::new(Device::new(0)?, StreamOptions::non_blocking())?;
/// let gate = MappedWords::<u32>::new(1)?;
/// gate.wait_value(&stream, 0, WaitValue::greater_or_equal(1))?;
/// // ... work enqueued on `stream` now waits ...
/// gate.words()[0].store(1, Ordering::Release); // ... and runs
/// stream.synchronize()?;
/// # Ok(())
/// # }
/// ```
pub struct MappedWords<W: Word> {
    words: Words<W>,
}

/// Device memory of one device, as `len` words of `W` that streams and kernels of that device
/// wait on and write. See the [module docs](crate::memory::mem_ops).
pub struct DeviceWords<W: Word> {
    words: Words<W>,
}

impl<W: Word> MappedWords<W> {
    /// `len` zeroed words of mapped, portable host memory: a block from the free list, or one
    /// carved from new memory
    /// ([`cudaHostAlloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)
    /// with `cudaHostAllocMapped | cudaHostAllocPortable`).
    ///
    /// # Errors
    /// [`Error::Size`] for zero words or an overflowing size; [`Error::InsideHostFn`];
    /// [`Error::CaptureMisuse`] where a capture of this crate forbids the allocation (on this
    /// thread, or any thread's Global capture); CUDA's errors; `cudaErrorNotSupported` under
    /// `cudaHostGetDevicePointer` where the device address differs from the host address (no
    /// unified addressing).
    pub fn new(len: usize) -> Result<MappedWords<W>> {
        let words = Words::new(Place::Host, len)?;
        // SAFETY: `len` words of host memory this block alone owns (it came from the free list,
        // which no operation touches, or is new); all-zero bytes are a `W`.
        unsafe { words.block.address.cast::<u8>().write_bytes(0, words.len * size_of::<W>()) };
        Ok(MappedWords { words })
    }

    /// The number of words.
    pub fn len(&self) -> usize {
        self.words.len
    }

    /// Always `false`: there is at least one word.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The words, as the host reads and writes them: atomics only, since streams and kernels
    /// write them at any time. A store is seen by a waiting stream without further ado; use
    /// `Release` stores and `Acquire` loads to order other host memory with it.
    pub fn words(&self) -> &[W::Atomic] {
        // SAFETY: `len` words of live host memory held by this value's block, aligned to the
        // block's 64 bytes and the word size; each `W::Atomic` has the size and alignment of
        // `W` (asserted above) and every bit pattern is a value. All access through `&self` is
        // atomic, and the GPU's writes are aligned word stores.
        unsafe { std::slice::from_raw_parts(self.words.block.address.cast::<W::Atomic>(), self.words.len) }
    }

    /// The address of the first word, the same on the host and on every device (unified
    /// addressing). Kernels launched with it outside [`MappedWords::use_on`] are not tracked:
    /// their launch's `unsafe` contract must keep the words alive until they have run.
    pub fn as_ptr(&self) -> *mut W {
        self.words.block.address.cast()
    }

    /// Makes later work on `stream` wait until word `index` meets `wait`
    /// ([`cuStreamWaitValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    /// On a capturing stream, the wait becomes a node of the graph, which keeps the words'
    /// memory for as long as it exists.
    ///
    /// # Errors
    /// [`Error::WordOutOfRange`]; [`Error::InsideHostFn`], [`Error::WrongThread`] and
    /// [`Error::CaptureMisuse`] as for any enqueue; CUDA's errors (`cudaErrorNotSupported` for
    /// what [`MemOpSupport`] says the device lacks), named `cuStreamWaitValue32`/`64`; an
    /// error recording the internal event after it (then the memory is never reused).
    pub fn wait_value(&self, stream: impl AsStream, index: usize, wait: WaitValue<W>) -> Result<()> {
        self.words.wait_value(&stream.as_stream(), index, wait)
    }

    /// Writes `value` to word `index` on `stream`, after a memory fence
    /// ([`cuStreamWriteValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)):
    /// once the stream's earlier work is done, the host sees the value, and so does whatever
    /// that work wrote.
    ///
    /// # Errors
    /// As [`MappedWords::wait_value`], named `cuStreamWriteValue32`/`64`.
    pub fn write_value(&self, stream: impl AsStream, index: usize, value: W) -> Result<()> {
        self.words.write_value(&stream.as_stream(), index, value)
    }

    /// Enqueues `ops` on `stream` in order, in one call
    /// ([`cuStreamBatchMemOp`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    /// An empty batch enqueues nothing.
    ///
    /// # Errors
    /// [`Error::Size`] for more than 255 operations; [`Error::WordOutOfRange`] for any index
    /// (nothing is enqueued); otherwise as [`MappedWords::wait_value`], named
    /// `cuStreamBatchMemOp`.
    pub fn mem_ops(&self, stream: impl AsStream, ops: &[MemOp<W>]) -> Result<()> {
        self.words.mem_ops(&stream.as_stream(), ops)
    }

    /// Runs `launch` with `stream` and the words' address, and notes the work `launch`
    /// enqueued on `stream` as a use: the memory is not reused before it has run (on a
    /// capturing stream, before the graph is gone). `launch` typically launches a kernel of
    /// yours (an `unsafe` launch) that reads or writes the words on `stream`.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a stream whose capture is invalidated; CUDA's errors
    /// noting the use (then the memory is never reused); refusals as for any enqueue.
    pub fn use_on<R>(&self, stream: impl AsStream, launch: impl FnOnce(&StreamRef, *mut W) -> R) -> Result<R> {
        let stream = stream.as_stream();
        let address = self.as_ptr();
        self.words.use_with(&stream, || launch(&stream, address))
    }
}

impl<W: Word> DeviceWords<W> {
    /// `len` words of device memory on `stream`'s device, set to zero on `stream`
    /// (`cudaMemsetAsync`): a block from the free list, or one carved from new memory
    /// ([`cudaMalloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html),
    /// never freed, see the [module docs](crate::memory::mem_ops)). Work on other streams sees
    /// the zeros once it is ordered after `stream`'s work so far (`wait_stream`).
    ///
    /// # Errors
    /// As [`MappedWords::new`]; [`Error::CaptureMisuse`] while `stream` is being captured (a
    /// graph would zero the words at each launch, not now).
    pub fn zeroed(stream: impl AsStream, len: usize) -> Result<DeviceWords<W>> {
        let stream = stream.as_stream();
        let words = Words::new(Place::Device(stream.device()), len)?;
        let (address, bytes) = (words.block.address.cast::<c_void>(), words.len * size_of::<W>());
        words.enqueue(&stream, InCapture::Refuse, |_| {
            let _current = stream.enter_runtime()?;
            // SAFETY: `bytes` bytes of device memory of the stream's device, held by the block
            // until this memset has run (the enqueue notes it); a live stream.
            check(unsafe { sys::cudaMemsetAsync(address, 0, bytes, stream.as_raw()) }, "cudaMemsetAsync")
        })?;
        Ok(DeviceWords { words })
    }

    /// The number of words.
    pub fn len(&self) -> usize {
        self.words.len
    }

    /// Always `false`: there is at least one word.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The device the words are on.
    pub fn device(&self) -> Device {
        match self.words.place {
            Place::Device(device) => device,
            Place::Host => unreachable!("device words live on a device"),
        }
    }

    /// The device address of the first word. Kernels launched with it outside
    /// [`DeviceWords::use_on`] are not tracked: their launch's `unsafe` contract must keep the
    /// words alive until they have run.
    pub fn as_ptr(&self) -> *mut W {
        self.words.block.address.cast()
    }

    /// Makes later work on `stream` wait until word `index` meets `wait`
    /// ([`cuStreamWaitValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device; otherwise as
    /// [`MappedWords::wait_value`].
    pub fn wait_value(&self, stream: impl AsStream, index: usize, wait: WaitValue<W>) -> Result<()> {
        self.words.wait_value(&stream.as_stream(), index, wait)
    }

    /// Writes `value` to word `index` on `stream`, after a memory fence
    /// ([`cuStreamWriteValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    ///
    /// # Errors
    /// As [`DeviceWords::wait_value`].
    pub fn write_value(&self, stream: impl AsStream, index: usize, value: W) -> Result<()> {
        self.words.write_value(&stream.as_stream(), index, value)
    }

    /// Enqueues `ops` on `stream` in order, in one call
    /// ([`cuStreamBatchMemOp`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    ///
    /// # Errors
    /// As [`MappedWords::mem_ops`] and [`DeviceWords::wait_value`].
    pub fn mem_ops(&self, stream: impl AsStream, ops: &[MemOp<W>]) -> Result<()> {
        self.words.mem_ops(&stream.as_stream(), ops)
    }

    /// As [`MappedWords::use_on`], on a stream of the words' device.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`]; as [`MappedWords::use_on`].
    pub fn use_on<R>(&self, stream: impl AsStream, launch: impl FnOnce(&StreamRef, *mut W) -> R) -> Result<R> {
        let stream = stream.as_stream();
        let address = self.as_ptr();
        self.words.use_with(&stream, || launch(&stream, address))
    }

    /// The words, copied on `stream` after its work so far (`cudaMemcpyAsync`); returns once
    /// the copy has completed, so it blocks for as long as that work waits (a wait for a value
    /// nobody writes blocks it forever). Reported to the sync-debug mode as a pageable copy.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`]; [`Error::CaptureMisuse`] while `stream` is being captured,
    /// or where a capture of this crate forbids waiting; [`Error::SyncRefused`]; CUDA's errors
    /// (after a failed wait the copy's memory is leaked, never handed back).
    pub fn to_vec(&self, stream: impl AsStream) -> Result<Vec<W>> {
        let stream = stream.as_stream();
        let len = self.words.len;
        let mut values = Vec::<W>::with_capacity(len);
        let (to, from) = (values.as_mut_ptr().cast::<c_void>(), self.as_ptr().cast::<c_void>().cast_const());
        let done = Event::internal(stream.device())?;
        let (mut enqueued, mut recorded) = (false, false);
        let ordered = self.words.enqueue(&stream, InCapture::Refuse, |_| {
            if live_captures::any() {
                // This thread's own capture would be invalidated by the wait below.
                live_captures::refuse_unsafe_call()?;
            }
            sync_debug::before_sync("cudaMemcpyAsync (device words to the host)", SyncKind::PageableCopy)?;
            let _current = stream.enter_runtime()?;
            let (bytes, kind) = (len * size_of::<W>(), sys::cudaMemcpyKind::cudaMemcpyDeviceToHost);
            // SAFETY: `len` words at both addresses: the block's device memory and the vector's
            // capacity, which outlives the copy (waited for below, or leaked); a live stream.
            let code = unsafe { sys::cudaMemcpyAsync(to, from, bytes, kind, stream.as_raw()) };
            check(code, "cudaMemcpyAsync")?;
            enqueued = true;
            stream.record_raw(done.as_raw(), 0)?;
            recorded = true;
            Ok(())
        });
        if enqueued {
            let waited =
                if recorded { done.synchronize_checked_earlier() } else { stream.synchronize_checked_earlier() };
            if let Err(error) = waited {
                // The copy may still write the vector: never hand its memory back.
                std::mem::forget(values);
                return Err(error);
            }
        }
        ordered?;
        // SAFETY: the copy above completed and wrote all `len` words; any bits are a `W`.
        unsafe { values.set_len(len) };
        Ok(values)
    }
}

impl StreamRef {
    /// Makes later work on this stream wait until the word at `address` meets `wait`
    /// ([`cuStreamWaitValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)),
    /// for memory this crate does not manage (prefer [`MappedWords`] and [`DeviceWords`]).
    ///
    /// # Safety
    /// `address` is the device address of a word of device memory from `cudaMalloc` (not the
    /// stream-ordered allocator, which CUDA refuses) or of host memory mapped into this
    /// stream's device's address space (`cudaHostAlloc` with `cudaHostAllocMapped`, or
    /// `cudaHostRegister` with `cudaHostRegisterMapped`), and stays allocated until the wait
    /// has completed, or, if this stream is being captured, for as long as any graph made
    /// from the capture may run it. Beware: freeing such memory (`cudaFree`, `cudaFreeHost`)
    /// blocks while any stream of the device waits.
    ///
    /// # Errors
    /// [`Error::MisalignedWord`] for a null address or one not aligned to the word's size;
    /// refusals as for any enqueue; CUDA's errors, named `cuStreamWaitValue32`/`64`.
    pub unsafe fn wait_value_raw<W: Word>(&self, address: *const W, wait: WaitValue<W>) -> Result<()> {
        let address = aligned(address)?;
        let current = self.enter()?;
        let raw = if current.is_some() { self.unambiguous_raw() } else { self.as_raw() };
        // SAFETY: the caller's contract; an aligned address; a live handle, a special one with
        // its device current.
        unsafe { wait_value_on(raw, address, wait) }
    }

    /// Writes `value` to the word at `address` on this stream, after a memory fence
    /// ([`cuStreamWriteValue32`/`64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)),
    /// for memory this crate does not manage (prefer [`MappedWords`] and [`DeviceWords`]).
    ///
    /// # Safety
    /// As [`StreamRef::wait_value_raw`], until the write has completed; and the GPU may write
    /// the word at any time until then: host code reads or writes it only atomically.
    ///
    /// # Errors
    /// As [`StreamRef::wait_value_raw`], named `cuStreamWriteValue32`/`64`.
    pub unsafe fn write_value_raw<W: Word>(&self, address: *mut W, value: W) -> Result<()> {
        let address = aligned(address.cast_const())?;
        let current = self.enter()?;
        let raw = if current.is_some() { self.unambiguous_raw() } else { self.as_raw() };
        // SAFETY: as in `wait_value_raw`.
        unsafe { write_value_on(raw, address, value) }
    }
}

/// `address` as the driver takes it, once checked: not null, aligned to `W`.
fn aligned<W: Word>(address: *const W) -> Result<u64> {
    let at = address as usize;
    if at == 0 || at % align_of::<W>() != 0 {
        return Err(Error::MisalignedWord { address: at, align: align_of::<W>() });
    }
    Ok(at as u64)
}

/// `cuStreamWaitValue32`/`64` on a handle the driver takes.
///
/// # Safety
/// As [`driver::stream_wait_value32`]: a live handle (a special one with its device current),
/// an aligned word that outlives the wait.
unsafe fn wait_value_on<W: Word>(raw: sys::cudaStream_t, address: u64, wait: WaitValue<W>) -> Result<()> {
    let (value, flags) = (wait.value.to_bits(), wait.flags());
    // SAFETY: the caller's contract.
    unsafe {
        if W::WIDE {
            driver::stream_wait_value64(raw, address, value, flags)
        } else {
            driver::stream_wait_value32(raw, address, value as u32, flags)
        }
    }
}

/// `cuStreamWriteValue32`/`64` on a handle the driver takes.
///
/// # Safety
/// As [`wait_value_on`], until the write has completed.
unsafe fn write_value_on<W: Word>(raw: sys::cudaStream_t, address: u64, value: W) -> Result<()> {
    let value = value.to_bits();
    // SAFETY: the caller's contract.
    unsafe {
        if W::WIDE {
            driver::stream_write_value64(raw, address, value)
        } else {
            driver::stream_write_value32(raw, address, value as u32)
        }
    }
}

/// Where a block of words lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Place {
    /// Mapped, portable host memory.
    Host,
    /// Device memory of this device.
    Device(Device),
}

/// What an enqueue does on a capturing stream.
#[derive(Copy, Clone, PartialEq, Eq)]
enum InCapture {
    /// The work becomes graph nodes; the graph keeps the block.
    KeepAlive,
    /// [`Error::CaptureMisuse`]: the work must run now (a memset before first use, a copy
    /// into host memory).
    Refuse,
}

/// The smallest block, and the chunk smaller blocks are carved from.
const SMALLEST_BLOCK: usize = 64;
const CHUNK: usize = 64 * 1024;
/// How many events an owner keeps before it drops those whose operations have completed.
const PRUNE_AT: usize = 16;

/// Blocks in use (see [`live_words`]).
static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);
/// Blocks free for reuse: where, the size class (a power of two), the addresses.
static FREE_BLOCKS: Mutex<Vec<(Place, usize, Vec<usize>)>> = Mutex::new(Vec::new());

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A block of memory for words, in use until it drops back into the free list. Never freed:
/// see the module docs.
#[derive(Debug)]
struct Block {
    address: *mut u8,
    place: Place,
    size: usize,
}

// SAFETY: the block is an address of memory the process keeps for good, handed to one owner
// at a time (the free list or this value); the address itself is never dereferenced through
// `&Block` except by the owner's atomic views.
unsafe impl Send for Block {}
// SAFETY: as above: `&Block` gives out the address only.
unsafe impl Sync for Block {}

impl Block {
    /// A block of at least `bytes` at `place`: from the free list, or carved from new memory.
    fn take(place: Place, bytes: usize) -> Result<Block> {
        let size = bytes.max(SMALLEST_BLOCK).checked_next_power_of_two().ok_or(Error::Size(OVERFLOW))?;
        let reused = {
            let mut free = lock(&FREE_BLOCKS);
            free.iter_mut().find(|(at, class, _)| (*at, *class) == (place, size)).and_then(|(_, _, list)| list.pop())
        };
        let address = match reused {
            Some(address) => address,
            None => {
                let chunk = size.max(CHUNK);
                let base = allocate(place, chunk)?;
                if chunk > size {
                    let mut free = lock(&FREE_BLOCKS);
                    let index = match free.iter().position(|(at, class, _)| (*at, *class) == (place, size)) {
                        Some(index) => index,
                        None => {
                            free.push((place, size, Vec::new()));
                            free.len() - 1
                        }
                    };
                    free[index].2.extend((1..chunk / size).rev().map(|piece| base + piece * size));
                }
                base
            }
        };
        LIVE_BLOCKS.fetch_add(1, Ordering::SeqCst);
        Ok(Block { address: address as *mut u8, place, size })
    }
}

impl Drop for Block {
    /// Back to the free list: no CUDA call, so also inside a host function or a CUDA user
    /// object's destructor, where the last holder may drop it.
    fn drop(&mut self) {
        let mut free = lock(&FREE_BLOCKS);
        let key = (self.place, self.size);
        match free.iter_mut().find(|(at, class, _)| (*at, *class) == key) {
            Some((_, _, list)) => list.push(self.address as usize),
            None => free.push((self.place, self.size, vec![self.address as usize])),
        }
        LIVE_BLOCKS.fetch_sub(1, Ordering::SeqCst);
    }
}

const OVERFLOW: &str = "the byte size of the words overflows";

/// New memory of `bytes` at `place`, kept for the life of the process.
fn allocate(place: Place, bytes: usize) -> Result<usize> {
    refuse_inside_host_fn()?;
    // Another thread's Global capture must not forbid the allocation; this thread's capture,
    // or any Global one of this crate, would be invalidated by it: refused.
    let _hold = crate::call::transitions::unsafe_call_hold()?;
    let mut address: *mut c_void = std::ptr::null_mut();
    match place {
        Place::Host => {
            // The runtime would bind device 0's primary context on a thread without one: make
            // it current for the calls, and restore what was there.
            let _current = Device::new(0)?.make_current()?;
            let flags = sys::cudaHostAllocMapped | sys::cudaHostAllocPortable;
            // SAFETY: a valid out-pointer; bytes > 0; valid flags.
            check(unsafe { sys::cudaHostAlloc(&mut address, bytes, flags) }, "cudaHostAlloc")?;
            let mut device: *mut c_void = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; mapped memory just allocated; no flags.
            check(unsafe { sys::cudaHostGetDevicePointer(&mut device, address, 0) }, "cudaHostGetDevicePointer")?;
            if device != address {
                // Without unified addressing the words would need an address per device: the
                // memory is left allocated (freeing it may block, see the module docs).
                return Err(Error::Cuda {
                    api: "cudaHostGetDevicePointer",
                    code: crate::CudaCode(sys::cudaError::cudaErrorNotSupported.0 as i32),
                });
            }
        }
        Place::Device(device) => {
            let _current = device.make_current()?;
            // SAFETY: a valid out-pointer; bytes > 0.
            check(unsafe { sys::cudaMalloc(&mut address, bytes) }, "cudaMalloc")?;
        }
    }
    Ok(address as usize)
}

/// The machinery both kinds of words share: a block, and the events after the operations
/// that may still touch it.
struct Words<W> {
    block: Arc<Block>,
    len: usize,
    place: Place,
    tracked: Mutex<Tracked>,
    _word: PhantomData<W>,
}

/// The operations still possibly in flight.
#[derive(Default)]
struct Tracked {
    /// Recorded after the last operation on each stream (by CUDA's id where the crate knows
    /// it; else one per operation, pruned as they complete).
    events: Vec<(Option<u64>, Event)>,
    /// An operation could not be noted: the block is never reused.
    leaked: bool,
}

impl<W: Word> Words<W> {
    fn new(place: Place, len: usize) -> Result<Words<W>> {
        // Refused as every allocation is, also when the free list would serve it.
        refuse_inside_host_fn()?;
        if len == 0 {
            return Err(Error::Size("zero words (CUDA has no empty allocation)"));
        }
        let bytes = len.checked_mul(size_of::<W>()).filter(|&bytes| bytes <= isize::MAX as usize);
        let block = Block::take(place, bytes.ok_or(Error::Size(OVERFLOW))?)?;
        Ok(Words { block: Arc::new(block), len, place, tracked: Mutex::default(), _word: PhantomData })
    }

    /// The device address of word `index`.
    fn address(&self, index: usize) -> Result<u64> {
        if index >= self.len {
            return Err(Error::WordOutOfRange { index, len: self.len });
        }
        Ok(self.block.address as u64 + (index * size_of::<W>()) as u64)
    }

    fn wait_value(&self, stream: &StreamRef, index: usize, wait: WaitValue<W>) -> Result<()> {
        let address = self.address(index)?;
        // SAFETY: an aligned word of this block, which `enqueue` keeps until the wait has run.
        self.enqueue(stream, InCapture::KeepAlive, |raw| unsafe { wait_value_on(raw, address, wait) })
    }

    fn write_value(&self, stream: &StreamRef, index: usize, value: W) -> Result<()> {
        let address = self.address(index)?;
        // SAFETY: as in `wait_value`.
        self.enqueue(stream, InCapture::KeepAlive, |raw| unsafe { write_value_on(raw, address, value) })
    }

    fn mem_ops(&self, stream: &StreamRef, ops: &[MemOp<W>]) -> Result<()> {
        if ops.len() > driver::MAX_BATCH_MEM_OPS {
            return Err(Error::Size("a batch of stream memory operations holds at most 255 (cuStreamBatchMemOp)"));
        }
        if ops.is_empty() {
            return Ok(());
        }
        let mut params = Vec::with_capacity(ops.len());
        for op in ops {
            params.push(match *op {
                MemOp::Wait { index, wait } if W::WIDE => {
                    MemOpParams::wait64(self.address(index)?, wait.value.to_bits(), wait.flags())
                }
                MemOp::Wait { index, wait } => {
                    MemOpParams::wait32(self.address(index)?, wait.value.to_bits() as u32, wait.flags())
                }
                MemOp::Write { index, value } if W::WIDE => MemOpParams::write64(self.address(index)?, value.to_bits()),
                MemOp::Write { index, value } => MemOpParams::write32(self.address(index)?, value.to_bits() as u32),
                MemOp::Barrier(BarrierScope::System) => MemOpParams::barrier(driver::MEMORY_BARRIER_SYS),
                MemOp::Barrier(BarrierScope::Device) => MemOpParams::barrier(driver::MEMORY_BARRIER_GPU),
                MemOp::FlushRemoteWrites => MemOpParams::flush_remote_writes(),
            });
        }
        // SAFETY: every address is an aligned word of this block, which `enqueue` keeps until
        // the batch has run.
        self.enqueue(stream, InCapture::KeepAlive, |raw| unsafe { driver::stream_batch_mem_op(raw, &mut params) })
    }

    /// Runs `submit` (this crate's CUDA work on `stream` that touches the block: it gets the
    /// handle the driver takes) and keeps the block until that work has run: outside a
    /// capture, an event recorded after it that the drop honours; in one (as `capture`
    /// allows), the graph's reference. No capture of this crate begins or ends meanwhile.
    fn enqueue<R>(
        &self,
        stream: &StreamRef,
        capture: InCapture,
        submit: impl FnOnce(sys::cudaStream_t) -> Result<R>,
    ) -> Result<R> {
        self.same_device(stream)?;
        // The crate's refusals (inside a host function, another thread's per-thread stream,
        // the legacy stream during a capture); a special handle's device made current, for the
        // driver, which takes `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` but reads 0 as the
        // legacy stream whatever this build's default stream is.
        let current = stream.enter()?;
        let raw = if current.is_some() { stream.unambiguous_raw() } else { stream.as_raw() };
        let _transitions = no_capture_transitions();
        if let Some((graph, _)) = capturing(stream)? {
            if capture == InCapture::Refuse {
                return Err(Error::CaptureMisuse(CAPTURED));
            }
            // Not beside another thread's work on the same graph (see `graph_mutations`).
            let _turn = graph_mutations();
            // The graph holds the block for every launch, also if the work fails to enqueue.
            keep_alive(graph, stream.device(), Box::new(Arc::clone(&self.block)))?;
            return submit(raw);
        }
        let result = submit(raw);
        // Noted whatever `submit` returned: part of the work may be enqueued.
        let noted = self.note(stream);
        result.and_then(|result| noted.map(|()| result))
    }

    /// Runs `launch` (the caller's work on `stream`, which may call this crate: run under no
    /// lock) and keeps the block until its work on `stream` has run, as [`Words::enqueue`]
    /// does. A capture that began or ended on `stream` meanwhile leaves the work's whereabouts
    /// unknown: the block is then leaked.
    fn use_with<R>(&self, stream: &StreamRef, launch: impl FnOnce() -> R) -> Result<R> {
        self.same_device(stream)?;
        let _current = stream.enter()?;
        let before = {
            let _transitions = no_capture_transitions();
            let before = capturing(stream)?;
            if let Some((graph, _)) = before {
                keep_alive(graph, stream.device(), Box::new(Arc::clone(&self.block)))?;
            }
            before
        };
        let result = launch();
        let _transitions = no_capture_transitions();
        let after = capturing(stream);
        match (before, after) {
            (None, Ok(None)) => self.note(stream)?,
            (Some((_, id)), Ok(Some((_, now)))) if id == now => {}
            _ => {
                lock(&self.tracked).leaked = true;
                return Err(Error::CaptureMisuse("a capture began or ended during the launch: the words are leaked"));
            }
        }
        Ok(result)
    }

    fn same_device(&self, stream: &StreamRef) -> Result<()> {
        match self.place {
            Place::Device(device) => {
                same_device("device words are used on streams of their own device", device, stream.device())
            }
            Place::Host => Ok(()),
        }
    }

    /// Records `stream`'s event after the work just enqueued there: its slot's event again (a
    /// stream this crate created, known by CUDA's id), or a new one. On failure the block is
    /// never reused.
    fn note(&self, stream: &StreamRef) -> Result<()> {
        let mut tracked = lock(&self.tracked);
        let noted = note(&mut tracked, stream);
        if noted.is_err() {
            tracked.leaked = true;
        }
        noted
    }
}

/// The graph `stream`'s capture builds and the capture's id, while it is being captured;
/// `None` when it is not (one load while no stream of the process may be capturing).
/// [`Error::CaptureMisuse`] for an invalidated capture.
fn capturing(stream: &StreamRef) -> Result<Option<(sys::cudaGraph_t, u64)>> {
    // The legacy stream is never captured (and asking it fails during Global captures).
    if !stream.may_be_captured_now() || stream.builtin().is_some_and(Builtin::is_legacy) {
        return Ok(None);
    }
    let state = capture_state(stream)?;
    match state.info.status {
        CaptureStatus::None => Ok(None),
        CaptureStatus::Active => Ok(Some((state.graph, state.info.id))),
        CaptureStatus::Invalidated => Err(Error::CaptureMisuse("the stream's capture is invalidated")),
    }
}

const CAPTURED: &str =
    "device words are zeroed and copied to the host now, not in a capture (a graph would do it at each launch)";

/// [`Words::note`]'s record, under the owner's lock.
fn note(tracked: &mut Tracked, stream: &StreamRef) -> Result<()> {
    let id = stream.known_id();
    let recorded_before = tracked.events.iter().find(|(slot, _)| id.is_some() && *slot == id);
    if let Some((_, event)) = recorded_before {
        // Recorded again after this stream's newer work, which comes after the older.
        return stream.record_raw(event.as_raw(), 0);
    }
    // Queries only while no stream of the process can be capturing (a query would break a
    // capture of this thread's).
    if tracked.events.len() >= PRUNE_AT && !live_captures::may_capture() {
        tracked.events.retain(|(_, event)| driver::event_query(event.as_raw()) != Ok(true));
    }
    let event = Event::internal(stream.device())?;
    stream.record_raw(event.as_raw(), 0)?;
    tracked.events.push((id, event));
    Ok(())
}

impl<W> Drop for Words<W> {
    /// Never waits: the block goes back now if no operation may touch it, later (a host
    /// function on a private stream waits for the operations) if one may, or never if that
    /// cannot be arranged.
    fn drop(&mut self) {
        let tracked = std::mem::take(self.tracked.get_mut().unwrap_or_else(PoisonError::into_inner));
        if tracked.leaked {
            std::mem::forget(Arc::clone(&self.block));
            return;
        }
        if !tracked.events.is_empty() {
            let (events, block) = (tracked.events, Arc::clone(&self.block));
            // CUDA calls are refused inside a host function: then on another thread.
            call_outside_host_fn(move || release_after(events, block));
        }
    }
}

/// Drops `block` once the work before every event has completed, never waiting for it: now,
/// if the events have completed; else through a host function on a new stream of each
/// events' device that waits for them (the stream destroyed at once: its work still runs). If
/// that cannot be arranged, the block is leaked.
fn release_after(mut events: Vec<(Option<u64>, Event)>, block: Arc<Block>) {
    if !live_captures::may_capture() {
        events.retain(|(_, event)| driver::event_query(event.as_raw()) != Ok(true));
    }
    let mut devices: Vec<Device> = Vec::new();
    for (_, event) in &events {
        if !devices.contains(&event.device()) {
            devices.push(event.device());
        }
    }
    for device in devices {
        let arranged = Stream::new(device, StreamOptions::non_blocking()).and_then(|stream| {
            for (_, event) in events.iter().filter(|(_, event)| event.device() == device) {
                stream.wait_raw(event.as_raw(), 0)?;
            }
            let held = Arc::clone(&block);
            // Runs also after a fault (with the error): the block goes back either way.
            stream.launch_host_callback(move |_status| drop(held))
        });
        if arranged.is_err() {
            std::mem::forget(Arc::clone(&block));
        }
    }
    // The events go now: the waits above took their state when they were enqueued.
}

impl<W: Word> fmt::Debug for MappedWords<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedWords").field("address", &self.words.block.address).field("len", &self.words.len).finish()
    }
}

impl<W: Word> fmt::Debug for DeviceWords<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceWords")
            .field("address", &self.words.block.address)
            .field("len", &self.words.len)
            .field("device", &self.device())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_as_cuda_states_them() {
        let geq = WaitValue::greater_or_equal(10u32);
        assert!(geq.is_met_by(10) && geq.is_met_by(11) && !geq.is_met_by(9));
        // Cyclic: a counter that wrapped is ahead; one 2^31 or more ahead reads as behind.
        assert!(WaitValue::greater_or_equal(u32::MAX).is_met_by(0));
        assert!(!WaitValue::greater_or_equal(0u32).is_met_by(1 << 31));
        assert!(
            WaitValue::greater_or_equal(u64::MAX).is_met_by(0) && !WaitValue::greater_or_equal(0u64).is_met_by(1 << 63)
        );
        assert!(WaitValue::equal(7u64).is_met_by(7) && !WaitValue::equal(7u64).is_met_by(8));
        assert!(WaitValue::and(0b100u32).is_met_by(0b110) && !WaitValue::and(0b100u32).is_met_by(0b011));
        // NOR: some bit clear in both; within the word's width only.
        assert!(WaitValue::nor(0u32).is_met_by(0) && !WaitValue::nor(u32::MAX).is_met_by(0));
        assert!(!WaitValue::nor(0xFFFF_0000u32).is_met_by(0x0000_FFFF));
        assert!(WaitValue::nor(0xFFFF_0000u64).is_met_by(0x0000_FFFF));
        assert_eq!(WaitValue::equal(1u32).with_flush().flags(), driver::WAIT_VALUE_EQ | driver::WAIT_VALUE_FLUSH);
    }

    #[test]
    fn raw_addresses_are_checked_for_null_and_alignment() {
        assert_eq!(aligned::<u32>(std::ptr::null()), Err(Error::MisalignedWord { address: 0, align: 4 }));
        assert_eq!(aligned::<u64>(0x1004 as *const u64), Err(Error::MisalignedWord { address: 0x1004, align: 8 }));
        assert_eq!(aligned::<u32>(0x1004 as *const u32), Ok(0x1004));
    }
}
