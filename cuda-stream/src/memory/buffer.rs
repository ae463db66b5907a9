//! [`DeviceBuffer`]: device memory allocated and freed in the order of its home stream, used on
//! other streams only through calls that order the use both ways.

use super::pinned::PinnedBuffer;
use super::pool::MemPool;
use super::{DeviceCopy, byte_size, same_length};
use crate::call::live_captures;
use crate::device::{Device, same_device};
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::stream::capture_status::CaptureStatus;
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use crate::sys;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// `len` elements of `T` in device memory, allocated on a stream (its *home*) and freed on it
/// when dropped, after every use this crate ordered
/// ([stream-ordered allocator](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)).
///
/// `S` is what keeps the home stream alive: `&Stream` (the buffer borrows the stream), or
/// `Arc<Stream>`, or any [`AsStream`]. Work on another stream goes through
/// [`use_on`](DeviceBuffer::use_on) and the copy methods, which order it after the home
/// stream's work so far and order the home stream's later work, the free included, after it.
/// See the [module docs](crate::memory).
///
/// The contents start uninitialized on the GPU; [`zeroed`](DeviceBuffer::zeroed) and
/// [`from_slice`](DeviceBuffer::from_slice) give them values. Reading them back is always
/// defined: `T` is [`DeviceCopy`].
pub struct DeviceBuffer<T: DeviceCopy, S: AsStream> {
    ptr: NonNull<T>,
    len: usize,
    device: Device,
    /// The home stream's handle when the buffer was allocated: a drop that finds another one
    /// behind `home` leaks rather than frees on a stream the uses were not ordered with.
    home_raw: sys::cudaStream_t,
    home: S,
    /// Set when a use could not be ordered before the free: the drop then leaks.
    leak: AtomicBool,
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
        buffer.fill_bytes_on(&buffer.home.as_stream(), 0)?;
        Ok(buffer)
    }

    /// Allocates `source.len()` elements on `stream` and copies `source` into them; returns
    /// once the copy has completed (see [`DeviceBuffer::copy_from_slice`]).
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`] and [`DeviceBuffer::copy_from_slice`].
    pub fn from_slice(stream: S, source: &[T]) -> Result<Self> {
        let buffer = Self::new(stream, source.len())?;
        buffer.copy_from_slice_on(&buffer.home.as_stream(), source)?;
        Ok(buffer)
    }

    fn allocate(home: S, len: usize, pool: Option<&MemPool>) -> Result<Self> {
        const { assert!(align_of::<T>() <= 256, "CUDA's allocations are aligned to 256 bytes") };
        let bytes = byte_size::<T>(len)?;
        let stream = home.as_stream();
        refuse_capture(&stream)?;
        if let Some(pool) = pool {
            same_device("a memory pool serves streams of its own device", pool.device(), stream.device())?;
        }
        let _current = stream.enter_runtime()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        let (code, api) = match pool {
            // SAFETY: a valid out-pointer; a live stream of the current device; bytes > 0.
            None => (unsafe { sys::cudaMallocAsync(&mut ptr, bytes, stream.as_raw()) }, "cudaMallocAsync"),
            // SAFETY: as above, and a live pool of the stream's device.
            Some(pool) => (
                unsafe { sys::cudaMallocFromPoolAsync(&mut ptr, bytes, pool.as_raw(), stream.as_raw()) },
                "cudaMallocFromPoolAsync",
            ),
        };
        check(code, api)?;
        let ptr = NonNull::new(ptr.cast::<T>()).ok_or(Error::Size("CUDA returned no address"))?;
        let (home_raw, device) = (stream.as_raw(), stream.device());
        Ok(DeviceBuffer { ptr, len, device, home_raw, home, leak: AtomicBool::new(false), _owns: PhantomData })
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

    /// The device address, for kernels on the home stream (elsewhere, see
    /// [`DeviceBuffer::use_on`]). Using it in a kernel is `unsafe`, like every launch.
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The device address, for kernels on the home stream that write to the buffer.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Runs `launch` with `stream` and the buffer's device address, with the use ordered both
    /// ways: `stream` first waits for the home stream's work so far (the allocation included),
    /// and the home stream then waits for what `launch` enqueued on `stream`, so the free
    /// comes after it. On the home stream itself it costs nothing. The home stream waits also
    /// when `launch` panics.
    ///
    /// `launch` typically calls [`StreamRef::launch`] with a kernel of yours; the kernel must
    /// use the address only on `stream`, and only through work enqueued inside `launch`.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device; [`Error::CaptureMisuse`]
    /// while `stream` is being captured; the errors of [`StreamRef::wait_stream`]. If the home
    /// stream cannot be made to wait after `launch`, the error is returned and the buffer will
    /// be leaked rather than freed before the use.
    pub fn use_on<R>(&mut self, stream: impl AsStream, launch: impl FnOnce(&StreamRef, *mut T) -> R) -> Result<R> {
        let stream = stream.as_stream();
        let ptr = self.ptr.as_ptr();
        self.on_stream(&stream, || Ok(launch(&stream, ptr)))
    }

    /// Copies `source` into the buffer on `stream`, and returns once the copy has completed
    /// (it waits for `stream`): a Rust slice is pageable memory as far as the types know, and
    /// CUDA copies page-locked memory asynchronously, so returning earlier could free or
    /// change the slice under the copy. For an asynchronous copy, use a [`PinnedBuffer`]
    /// ([`cudaMemcpyAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    ///
    /// # Errors
    /// [`Error::Size`] unless `source` has the buffer's length; the errors of
    /// [`DeviceBuffer::use_on`] and of [`StreamRef::synchronize`] (whose capture refusals are
    /// checked before the copy is enqueued).
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
        let stream = stream.as_stream();
        let bytes = self.bytes();
        let (to, from) = (destination.as_mut_ptr().cast::<c_void>(), self.ptr.as_ptr().cast::<c_void>().cast_const());
        self.blocking_copy(&stream, to, from, bytes, sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)
    }

    /// The buffer's contents, copied on the home stream after its work so far (blocking, as
    /// [`DeviceBuffer::copy_to_slice`]).
    ///
    /// # Errors
    /// As [`DeviceBuffer::copy_to_slice`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut values = Vec::<T>::with_capacity(self.len);
        let stream = self.home.as_stream();
        let bytes = self.bytes();
        let (to, from) = (values.as_mut_ptr().cast::<c_void>(), self.ptr.as_ptr().cast::<c_void>().cast_const());
        self.blocking_copy(&stream, to, from, bytes, sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)?;
        // SAFETY: the copy above completed and wrote all `len` elements; any bytes are a valid
        // `T` (`DeviceCopy`).
        unsafe { values.set_len(self.len) };
        Ok(values)
    }

    /// Copies `source` (pinned host memory) into the buffer on `stream`, asynchronously: the
    /// pinned buffer waits for the copy before its host memory can be touched or freed.
    ///
    /// # Errors
    /// [`Error::Size`] unless the lengths match; the errors of [`DeviceBuffer::use_on`].
    pub fn copy_from_pinned(&mut self, stream: impl AsStream, source: &mut PinnedBuffer<T>) -> Result<()> {
        same_length(self.len, source.len())?;
        let stream = stream.as_stream();
        let (to, from) = (self.ptr.as_ptr().cast::<c_void>(), source.as_ptr().cast::<c_void>());
        self.on_stream(&stream, || {
            copy_async(&stream, to, from, self.bytes(), sys::cudaMemcpyKind::cudaMemcpyHostToDevice)
        })?;
        source.in_flight_on(&stream)
    }

    /// Copies the buffer into `destination` (pinned host memory) on `stream`, asynchronously:
    /// the pinned buffer waits for the copy before its host memory can be read or freed.
    ///
    /// # Errors
    /// As [`DeviceBuffer::copy_from_pinned`].
    pub fn copy_to_pinned(&self, stream: impl AsStream, destination: &mut PinnedBuffer<T>) -> Result<()> {
        same_length(destination.len(), self.len)?;
        let stream = stream.as_stream();
        let (to, from) = (destination.as_mut_ptr().cast::<c_void>(), self.ptr.as_ptr().cast::<c_void>().cast_const());
        self.on_stream(&stream, || {
            copy_async(&stream, to, from, self.bytes(), sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)
        })?;
        destination.in_flight_on(&stream)
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
        let stream = stream.as_stream();
        let bytes = self.bytes();
        let (to, from) = (self.ptr.as_ptr().cast::<c_void>(), source.ptr.as_ptr().cast::<c_void>().cast_const());
        let (to_device, from_device) = (self.device, source.device);
        if stream.device() != to_device && stream.device() != from_device {
            return Err(Error::DeviceMismatch {
                what: "a copy between device buffers runs on a stream of one of their devices",
                expected: to_device.ordinal(),
                found: stream.device().ordinal(),
            });
        }
        self.on_any_stream(&stream, || {
            source.on_any_stream(&stream, || {
                if to_device == from_device {
                    return copy_async(&stream, to, from, bytes, sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice);
                }
                let _current = stream.enter_runtime()?;
                // SAFETY: two live allocations of `bytes` on their devices, the ordinals of
                // those devices; a live stream of one of them.
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
        self.on_stream(stream, || {
            let _current = stream.enter_runtime()?;
            // SAFETY: a live allocation of `bytes()` bytes; a live stream of its device.
            let code = unsafe {
                sys::cudaMemsetAsync(self.ptr.as_ptr().cast(), i32::from(byte), self.bytes(), stream.as_raw())
            };
            check(code, "cudaMemsetAsync")
        })
    }

    fn copy_from_slice_on(&self, stream: &StreamRef, source: &[T]) -> Result<()> {
        same_length(self.len, source.len())?;
        let (to, from) = (self.ptr.as_ptr().cast::<c_void>(), source.as_ptr().cast::<c_void>());
        self.blocking_copy(stream, to, from, self.bytes(), sys::cudaMemcpyKind::cudaMemcpyHostToDevice)
    }

    fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// A copy between the buffer and host memory the caller borrows only for this call: the
    /// checks a synchronize makes come first (so that none can refuse it once the copy is in
    /// flight), then the copy, ordered with the home stream, then the wait for it.
    fn blocking_copy(
        &self,
        stream: &StreamRef,
        to: *mut c_void,
        from: *const c_void,
        bytes: usize,
        kind: sys::cudaMemcpyKind,
    ) -> Result<()> {
        if let Some(_transitions) = live_captures::unsafe_call_hold()? {
            refuse_capturing_stream(stream)?;
        }
        self.on_stream(stream, || copy_async(stream, to, from, bytes, kind))?;
        stream.synchronize_checked_earlier()
    }

    /// Runs `enqueue` (work on `stream` that uses the buffer), ordered both ways with the home
    /// stream, on a stream of the buffer's device.
    fn on_stream<R>(&self, stream: &StreamRef, enqueue: impl FnOnce() -> Result<R>) -> Result<R> {
        same_device("device memory is used on streams of its own device", self.device, stream.device())?;
        self.on_any_stream(stream, enqueue)
    }

    /// [`DeviceBuffer::on_stream`] on a stream of any device (a peer copy).
    fn on_any_stream<R>(&self, stream: &StreamRef, enqueue: impl FnOnce() -> Result<R>) -> Result<R> {
        refuse_capture(stream)?;
        if stream.as_raw() == self.home_raw && stream.device() == self.device {
            return enqueue();
        }
        let home = self.home.as_stream();
        // The allocation, and everything the home stream did with the memory, come first.
        stream.wait_stream(&*home)?;
        // Then the home stream, and so the free, waits for the use: also if `enqueue` panics.
        let after = HomeWaits { home: &home, stream, leak: &self.leak };
        let result = enqueue();
        after.finish()?;
        result
    }
}

/// Makes the home stream wait for the work enqueued on another stream: at `finish`, or, if
/// that is never reached (a panic), when dropped. A wait that fails marks the buffer leaked.
struct HomeWaits<'a> {
    home: &'a StreamRef,
    stream: &'a StreamRef,
    leak: &'a AtomicBool,
}

impl HomeWaits<'_> {
    fn finish(self) -> Result<()> {
        let waited = self.wait();
        std::mem::forget(self);
        waited
    }

    fn wait(&self) -> Result<()> {
        let waited = self.home.wait_stream(self.stream);
        if waited.is_err() {
            self.leak.store(true, Ordering::Relaxed);
        }
        waited
    }
}

impl Drop for HomeWaits<'_> {
    fn drop(&mut self) {
        let _ = self.wait();
    }
}

/// [`Error::CaptureMisuse`] while `stream` may be captured and is: graph replays would
/// outlive the buffer. One load while no capture can be in progress.
fn refuse_capture(stream: &StreamRef) -> Result<()> {
    if stream.may_be_captured_now() {
        refuse_capturing_stream(stream)?;
    }
    Ok(())
}

fn refuse_capturing_stream(stream: &StreamRef) -> Result<()> {
    stream.refuse_capturing(
        "device memory is not allocated, copied or filled during a capture (a replay would outlive it)",
    )
}

/// `cudaMemcpyAsync` on `stream`, its device current.
fn copy_async(
    stream: &StreamRef,
    to: *mut c_void,
    from: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
) -> Result<()> {
    let _current = stream.enter_runtime()?;
    // SAFETY: the callers pass `bytes` valid bytes at both addresses, of the kinds `kind`
    // names, alive until the copy has completed (device buffers by the stream order, host
    // memory by a wait or a pinned buffer's record); a live stream.
    check(unsafe { sys::cudaMemcpyAsync(to, from, bytes, kind, stream.as_raw()) }, "cudaMemcpyAsync")
}

impl<T: DeviceCopy, S: AsStream> Drop for DeviceBuffer<T, S> {
    /// Frees the memory on the home stream (`cudaFreeAsync`), after every use ordered there.
    /// Leaks it instead where that cannot be done safely: inside a host function, when the
    /// home stream behind `S` is no longer the one it was allocated on (another thread's
    /// per-thread stream), while the home stream is being captured, after a failed ordering,
    /// and when CUDA refuses the free (a fault).
    fn drop(&mut self) {
        if *self.leak.get_mut() || refuse_inside_host_fn().is_err() {
            return;
        }
        let home = self.home.as_stream();
        if home.as_raw() != self.home_raw || home.device() != self.device {
            return;
        }
        if home.may_be_captured_now() && home.capture_status() != Ok(CaptureStatus::None) {
            return;
        }
        let Ok(_current) = home.enter_runtime() else { return };
        // SAFETY: memory this buffer allocated and nothing else frees; every use this crate
        // enqueued is ordered before this point of the home stream. On failure it is leaked.
        let _ = check(unsafe { sys::cudaFreeAsync(self.ptr.as_ptr().cast(), home.as_raw()) }, "cudaFreeAsync");
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
