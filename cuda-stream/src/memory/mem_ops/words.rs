//! The words a program holds: [`MappedWords`] (mapped host memory) and [`DeviceWords`] (device
//! memory), their operations, copies and host access.

use super::blocks::Place;
use super::operation::{MemOp, WaitValue};
use super::tracked::{InCapture, Words};
use super::word::Word;
use crate::call::live_captures;
use crate::call::sync_debug::{self, SyncKind};
use crate::device::Device;
use crate::event::Event;
use crate::ffi::error::{Result, check};
use crate::memory::wait_for_blocking_copy;
use crate::stream::{AsStream, StreamRef};
use crate::sys;
use std::ffi::c_void;
use std::fmt;

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
    /// [`Error::Size`](crate::Error::Size) for zero words or an overflowing size; [`Error::InsideHostFn`](crate::Error::InsideHostFn);
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) where a capture of this crate forbids the allocation (on this
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
    /// [`Error::WordOutOfRange`](crate::Error::WordOutOfRange); [`Error::InsideHostFn`](crate::Error::InsideHostFn), [`Error::WrongThread`](crate::Error::WrongThread) and
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) as for any enqueue; CUDA's errors (`cudaErrorNotSupported` for
    /// what [`MemOpSupport`](super::MemOpSupport) says the device lacks), named `cuStreamWaitValue32`/`64`; an
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
    /// [`Error::Size`](crate::Error::Size) for more than 255 operations; [`Error::WordOutOfRange`](crate::Error::WordOutOfRange) for any index
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
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) for a stream whose capture is invalidated; CUDA's errors
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
    /// As [`MappedWords::new`]; [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) while `stream` is being captured (a
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
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for a stream of another device; otherwise as
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
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch); as [`MappedWords::use_on`].
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
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch); [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) while `stream` is being captured,
    /// or where a capture of this crate forbids waiting; [`Error::SyncRefused`](crate::Error::SyncRefused); CUDA's errors
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
        if let Some(Err(error)) = wait_for_blocking_copy(&stream, &done, enqueued, recorded) {
            // The copy may still write the vector: never hand its memory back.
            std::mem::forget(values);
            return Err(error);
        }
        ordered?;
        // SAFETY: the copy above completed and wrote all `len` words; any bits are a `W`.
        unsafe { values.set_len(len) };
        Ok(values)
    }
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
