//! [`DeviceBuffer`]: device memory allocated and freed in the order of its home stream, used on
//! other streams only through calls that order the use both ways.

use super::buffer_core::{BufferCore, Detached, Freed, Origin, detach_from, free_after_uses, prepare_core};
use super::graph_nodes::hold_in_capture;
use super::ledger::{SharedEvent, Span, UseEvent};
use super::lent::LentMemory;
use super::output_slot::OutputSlot;
use super::page_locked::sealed::Token;
use super::page_locked::{PageLocked, PageLockedMemory};
use super::pool::MemPool;
use super::uses::{CAPTURED, Hold, InCaptures, Touched, Uses, ordered_use};
use super::{DeviceCopy, byte_size, same_length, wait_for_blocking_copy};
use crate::call::capture_mode::{ignore_other_threads_captures, uncaptured_stream_call};
use crate::call::live_captures;
use crate::call::race::model::Use;
use crate::call::race::{Access, AccessKind};
use crate::call::sync_debug::{self, SyncKind};
use crate::device::{Device, same_device};
use crate::event::Event;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, check};
use crate::graph::held::CaptureHolds;
use crate::stream::enqueue::{InCapture, Work};
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use crate::sys;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

/// `len` elements of `T` in device memory, allocated on a stream (its *home*) and freed on it
/// when dropped, after every use this crate ordered
/// ([stream-ordered allocator](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)).
///
/// `S` is what keeps the home stream alive: `&Stream` (the buffer borrows the stream), or
/// `Arc<Stream>`, or any [`AsStream`]. Work on another stream goes through
/// [`use_on`](DeviceBuffer::use_on), the views' `use_on` and the copy methods, which order it
/// after the earlier uses it conflicts with (the allocation first) and leave an event behind
/// it that later uses and the free wait for: a write waits for every earlier use of its
/// bytes, a read for the earlier writes of its bytes, whatever stream each ran on, and two
/// reads, or uses of disjoint views, run at once. See the [module docs](crate::memory).
///
/// The contents start uninitialized on the GPU; [`zeroed`](DeviceBuffer::zeroed) and
/// [`from_slice`](DeviceBuffer::from_slice) give them values. Reading them back is always
/// defined: `T` is [`DeviceCopy`].
pub struct DeviceBuffer<T: DeviceCopy, S: AsStream> {
    ptr: NonNull<T>,
    len: usize,
    device: Device,
    /// The home stream's handle when the buffer was allocated.
    home_raw: sys::cudaStream_t,
    /// Its identity (device, handle, thread) and CUDA's id where known: every use checks that
    /// `home` still lends this stream (a per-thread stream of another thread, or an `AsStream`
    /// that changed its answer, would not be ordered with the allocation).
    home_identity: ((Device, usize, u64), Option<u64>),
    home: S,
    /// The order of its uses across streams, shared with the graphs that hold the memory.
    core: Arc<BufferCore>,
    /// Where the memory came from, and so what the drop does after the last use.
    origin: Origin,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns device memory, which any thread may use; the raw pointer is an
// address on the GPU, never dereferenced on the host. Moving it to another thread moves `S`.
unsafe impl<T: DeviceCopy, S: AsStream + Send> Send for DeviceBuffer<T, S> {}
// SAFETY: `&self` methods only enqueue CUDA work (thread-safe in CUDA) and read plain fields;
// the one shared mutable field is atomic. Sharing it shares `S`.
unsafe impl<T: DeviceCopy, S: AsStream + Sync> Sync for DeviceBuffer<T, S> {}

impl<T: DeviceCopy, S: AsStream> DeviceBuffer<T, S> {
    /// Allocates `len` elements on `stream` from its device's current memory pool
    /// ([`cudaMallocAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)).
    /// The memory may be used by work enqueued on `stream` after this call, and, through this
    /// buffer, on other streams.
    ///
    /// # Errors
    /// [`Error::Size`] for zero elements or an overflowing byte size;
    /// [`Error::CaptureMisuse`] while `stream` is being captured; CUDA's errors
    /// (`cudaErrorMemoryAllocation` when the device is out of memory).
    pub fn new(stream: S, len: usize) -> Result<Self> {
        Self::allocate(stream, len, None)
    }

    /// Allocates `len` elements on `stream` from `pool`
    /// ([`cudaMallocFromPoolAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)).
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`]; [`Error::DeviceMismatch`] for a pool of another device.
    pub fn new_in(pool: &MemPool, stream: S, len: usize) -> Result<Self> {
        Self::allocate(stream, len, Some(pool))
    }

    /// Allocates `len` elements on `stream` and sets every byte to zero there
    /// (`cudaMemsetAsync`).
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`].
    pub fn zeroed(stream: S, len: usize) -> Result<Self> {
        let buffer = Self::new(stream, len)?;
        buffer.fill_bytes_on(&*buffer.home()?, 0)?;
        Ok(buffer)
    }

    /// Allocates `source.len()` elements on `stream` and copies `source` into them; returns
    /// once the copy has completed (see [`DeviceBuffer::copy_from_slice`]).
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`] and [`DeviceBuffer::copy_from_slice`].
    pub fn from_slice(stream: S, source: &[T]) -> Result<Self> {
        let buffer = Self::new(stream, source.len())?;
        buffer.copy_from_slice_on(&*buffer.home()?, source)?;
        Ok(buffer)
    }

    fn allocate(home: S, len: usize, pool: Option<&MemPool>) -> Result<Self> {
        const { assert!(align_of::<T>() <= 256, "CUDA's allocations are aligned to 256 bytes") };
        let bytes = byte_size::<T>(len)?;
        // Another thread's Global capture must not forbid the allocation (see the capture docs).
        ignore_other_threads_captures();
        let stream = home.as_stream();
        if let Some(pool) = pool {
            same_device("a memory pool serves streams of its own device", pool.device(), stream.device())?;
        }
        // Through the one enqueue path: a fast call while no capture may exist (a capture's
        // begin waits for it), else the check and the allocation under the read side of the
        // capture-transition lock. Never a graph's allocation (CUDA would make it one on a
        // capturing stream) handed out as a buffer.
        let ptr = stream.outside_transitions(InCapture::Refused(CAPTURED), || allocate_on(&stream, bytes, pool))?;
        let ptr = NonNull::new(ptr.cast::<T>()).ok_or(Error::Size("CUDA returned no address"))?;
        let (home_raw, device) = (stream.as_raw(), stream.device());
        let home_identity = (stream.identity(), stream.known_id());
        let core = Arc::new(BufferCore::new(Uses::allocated(bytes)));
        Ok(DeviceBuffer {
            ptr,
            len,
            device,
            home_raw,
            home_identity,
            home,
            core,
            origin: Origin::Allocated,
            _owns: PhantomData,
        })
    }

    /// A buffer of a graph's output that `home` may use from now on (after the launch), freed
    /// on `home` when dropped; the free, or its leak, is noted in `output`.
    pub(super) fn adopt(home: S, ptr: NonNull<T>, len: usize, output: Arc<OutputSlot>) -> Self {
        Self::of_origin(home, ptr, len, Origin::Output(output))
    }

    /// A buffer of memory another library lends (`lent`), which `home` may use from now on
    /// (the lender ordered its own work before), handed back through `lent` once every use
    /// has completed.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn lent(home: S, ptr: NonNull<T>, len: usize, lent: LentMemory) -> Self {
        let foreign = lent.foreign();
        let buffer = Self::of_origin(home, ptr, len, Origin::Lent(lent));
        if foreign {
            // To the race detector, another library's memory begins here, written on the home
            // stream (this crate's own memory keeps its history).
            let bytes = buffer.bytes() as u64;
            buffer.home.as_stream().race_allocated(ptr.as_ptr() as u64, bytes, "memory lent by another library");
        }
        buffer
    }

    fn of_origin(home: S, ptr: NonNull<T>, len: usize, origin: Origin) -> Self {
        let (home_raw, device, home_identity) = {
            let stream = home.as_stream();
            (stream.as_raw(), stream.device(), (stream.identity(), stream.known_id()))
        };
        let core = Arc::new(BufferCore::new(Uses::allocated(len * size_of::<T>())));
        DeviceBuffer { ptr, len, device, home_raw, home_identity, home, core, origin, _owns: PhantomData }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a buffer has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The device the memory is on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The home stream: where the buffer was allocated and will be freed. Work enqueued there
    /// needs no further ordering.
    pub fn stream(&self) -> BorrowedStream<'_> {
        self.home.as_stream()
    }

    /// The device address, for kernels on the home stream. Such work is ordered after the
    /// allocation and before the free, and uses elsewhere that come later wait for it; to
    /// order it also after the buffer's uses on other streams so far, enqueue it through
    /// [`DeviceBuffer::use_on`] on the home stream. Using the address in a kernel is `unsafe`,
    /// like every launch.
    ///
    /// On another stream, use the buffer through [`DeviceBuffer::use_on`], which orders the
    /// use after the allocation and before the free. The C++ habit of allocating on stream 0
    /// (`cudaMallocAsync(&p, n, 0)`) and launching with the raw address on blocking streams
    /// relies on the legacy default stream's implicit synchronization: it holds here only
    /// while the home stream is the legacy stream ([`BuiltinStream::legacy`](crate::BuiltinStream::legacy), or handle 0 in
    /// the default build) and the other streams are blocking. With a non-blocking home
    /// stream, or in the per-thread build (where handle 0 is the per-thread stream, which
    /// synchronizes with nothing), nothing orders those launches after the allocation nor the
    /// free after them: use `use_on`.
    pub fn as_ptr(&self) -> *const T {
        self.core.uses.exported();
        self.ptr.as_ptr()
    }

    /// The device address, for a launch argument whose use the launch orders (not handed out).
    pub(crate) fn as_ptr_untracked(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The device address, for kernels on the home stream that write to the buffer.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.core.uses.exported();
        self.ptr.as_ptr()
    }

    /// Runs `launch` with `stream` and the buffer's device address, with the use ordered as a
    /// write of every element: `stream` first waits for every earlier use of the buffer on
    /// other streams (the allocation included), and an event recorded on `stream` after
    /// `launch` makes later uses and the free wait for this one, also when `launch` panics.
    /// A stream waits for a given earlier use once; a repeated use costs one event record (on
    /// the home stream, nothing while no other stream has used the buffer).
    ///
    /// For uses that may overlap, take views: [`DeviceBuffer::slice`]'s `use_on` is a read
    /// (reads on several streams run at once, each waiting only for earlier writes), and
    /// exclusive views of disjoint ranges ([`DeviceBuffer::chunks_mut`],
    /// [`DeviceSliceMut::split_at_mut`](crate::DeviceSliceMut::split_at_mut)) never wait for
    /// each other.
    ///
    /// `launch` typically calls [`StreamRef::launch`] with a kernel of yours; the kernel must
    /// use the address only on `stream`, and only through work enqueued inside `launch`. A
    /// typed launch ([`Kernel::launch`](crate::Kernel::launch)) takes the buffer itself as the
    /// argument and orders the use with no `use_on`. `stream` may belong to another device: a
    /// kernel there reaches the memory only through peer access
    /// ([`Device::enable_peer_access`](crate::Device::enable_peer_access)).
    /// `launch` runs outside the crate's hold (it may wait for other threads' calls of this
    /// crate); the launches it makes through the crate take the hold themselves.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] while `stream` or the home stream is being captured;
    /// [`Error::HomeStreamChanged`];
    /// CUDA's errors recording and waiting for events. If the use cannot be noted after
    /// `launch` (the home stream began a capture meanwhile, a record failed), the error is
    /// returned and the buffer will be leaked rather than freed before the use.
    pub fn use_on<R>(&mut self, stream: impl AsStream, launch: impl FnOnce(&StreamRef, *mut T) -> R) -> Result<R> {
        self.use_range_on(&stream.as_stream(), self.span(0, self.len, true), launch)
    }

    /// [`DeviceBuffer::use_on`] for the elements `span` covers (a view's), whose first address
    /// `launch` gets.
    pub(super) fn use_range_on<R>(
        &self,
        stream: &StreamRef,
        span: Span,
        launch: impl FnOnce(&StreamRef, *mut T) -> R,
    ) -> Result<R> {
        // A stream of any device: a kernel there reaches the memory through peer access
        // (`Device::enable_peer_access`), its launch's `unsafe` contract.
        let home = self.home()?;
        let ptr = self.ptr.as_ptr().cast::<u8>().wrapping_add(span.bytes.start).cast::<T>();
        // Your launch is not held under the capture-transition lock (it may wait for other
        // threads' calls, which a pending transition would hold up): a capture that begins on
        // `stream` meanwhile takes your launch, your `unsafe` contract; one that begins on the
        // home stream makes the buffer leak.
        // Your launch runs outside the hold, so no capture takes it for its graph: refused on a
        // captured stream (a capture's own `use_on` holds the buffer).
        ordered_use(stream, &[self.touched(&home, span)], Hold::ChecksAndWaits, InCaptures::Refused(CAPTURED), |_| {
            Ok(launch(stream, ptr))
        })
    }

    /// Copies `source` into the buffer on `stream`, and returns once the copy has completed:
    /// a Rust slice is pageable memory as far as the types know, and CUDA copies page-locked
    /// memory asynchronously, so returning earlier could free or change the slice under the
    /// copy. For an asynchronous copy, use a [`PinnedBuffer`](super::PinnedBuffer) or
    /// [`register_host`](super::register_host)
    /// ([`cudaMemcpyAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    ///
    /// # Errors
    /// [`Error::Size`] unless `source` has the buffer's length; the errors of
    /// [`DeviceBuffer::use_on`]; [`Error::CaptureMisuse`] where a capture of this crate
    /// forbids waiting ([the rules](crate::capture#calls-refused-during-a-capture)), checked
    /// before the copy is enqueued. Once enqueued, the copy is always waited for.
    pub fn copy_from_slice(&mut self, stream: impl AsStream, source: &[T]) -> Result<()> {
        self.copy_from_slice_on(&stream.as_stream(), source)
    }

    /// Copies the buffer into `destination` on `stream`, and returns once the copy has
    /// completed (see [`DeviceBuffer::copy_from_slice`]).
    ///
    /// # Errors
    /// As [`DeviceBuffer::copy_from_slice`].
    pub fn copy_to_slice(&self, stream: impl AsStream, destination: &mut [T]) -> Result<()> {
        same_length(destination.len(), self.len)?;
        self.copy_range_to_host(&stream.as_stream(), 0, destination)
    }

    /// The elements from `start` on, as many as `destination` holds, copied into it on
    /// `stream`, blocking (see [`DeviceBuffer::copy_from_slice`]): a read of those elements.
    /// The caller checked the range.
    pub(super) fn copy_range_to_host(&self, stream: &StreamRef, start: usize, destination: &mut [T]) -> Result<()> {
        let span = self.span(start, destination.len(), false);
        let (to, from) = (destination.as_mut_ptr().cast::<c_void>(), self.element(start).cast_const());
        self.blocking_copy(stream, span, to, from, sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)
    }

    /// `source` copied into the elements from `start` on, on `stream`, blocking. The caller
    /// checked the range.
    pub(super) fn copy_range_from_host(&self, stream: &StreamRef, start: usize, source: &[T]) -> Result<()> {
        let (to, from) = (self.element(start), source.as_ptr().cast::<c_void>());
        let span = self.span(start, source.len(), true);
        self.blocking_copy(stream, span, to, from, sys::cudaMemcpyKind::cudaMemcpyHostToDevice)
    }

    /// The device address of element `start` (at most `len`: an address, never dereferenced
    /// on the host).
    pub(super) fn element(&self, start: usize) -> *mut c_void {
        self.ptr.as_ptr().wrapping_add(start).cast::<c_void>()
    }

    /// Its ordering state.
    pub(super) fn uses(&self) -> &Uses {
        &self.core.uses
    }

    /// Its memory as a graph holds it apart from the buffer, once its uses are ready for
    /// launches that cannot reach the home stream (see [`BufferCore`] and [`prepare_core`]):
    /// under the enqueue path's hold, for a built graph, or for the graph of the capture whose
    /// holds are `capture`.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] for memory another library lent, or a buffer whose address was
    /// handed out; [`Error::CaptureMisuse`] while the home stream is being captured (other than
    /// by the capture's own stream) and has uses not yet marked; [`Error::HomeStreamChanged`];
    /// CUDA's errors recording the mark.
    pub(super) fn core_for_graphs(&self, capture: Option<&CaptureHolds>) -> Result<Arc<BufferCore>> {
        let core = self.core_for_captures().ok_or(Error::GraphMisuse(
            "memory another library lent is held by a graph only through an Arc<DeviceBuffer>",
        ))?;
        let home = self.home()?;
        home.outside_transitions(InCapture::Captured, || prepare_core(core, &home, capture))?;
        Ok(Arc::clone(core))
    }

    /// The bytes of the `len` elements from `start` on (within the buffer: the callers check),
    /// read or written.
    pub(super) fn span(&self, start: usize, len: usize, writes: bool) -> Span {
        let bytes = start * size_of::<T>()..(start + len) * size_of::<T>();
        Span { bytes, writes }
    }

    /// The buffer's contents, copied on the home stream after its work so far (blocking, as
    /// [`DeviceBuffer::copy_to_slice`]).
    ///
    /// # Errors
    /// As [`DeviceBuffer::copy_to_slice`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.range_to_vec(0, self.len)
    }

    /// The `len` elements from `start` on, copied on the home stream after its work so far
    /// (blocking). The caller checked the range.
    pub(super) fn range_to_vec(&self, start: usize, len: usize) -> Result<Vec<T>> {
        let mut values = Vec::<T>::with_capacity(len);
        let (to, from) = (values.as_mut_ptr().cast::<c_void>(), self.element(start).cast_const());
        let span = self.span(start, len, false);
        self.blocking_copy(&*self.home()?, span, to, from, sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)?;
        // SAFETY: the copy above completed and wrote all `len` elements; any bytes are a valid
        // `T` (`DeviceCopy`).
        unsafe { values.set_len(len) };
        Ok(values)
    }

    /// Copies `source` (pinned host memory) into the buffer on `stream`, asynchronously: the
    /// pinned buffer waits for the copy before its host memory can be touched or freed.
    ///
    /// # Errors
    /// [`Error::Size`] unless the lengths match, or for a pinned buffer an earlier copy of
    /// which could not be tracked; the errors of [`DeviceBuffer::use_on`].
    pub fn copy_from_pinned(&mut self, stream: impl AsStream, source: &mut impl PageLockedMemory<T>) -> Result<()> {
        self.copy_pinned(&stream.as_stream(), 0, self.len, source, true)
    }

    /// A copy between the `len` elements from `start` on (the caller checked them) and
    /// `pinned` (all of it, or its part), into the device (`into_device`) or out of it,
    /// asynchronously: [`Error::Size`] unless `pinned` has `len` elements.
    pub(super) fn copy_pinned(
        &self,
        stream: &StreamRef,
        start: usize,
        len: usize,
        pinned: &mut impl PageLockedMemory<T>,
        into_device: bool,
    ) -> Result<()> {
        let elements = pinned.elements(Token(()));
        same_length(len, elements.len())?;
        self.pinned_copy(stream, pinned.page_locked(Token(())), elements, start, into_device)
    }

    /// Copies the buffer into `destination` (pinned host memory) on `stream`, asynchronously:
    /// the pinned buffer waits for the copy before its host memory can be read or freed.
    ///
    /// # Errors
    /// As [`DeviceBuffer::copy_from_pinned`].
    pub fn copy_to_pinned(&self, stream: impl AsStream, destination: &mut impl PageLockedMemory<T>) -> Result<()> {
        self.copy_pinned(&stream.as_stream(), 0, self.len, destination, false)
    }

    /// Copies another device buffer into this one on `stream`, asynchronously, ordered with
    /// both buffers' home streams. Between devices it is a peer copy
    /// ([`cudaMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)),
    /// enqueued on `stream`, a stream of either device.
    ///
    /// # Errors
    /// [`Error::Size`] unless the lengths match; [`Error::DeviceMismatch`] for a stream of
    /// neither device; the errors of [`DeviceBuffer::use_on`].
    pub fn copy_from<R: AsStream>(&mut self, stream: impl AsStream, source: &DeviceBuffer<T, R>) -> Result<()> {
        same_length(self.len, source.len)?;
        self.copy_range_from(&stream.as_stream(), 0, source, 0, self.len)
    }

    /// `len` elements of `source` from `source_start` on copied into this buffer's from `start`
    /// on, on `stream` (a write of those and a read of those; the callers check the ranges,
    /// and that the two do not overlap).
    pub(super) fn copy_range_from<R: AsStream>(
        &self,
        stream: &StreamRef,
        start: usize,
        source: &DeviceBuffer<T, R>,
        source_start: usize,
        len: usize,
    ) -> Result<()> {
        let bytes = len * size_of::<T>();
        let (to, from) = (self.element(start), source.element(source_start).cast_const());
        let (to_device, from_device) = (self.device, source.device);
        if stream.device() != to_device && stream.device() != from_device {
            return Err(Error::DeviceMismatch {
                what: "a copy between device buffers runs on a stream of one of their devices",
                expected: to_device.ordinal(),
                found: stream.device().ordinal(),
            });
        }
        let (to_home, from_home) = (self.home()?, source.home()?);
        let touched = [
            self.touched(&to_home, self.span(start, len, true)),
            source.touched(&from_home, source.span(source_start, len, false)),
        ];
        let hold = |holds: &CaptureHolds| {
            hold_in_capture(holds, &touched, &[self.core_for_captures(), source.core_for_captures()])
        };
        ordered_use(stream, &touched, Hold::Throughout, InCaptures::Held(&hold), |_| {
            if to_device == from_device {
                return copy_async(stream, to, from, bytes, sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice);
            }
            stream.enqueue(Work::named("cudaMemcpyPeerAsync").uses(|| copy_uses(to, from, bytes)), |_| {
                // SAFETY: two live allocations holding `bytes` at these addresses on their
                // devices, the ordinals of those devices; a live stream of one of them, its
                // device current.
                let code = unsafe {
                    sys::cudaMemcpyPeerAsync(
                        to,
                        to_device.ordinal(),
                        from,
                        from_device.ordinal(),
                        bytes,
                        stream.as_raw(),
                    )
                };
                check(code, "cudaMemcpyPeerAsync")
            })
        })
    }

    /// Sets every byte of the buffer to `byte` on `stream`
    /// ([`cudaMemsetAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    ///
    /// # Errors
    /// The errors of [`DeviceBuffer::use_on`].
    pub fn fill_bytes(&mut self, stream: impl AsStream, byte: u8) -> Result<()> {
        self.fill_bytes_on(&stream.as_stream(), byte)
    }

    fn fill_bytes_on(&self, stream: &StreamRef, byte: u8) -> Result<()> {
        self.ordered(stream, self.span(0, self.len, true), Hold::Throughout, None, |_| {
            let work = Work::named("cudaMemsetAsync").uses(|| vec![self.race_use(AccessKind::Write)]);
            stream.enqueue(work, |_| {
                // SAFETY: a live allocation of `bytes()` bytes; a live stream of its device, current.
                let code = unsafe {
                    sys::cudaMemsetAsync(self.ptr.as_ptr().cast(), i32::from(byte), self.bytes(), stream.as_raw())
                };
                check(code, "cudaMemsetAsync")
            })
        })
    }

    fn copy_from_slice_on(&self, stream: &StreamRef, source: &[T]) -> Result<()> {
        same_length(self.len, source.len())?;
        self.copy_range_from_host(stream, 0, source)
    }

    fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The home stream, while `S` still lends the stream the buffer was allocated on.
    pub(super) fn home(&self) -> Result<BorrowedStream<'_>> {
        let home = self.home.as_stream();
        if (home.identity(), home.known_id()) == self.home_identity {
            Ok(home)
        } else {
            self.core.uses.mark_leaked();
            Err(Error::HomeStreamChanged)
        }
    }

    /// Runs `enqueue` (CUDA work on `stream` that uses the buffer), ordered both ways with the
    /// home stream, with no capture of this crate beginning or ending from the checks to the
    /// last wait (held as `hold` says): CUDA captures allocations, copies and fills rather than refusing them. On a
    /// stream of a capture of this crate, captured, the graph holding the buffer, unless
    /// `refused_in_captures` says why it is refused there.
    fn ordered<R>(
        &self,
        stream: &StreamRef,
        span: Span,
        hold: Hold,
        refused_in_captures: Option<&'static str>,
        enqueue: impl FnOnce(&mut UseEvent<SharedEvent>) -> Result<R>,
    ) -> Result<R> {
        same_device("device memory is used on streams of its own device", self.device, stream.device())?;
        let home = self.home()?;
        let touched = [self.touched(&home, span)];
        let in_capture = |holds: &CaptureHolds| hold_in_capture(holds, &touched, &[self.core_for_captures()]);
        let in_captures = refused_in_captures.map_or(InCaptures::Held(&in_capture), InCaptures::Refused);
        ordered_use(stream, &touched, hold, in_captures, enqueue)
    }

    /// What a use of `span` of the buffer touches, `home` its home stream.
    pub(super) fn touched<'a>(&'a self, home: &'a StreamRef, span: Span) -> Touched<'a> {
        Touched { home: Some(home), uses: &self.core.uses, span }
    }

    /// Its memory as a capture's graph holds it apart from the buffer, but for memory another
    /// library lent (whose end is that library's).
    pub(super) fn core_for_captures(&self) -> Option<&Arc<BufferCore>> {
        (!matches!(self.origin, Origin::Lent(_))).then_some(&self.core)
    }

    /// Lends the elements `range` (checked by the caller) to work another library enqueues on
    /// `stream` (an export): `stream` waits for every earlier use of them, and later uses and
    /// the free wait for `stream`'s work up to this call. The race detector sees a write of
    /// those elements there, named `operation`.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn lend_to(&self, stream: &StreamRef, range: Range<usize>, operation: &'static str) -> Result<()> {
        let span = self.span(range.start, range.len(), true);
        let (address, bytes) = (self.element(range.start) as u64, span.bytes.len() as u64);
        self.ordered(stream, span, Hold::Throughout, Some(CAPTURED), |_| {
            let access = || vec![Access::bytes(address, bytes, AccessKind::Write).as_use()];
            stream.enqueue(Work::named(operation).uses(access), |_| Ok(()))
        })
    }

    /// A use that could not be ordered before the free: the drop leaks the memory, and every
    /// later use is refused.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn leak_on_drop(&self) {
        self.core.uses.mark_leaked();
    }

    /// Whether a graph (or capture, or executable) holds the memory apart from the buffer: none
    /// can begin to while the caller has the buffer by value.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn held_by_graphs(&self) -> bool {
        Arc::strong_count(&self.core) > 1
    }

    /// Whether this buffer allocated its memory (not a graph's output, not lent memory).
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn allocated_here(&self) -> bool {
        matches!(self.origin, Origin::Allocated)
    }

    /// Whether a use could not be ordered ([`DeviceBuffer::leak_on_drop`]).
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn leaked(&self) -> bool {
        self.core.uses.leaked()
    }

    /// A copy between the buffer and host memory the caller lends only for this call: the
    /// checks a wait makes come first, then the copy (ordered with the home stream) and an
    /// event recorded after it, then the wait for that event, which nothing can refuse once
    /// the copy is enqueued. CUDA copies pageable memory synchronously (after the stream's
    /// earlier work), and the copy is enqueued under the capture-transition lock: a capture of
    /// this crate that another thread begins or ends meanwhile waits for it.
    fn blocking_copy(
        &self,
        stream: &StreamRef,
        span: Span,
        to: *mut c_void,
        from: *const c_void,
        kind: sys::cudaMemcpyKind,
    ) -> Result<()> {
        let done = Arc::new(Event::internal(stream.device())?);
        let mut recorded = false;
        let (ordered, enqueued) =
            self.tracked_copy(stream, span, (to, from, kind), Hold::ThroughoutBlocking, |copy, after_copy| {
                if live_captures::any() {
                    // This thread's own capture would be invalidated by the wait below.
                    live_captures::refuse_unsafe_call()?;
                }
                sync_debug::before_sync("cudaMemcpyAsync (pageable host memory)", SyncKind::PageableCopy)?;
                copy()?;
                // Under the capture-transition lock, on a stream checked not capturing: a plain
                // record (the crate's record would take the lock again).
                stream.record_raw(done.as_raw(), 0)?;
                recorded = true;
                // The buffer's mark shares it.
                after_copy.event = Some(Arc::clone(&done));
                Ok(())
            });
        // The copy is waited for before the host memory goes back.
        match wait_for_blocking_copy(stream, &done, enqueued, recorded) {
            Some(waited) => ordered.and(waited),
            None => ordered,
        }
    }

    /// A copy between the buffer's elements from `start` on and `elements` of page-locked
    /// memory, into the device (`into_device`) or out of it: ordered with the buffer's uses and
    /// with the copies of those host elements in flight that it conflicts with (a copy into
    /// them waits for every copy of them in flight, one out of them for the copies into them),
    /// and noted in the page-locked memory whenever it was enqueued.
    fn pinned_copy(
        &self,
        stream: &StreamRef,
        pinned: &mut PageLocked<T>,
        elements: Range<usize>,
        start: usize,
        into_device: bool,
    ) -> Result<()> {
        let span = self.span(start, elements.len(), into_device);
        let device = self.element(start);
        let page_locked = pinned.as_mut_ptr().wrapping_add(elements.start).cast::<c_void>();
        let (to, from, kind) = if into_device {
            (device, page_locked.cast_const(), sys::cudaMemcpyKind::cudaMemcpyHostToDevice)
        } else {
            (page_locked, device.cast_const(), sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)
        };
        // The pinned side: its elements' bytes, read where the device side is written and
        // written where it is read.
        let bytes = elements.start * size_of::<T>()..elements.end * size_of::<T>();
        let host = Span { bytes, writes: !into_device };
        // One event after the copy serves both sides: the pinned side records it, the buffer's
        // mark shares it.
        let (ordered, _) = self.tracked_copy(stream, span, (to, from, kind), Hold::Throughout, |copy, recorded| {
            let ticket = pinned.order_copy(stream, &host)?;
            copy()?;
            recorded.wanted = true;
            pinned.copied(stream, host, ticket, recorded);
            Ok(())
        });
        ordered
    }

    /// `copy_with`, ordered as a use of `span` of the buffer on `stream` (held as `hold` says:
    /// [`Hold::ThroughoutBlocking`] where CUDA may make the copy wait for the stream), given the
    /// copy itself (to, from, kind) to enqueue between what must come before and after it, and
    /// the slot of an event recorded after it that the buffer's mark may share: the ordering's
    /// result, and whether the copy was enqueued whatever that result (its host memory must
    /// outlive it).
    fn tracked_copy(
        &self,
        stream: &StreamRef,
        span: Span,
        (to, from, kind): (*mut c_void, *const c_void, sys::cudaMemcpyKind),
        hold: Hold,
        copy_with: impl FnOnce(&mut dyn FnMut() -> Result<()>, &mut UseEvent<SharedEvent>) -> Result<()>,
    ) -> (Result<()>, bool) {
        let bytes = span.bytes.len();
        let mut enqueued = false;
        // Host memory is not held by a graph: refused in a capture.
        let ordered = self.ordered(stream, span, hold, Some(CAPTURED), |recorded| {
            copy_with(
                &mut || {
                    copy_async(stream, to, from, bytes, kind)?;
                    enqueued = true;
                    Ok(())
                },
                recorded,
            )
        });
        (ordered, enqueued)
    }
}

/// `bytes` on `stream`, from `pool` or the device's current pool, in the stream's order.
fn allocate_on(stream: &StreamRef, bytes: usize, pool: Option<&MemPool>) -> Result<*mut c_void> {
    let ptr = allocate_raw(stream, bytes, pool)?;
    stream.race_allocated(
        ptr as u64,
        bytes as u64,
        if pool.is_some() { "cudaMallocFromPoolAsync" } else { "cudaMallocAsync" },
    );
    Ok(ptr)
}

fn allocate_raw(stream: &StreamRef, bytes: usize, pool: Option<&MemPool>) -> Result<*mut c_void> {
    // The stream is outside any capture (checked under the hold), but the calling thread may
    // be capturing another stream in Global or ThreadLocal mode.
    uncaptured_stream_call(|| allocate_now(stream, bytes, pool))
}

fn allocate_now(stream: &StreamRef, bytes: usize, pool: Option<&MemPool>) -> Result<*mut c_void> {
    match stream.enter()? {
        // A real handle carries its context: the driver allocates on its device from any
        // thread, with no context made current.
        None => driver::mem_alloc_async(bytes, pool.map(MemPool::as_raw), stream.as_raw()),
        Some(_current) => {
            let mut ptr: *mut c_void = std::ptr::null_mut();
            let (code, api) = match pool {
                // SAFETY: a valid out-pointer; a special handle of the current device; bytes > 0.
                None => (unsafe { sys::cudaMallocAsync(&mut ptr, bytes, stream.as_raw()) }, "cudaMallocAsync"),
                // SAFETY: as above, and a live pool of the stream's device.
                Some(pool) => (
                    unsafe { sys::cudaMallocFromPoolAsync(&mut ptr, bytes, pool.as_raw(), stream.as_raw()) },
                    "cudaMallocFromPoolAsync",
                ),
            };
            check(code, api)?;
            Ok(ptr)
        }
    }
}

/// `cudaMemcpyAsync` on `stream`, its device current.
pub(super) fn copy_async(
    stream: &StreamRef,
    to: *mut c_void,
    from: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
) -> Result<()> {
    stream.enqueue(Work::named("cudaMemcpyAsync").uses(|| copy_uses(to, from, bytes)), |_| {
        // SAFETY: the callers pass `bytes` valid bytes at both addresses, of the kinds `kind`
        // names, alive until the copy has completed (device buffers by the stream order, host
        // memory by a wait or a pinned buffer's record); a live stream.
        check(unsafe { sys::cudaMemcpyAsync(to, from, bytes, kind, stream.as_raw()) }, "cudaMemcpyAsync")
    })
}

/// What a copy of `bytes` from `from` to `to` reads and writes, for the race detector.
fn copy_uses(to: *mut c_void, from: *const c_void, bytes: usize) -> Vec<Use> {
    vec![
        Access::bytes(from as u64, bytes as u64, AccessKind::Read).as_use(),
        Access::bytes(to as u64, bytes as u64, AccessKind::Write).as_use(),
    ]
}

impl<T: DeviceCopy, S: AsStream> Drop for DeviceBuffer<T, S> {
    /// Frees the memory on the home stream (`cudaFreeAsync`), after every use ordered there;
    /// memory another library lent is handed back to it once those uses have completed.
    /// While a graph holds the memory, frees nothing: the last graph or executable that holds
    /// it frees it (see [the memory docs](crate::memory#graphs)). Leaks it instead where that cannot be done safely:
    /// inside a host function, when the home stream behind `S` is no longer the one it was
    /// allocated on (another thread's per-thread stream), while the home stream is being
    /// captured, after a failed ordering, and when CUDA refuses the free (a fault).
    fn drop(&mut self) {
        let freed = Freed {
            address: self.ptr.as_ptr() as u64,
            bytes: self.bytes(),
            device: self.device,
            origin: std::mem::replace(&mut self.origin, Origin::Allocated),
        };
        let Ok(home) = self.home() else { return freed.leak() };
        // Only a graph holds a clone of the core, and none can take one now (that takes a
        // borrow of the buffer); one that lets go meanwhile leaves the free to this drop's
        // own clone, at its end.
        if self.held_by_graphs() {
            // Reported by the sync-debug mode, never refused (a record on the legacy stream):
            // refused, the memory would leak and the graph's launches be refused.
            match sync_debug::reporting_only(|| detach_from(&home, &self.core.uses)) {
                Ok(tail) => self.core.detach(Detached { tail, freed }),
                Err(_) => {
                    self.core.uses.mark_leaked();
                    freed.leak();
                }
            }
            return;
        }
        free_after_uses(&home, &self.core.uses, freed);
    }
}

impl<T: DeviceCopy, S: AsStream> DeviceBuffer<T, S> {
    /// The whole buffer as a use of `kind`, for the race detector.
    fn race_use(&self, kind: AccessKind) -> Use {
        Access::bytes(self.ptr.as_ptr() as u64, self.bytes() as u64, kind).as_use()
    }

    /// The whole buffer read, for [`LaunchConfig::accesses`](crate::LaunchConfig::accesses)
    /// and [`StreamRef::declare_accesses`](crate::StreamRef::declare_accesses).
    pub fn read_access(&self) -> Access {
        // A declaration for the detector, not an address for work: no export.
        Access::read(self.as_ptr_untracked(), self.len)
    }

    /// The whole buffer written, as [`DeviceBuffer::read_access`].
    pub fn write_access(&self) -> Access {
        Access::write(self.as_ptr_untracked(), self.len)
    }
}

impl<T: DeviceCopy, S: AsStream> fmt::Debug for DeviceBuffer<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("device", &self.device)
            .field("home", &self.home_raw)
            .finish()
    }
}
