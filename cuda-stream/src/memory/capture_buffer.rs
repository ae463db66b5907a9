//! Device memory that a capture's graph allocates and frees: [`Capture::alloc`] and
//! [`Capture::free`] (the graph's own memory nodes, `cudaMallocAsync` and `cudaFreeAsync`
//! during capture), and [`Capture::scratch`], the two around a closure.
//!
//! A [`CaptureBuffer`] remembers where the capture used it: every copy, fill and `use_on` of it
//! on a stream of the capture first waits for the allocation (a stream forked before it would
//! otherwise run ahead of the memory), and leaves an event recorded after the use. The free
//! waits for all of them, whichever streams they were on, so the graph's allocator reuses the
//! block only after every use: PyTorch's `record_stream` inside a capture, without the wait
//! for the join (the free node depends on the forked streams' uses themselves). The events are
//! captured records: they order nodes of the graph, and nothing ever queries them.

use super::{DeviceCopy, byte_size};
use crate::call::transitions::no_capture_transitions;
use crate::device::keep_alive::graph_mutations;
use crate::device::{Device, same_device};
use crate::event::Event;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::{call_outside_host_fn, refuse_inside_host_fn};
use crate::graph::capture::{Capture, CaptureMode};
use crate::stream::enqueue::InCapture;
use crate::stream::{AsStream, StreamRef};
use crate::sys;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// `len` elements of device memory that a capture's graph allocates at every launch of an
/// executable made from it ([`Capture::alloc`]), valid in the capture's work between the
/// allocation and [`Capture::free`]. The capture's memory calls take it where they take a
/// shared buffer ([`Capture::copy`], [`Capture::fill_bytes`],
/// [`Capture::copy_from_pinned`], [`Capture::copy_to_pinned`], [`Capture::use_on`]); nothing
/// else reaches its address.
///
/// A `CaptureBuffer` never frees anything when dropped. To hand the memory to the program
/// after each launch, give it to [`Capture::keep`](crate::Capture::keep). One dropped without
/// a [`Capture::free`] that succeeded, nor kept, is memory the graph allocates and never frees:
/// CUDA's graph memory that outlives a launch. Nothing in this crate frees it then: a second
/// launch of an executable fails (CUDA's `cudaErrorInvalidValue`) unless it was instantiated
/// with [`auto_free_on_launch`](crate::InstantiateOptions::auto_free_on_launch), where each
/// launch frees the last one's; and the memory stays allocated until the process exits.
#[must_use = "a capture buffer never given to Capture::free is allocated at every launch and never freed"]
pub struct CaptureBuffer<T: DeviceCopy> {
    allocation: CaptureAllocation,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T: DeviceCopy> CaptureBuffer<T> {
    /// Its length in elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: CUDA has no empty allocation.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The device it is allocated on, the capture's.
    pub fn device(&self) -> Device {
        self.allocation.device
    }

    /// The id of the capture whose graph owns it ([`Capture::id`]).
    pub fn capture_id(&self) -> u64 {
        self.allocation.capture
    }

    pub(super) fn allocation(&self) -> &CaptureAllocation {
        &self.allocation
    }
}

impl<T: DeviceCopy> std::fmt::Debug for CaptureBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureBuffer")
            .field("address", &format_args!("{:#x}", self.allocation.address))
            .field("len", &self.len)
            .field("device", &self.allocation.device)
            .field("capture", &self.allocation.capture)
            .finish()
    }
}

/// A capture's allocation, and the events its uses left (see the [module docs](self)).
pub(super) struct CaptureAllocation {
    /// The graph's address of it (fixed for an executable's every launch), and its size.
    address: usize,
    bytes: usize,
    device: Device,
    capture: u64,
    /// Recorded on the allocating stream right after the allocation: every use waits for it.
    /// `None` only in the drop.
    allocated: Option<Event>,
    /// One event recorded after each use: the free waits for all of them.
    used: Mutex<Vec<Event>>,
    /// A use whose event could not be recorded after it: the free is refused.
    unordered: AtomicBool,
    /// Freed in the graph: every later use and free is refused.
    freed: AtomicBool,
}

impl CaptureAllocation {
    /// The address of byte `offset` of it.
    pub(super) fn at(&self, offset: usize) -> *mut c_void {
        (self.address + offset) as *mut c_void
    }

    /// The addresses of its bytes.
    pub(super) fn byte_range(&self) -> Range<u64> {
        self.address as u64..(self.address + self.bytes) as u64
    }

    /// [`Error::CaptureMisuse`] unless it is capture `id`'s, and not freed.
    pub(super) fn refuse_unusable(&self, id: u64) -> Result<()> {
        if self.capture != id {
            return Err(Error::CaptureMisuse("a capture buffer is used only in the capture that allocated it"));
        }
        if self.freed.load(Ordering::Relaxed) {
            return Err(Error::CaptureMisuse("the capture buffer was freed"));
        }
        Ok(())
    }

    /// Orders `stream` (a stream of its capture, checked by the caller under the enqueue
    /// path's hold) after the allocation, before a use; returns the event that
    /// [`CaptureAllocation::used_on`] records after it, created here, before anything of the
    /// use is enqueued.
    pub(super) fn before_use(&self, stream: &StreamRef) -> Result<Event> {
        let used = Event::internal(self.device)?;
        if let Some(allocated) = &self.allocated {
            stream.wait_raw(allocated.as_raw(), 0)?;
        }
        Ok(used)
    }

    /// Records `used` on `stream` after a use there (under the enqueue path's hold), and keeps
    /// it for the free. If the record failed, the free is refused: it would not wait for the
    /// use.
    pub(super) fn used_on(&self, stream: &StreamRef, used: Event) -> Result<()> {
        let recorded = stream.record_raw(used.as_raw(), 0);
        if recorded.is_err() {
            self.mark_unordered();
        }
        self.used.lock().unwrap_or_else(PoisonError::into_inner).push(used);
        recorded
    }

    /// A use was made whose end no event marks: no free is ordered after it.
    pub(super) fn mark_unordered(&self) {
        self.unordered.store(true, Ordering::Relaxed);
    }
}

impl Drop for CaptureAllocation {
    fn drop(&mut self) {
        // The events were recorded into the capture (`record_raw` marks no record state): they
        // are destroyed where no capture transition of this crate overlaps, as an `Event` whose
        // last record went into a capture is (a destroy racing the capture's end on another
        // thread crashed libcuda); inside a host function, outside it.
        let mut events = std::mem::take(self.used.get_mut().unwrap_or_else(PoisonError::into_inner));
        events.extend(self.allocated.take());
        call_outside_host_fn(move || {
            let _transitions = no_capture_transitions();
            drop(events);
        });
    }
}

impl<M: CaptureMode> Capture<'_, M> {
    /// Allocates `len` elements of device memory on `stream` (the captured stream, or one
    /// that joined this capture) as the graph's own memory node
    /// ([graph memory nodes](https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/cuda-graphs.html):
    /// `cudaMallocAsync` during capture). Every launch of an executable made from the graph
    /// allocates it again at that point, at the same address. Use it with the capture's memory
    /// calls, on any stream of the capture (each use waits for the allocation), and give it
    /// back with [`Capture::free`]; see [`CaptureBuffer`] for one that is never freed.
    ///
    /// # Errors
    /// [`Error::Size`] for zero elements or an overflowing byte size;
    /// [`Error::CaptureMisuse`] for a stream that is not part of this capture (nothing is
    /// allocated); [`Error::InsideHostFn`]; CUDA's errors (if the allocation's event cannot be
    /// recorded after it, the allocation is left unfreed in the graph).
    pub fn alloc<T: DeviceCopy>(&mut self, stream: impl AsStream, len: usize) -> Result<CaptureBuffer<T>> {
        const { assert!(align_of::<T>() <= 256, "CUDA's allocations are aligned to 256 bytes") };
        let bytes = byte_size::<T>(len)?;
        let stream = stream.as_stream();
        refuse_inside_host_fn()?;
        let allocated = Event::internal(stream.device())?;
        // The check, the allocation and its event under the enqueue path's hold: no node is
        // added by hand to the capture's graph in between (it would take the stream's capture
        // dependencies past the allocation), and the stream stays in this capture (until
        // `end`, which needs `self`).
        let address = stream.outside_transitions(InCapture::Captured, || {
            self.refuse_outside(&stream)?;
            let address = {
                let _current = stream.enter_runtime()?;
                // Not beside another thread's work on the same graph.
                let _turn = graph_mutations();
                let mut address: *mut c_void = std::ptr::null_mut();
                // SAFETY: a valid out-pointer; a stream of an active capture (the allocation is
                // the graph's node); bytes > 0.
                check(unsafe { sys::cudaMallocAsync(&mut address, bytes, stream.as_raw()) }, "cudaMallocAsync")?;
                address
            };
            stream.record_raw(allocated.as_raw(), 0)?;
            Ok(address)
        })?;
        let allocation = CaptureAllocation {
            address: address as usize,
            bytes,
            device: stream.device(),
            capture: self.id(),
            allocated: Some(allocated),
            used: Mutex::new(Vec::new()),
            unordered: AtomicBool::new(false),
            freed: AtomicBool::new(false),
        };
        Ok(CaptureBuffer { allocation, len, _element: PhantomData })
    }

    /// Frees `buffer` on `stream`, a stream of this capture, as the graph's free node
    /// (`cudaFreeAsync` during capture), after every use of it: `stream` first waits for the
    /// events its uses left on their streams, so the graph's allocator gives the block to a
    /// later allocation only once all of them are done, whichever forked streams they ran on.
    /// Once freed, the buffer is refused by every call ([`Error::CaptureMisuse`]); drop it.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a stream that is not part of this capture, a buffer of
    /// another capture or one already freed, and a buffer one of whose uses could not be
    /// ordered (its event was not recorded: such a buffer is never freed);
    /// [`Error::DeviceMismatch`] for a stream of another device; [`Error::InsideHostFn`];
    /// CUDA's errors. The buffer is then not freed, and the free may be tried again.
    pub fn free<T: DeviceCopy>(&mut self, stream: impl AsStream, buffer: &mut CaptureBuffer<T>) -> Result<()> {
        let stream = stream.as_stream();
        same_device("a capture buffer is freed on a stream of its device", buffer.device(), stream.device())?;
        refuse_inside_host_fn()?;
        let allocation = &buffer.allocation;
        stream.outside_transitions(InCapture::Captured, || {
            self.refuse_outside(&stream)?;
            allocation.refuse_unusable(self.id())?;
            if allocation.unordered.load(Ordering::Relaxed) {
                return Err(Error::CaptureMisuse(
                    "a use of the capture buffer could not be ordered before a free: it is never freed",
                ));
            }
            for used in allocation.used.lock().unwrap_or_else(PoisonError::into_inner).iter() {
                stream.wait_raw(used.as_raw(), 0)?;
            }
            let _current = stream.enter_runtime()?;
            let _turn = graph_mutations();
            // SAFETY: this capture's own allocation (checked), not freed yet (checked, and
            // marked below, under the exclusive borrow), in the graph after every use of it
            // (the waits above; each use was ordered after the allocation).
            check(unsafe { sys::cudaFreeAsync(allocation.at(0), stream.as_raw()) }, "cudaFreeAsync")?;
            allocation.freed.store(true, Ordering::Relaxed);
            Ok(())
        })
    }

    /// Runs `f` with `len` elements of device memory that the graph owns: allocated on
    /// `stream` (the captured stream, or one that joined this capture) before the work `f`
    /// enqueues there, and freed after it, as the graph's own memory nodes
    /// ([`Capture::alloc`], then [`Capture::free`]). Every launch of an executable made from
    /// the graph allocates and frees it again, in the graph's order; nothing outside the graph
    /// can free it. Also freed when `f` panics.
    ///
    /// The address is valid only for work `f` enqueues on `stream` (or on streams it orders
    /// after that work and before the free); launching a kernel that uses it is `unsafe`, as
    /// every launch. For memory used on several streams, use [`Capture::alloc`], whose uses
    /// the free waits for.
    ///
    /// # Errors
    /// As [`Capture::alloc`] and [`Capture::free`] (a failed free in a capture that `f` broke:
    /// the graph is lost anyway).
    pub fn scratch<T: DeviceCopy, R>(
        &mut self,
        stream: impl AsStream,
        len: usize,
        f: impl FnOnce(&StreamRef, *mut T) -> R,
    ) -> Result<R> {
        let stream = stream.as_stream();
        let mut buffer = self.alloc::<T>(&*stream, len)?;
        let ran = catch_unwind(AssertUnwindSafe(|| f(&stream, buffer.allocation.at(0).cast())));
        let freed = self.free(&*stream, &mut buffer);
        match ran {
            Ok(result) => freed.map(|()| result),
            Err(payload) => resume_unwind(payload),
        }
    }
}
