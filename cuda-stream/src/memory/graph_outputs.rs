//! Graph memory that outlives a launch ([`Capture::keep`]): a capture buffer the graph allocates
//! and never frees, handed after each launch to the program as a [`DeviceBuffer`]
//! ([`GraphOutput::take`]), which frees it where any buffer is freed (`cudaFreeAsync` on its
//! home stream: CUDA's graph allocations that are freed outside the graph).
//!
//! CUDA's rules, and how each is kept:
//! * The allocation of a launch stays allocated until something frees it; a launch of the
//!   executable while it is allocated fails (`cudaErrorInvalidValue`), unless the executable was
//!   instantiated with [`auto_free_on_launch`](crate::InstantiateOptions::auto_free_on_launch),
//!   whose next launch frees it. Each output's state says which of these holds: a launch is
//!   refused ([`Error::GraphMisuse`]) while the last one's output was not taken, or its buffer is
//!   alive, or its buffer leaked the memory instead of freeing it; an auto-free executable's
//!   outputs are never taken (its next launch would free them under the buffer).
//! * The free must come before the next launch, in the GPU's order: the buffer's drop records
//!   an event right after its free, on the stream it freed on, under the same hold, and the
//!   next launch waits for it. A launch that frees an untaken output (auto-free) waits for the
//!   launch that made it, whichever executable made it.
//! * The address is the same at every launch; one executable of the graph exists at a time
//!   (checked here, as CUDA does): the state is the graph's, which its executables share.
//! * An output is read without being taken ([`GraphOutput::copy_to_slice`], the way to read an
//!   auto-free executable's): the read borrows the executable, so no launch of it frees or
//!   rewrites the output meanwhile (`GraphExec` is not `Sync`), and the output itself mutably,
//!   so no take frees it under the copy. It waits on the host for the launch that made it,
//!   holding only the output's state, then copies under the enqueue path's hold.

use super::buffer::{DeviceBuffer, copy_async};
use super::capture_buffer::CaptureBuffer;
use super::graph_nodes::HeldMemory;
use super::output_slot::{OutputSlot, OutputState};
use super::{DeviceCopy, same_length, wait_for_blocking_copy};
use crate::call::capture_mode::other_threads_captures_ignored;
use crate::call::live_captures;
use crate::call::sync_debug::{self, SyncKind};
use crate::device::{Device, same_device};
use crate::event::Event;
use crate::ffi::error::{Error, Result};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::graph::GraphExec;
use crate::graph::capture::{Capture, CaptureMode};
use crate::stream::AsStream;
use crate::stream::enqueue::InCapture;
use crate::sys;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

/// A graph allocation that outlives each launch of the graph ([`Capture::keep`]): after a
/// launch, [`GraphOutput::take`] hands it over as a [`DeviceBuffer`]. Dropping the
/// `GraphOutput` frees nothing: an allocation a launch made and nobody took stays allocated
/// until an auto-free launch frees it (or the process exits).
pub struct GraphOutput<T: DeviceCopy> {
    slot: Arc<OutputSlot>,
    address: NonNull<T>,
    len: usize,
    device: Device,
    _element: PhantomData<fn() -> T>,
}

// SAFETY: the address is a device address, never dereferenced on the host; the state is
// behind a mutex.
unsafe impl<T: DeviceCopy> Send for GraphOutput<T> {}
// SAFETY: as above; `&self` methods lock the state.
unsafe impl<T: DeviceCopy> Sync for GraphOutput<T> {}

impl<T: DeviceCopy> std::fmt::Debug for GraphOutput<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphOutput")
            .field("address", &self.address)
            .field("len", &self.len)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl<M: CaptureMode> Capture<'_, M> {
    /// Keeps `buffer` allocated at the end of each launch of an executable made from the graph:
    /// CUDA's graph memory that is freed outside the graph. After a launch,
    /// [`GraphOutput::take`] hands it over as a [`DeviceBuffer`], whose drop frees it; the next
    /// launch waits for that free, and is refused until it has been made (see
    /// [`GraphOutput`]). Its uses in the capture are all part of the graph, which a launch
    /// completes.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a buffer of another capture, or one freed.
    pub fn keep<T: DeviceCopy>(&mut self, buffer: CaptureBuffer<T>) -> Result<GraphOutput<T>> {
        buffer.allocation().refuse_unusable(self.id())?;
        let address = NonNull::new(buffer.allocation().at(0).cast::<T>()).ok_or(Error::Size("no address"))?;
        let slot = Arc::new(OutputSlot::new());
        let mut memory = HeldMemory::default();
        memory.keep_output(Arc::clone(&slot));
        memory.add_to(self.holds())?;
        Ok(GraphOutput { slot, address, len: buffer.len(), device: buffer.device(), _element: PhantomData })
    }
}

impl<T: DeviceCopy> GraphOutput<T> {
    /// Its length in elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The last launch's allocation, as a buffer whose home is `home` (a stream of the graph's
    /// device): `home` waits for that launch, and the buffer frees the memory when dropped
    /// (`cudaFreeAsync` there), after its uses, as any buffer. Until then, no launch of the
    /// graph is made.
    ///
    /// # Errors
    /// [`Error::GraphMisuse`] before a launch, after a take of the same launch, and while the
    /// graph's last executable was instantiated with `auto_free_on_launch` (its next launch
    /// frees the output, which a buffer would outlive; the flag of the last instantiation
    /// counts, even once that executable is dropped); [`Error::DeviceMismatch`];
    /// [`Error::CaptureMisuse`] while `home` is being captured; [`Error::InsideHostFn`];
    /// CUDA's errors (the output is then not taken).
    pub fn take<S: AsStream>(&self, home: S) -> Result<DeviceBuffer<T, S>> {
        // Before the lock, which a launch holds while it enqueues.
        refuse_inside_host_fn()?;
        let stream = home.as_stream();
        same_device("a graph's output is taken on a stream of its device", self.device, stream.device())?;
        // Taken under the lock, before the wait: no launch and no other take meanwhile.
        let launched = {
            let mut state = self.slot.lock();
            if self.slot.auto_free() {
                return Err(Error::GraphMisuse(
                    "an auto-free executable's output is freed by its next launch: it is not taken",
                ));
            }
            match std::mem::replace(&mut *state, OutputState::Taken) {
                OutputState::Launched(launched) => launched,
                other => {
                    *state = other;
                    return Err(Error::GraphMisuse(
                        "no launch left an output to take (none yet, it was taken, or a launch failed after CUDA took it)",
                    ));
                }
            }
        };
        let waited = stream
            .outside_transitions(InCapture::Refused("a graph's output is not taken on a capturing stream"), || {
                stream.wait_raw(launched.as_raw(), 0)
            });
        if let Err(error) = waited {
            *self.slot.lock() = OutputState::Launched(launched);
            return Err(error);
        }
        drop((stream, launched));
        Ok(DeviceBuffer::adopt(home, self.address, self.len, Arc::clone(&self.slot)))
    }
}

impl<T: DeviceCopy> GraphOutput<T> {
    /// Copies the last launch's output into `destination` on `stream` (a stream of the graph's
    /// device), after that launch, and returns once the copy has completed (a Rust slice is
    /// pageable memory, as for [`DeviceBuffer::copy_to_slice`]). This reads an output without
    /// taking it: the way to read what each launch of an auto-free executable left (its next
    /// launch frees the output, so it is never taken), and any output between launches.
    /// `exec` is the executable whose launches allocate it, borrowed for the read: no launch of
    /// it frees or rewrites the output meanwhile (`GraphExec` is not `Sync`; a graph with
    /// outputs has one executable at a time); the output is borrowed mutably, so no
    /// [`take`](GraphOutput::take) frees it under the copy. The host first waits for that
    /// launch, holding nothing of this crate's but the output's state, then the copy is made.
    ///
    /// # Errors
    /// [`Error::Size`] unless `destination` has the output's length; [`Error::GraphMisuse`]
    /// for an executable that does not launch this output, before a launch, once the output
    /// was taken, and after a launch that failed; [`Error::DeviceMismatch`];
    /// [`Error::CaptureMisuse`] while `stream` is being captured, and where a capture of this
    /// crate forbids waiting ([the rules](crate::capture#calls-refused-during-a-capture));
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn copy_to_slice(&mut self, exec: &GraphExec, stream: impl AsStream, destination: &mut [T]) -> Result<()> {
        same_length(destination.len(), self.len)?;
        self.read_into(exec, stream, destination.as_mut_ptr().cast())
    }

    /// The last launch's output, copied on `stream` after that launch (blocking; see
    /// [`GraphOutput::copy_to_slice`]).
    ///
    /// # Errors
    /// As [`GraphOutput::copy_to_slice`].
    pub fn to_vec(&mut self, exec: &GraphExec, stream: impl AsStream) -> Result<Vec<T>> {
        let mut values = Vec::<T>::with_capacity(self.len);
        self.read_into(exec, stream, values.as_mut_ptr().cast())?;
        // SAFETY: the read completed and wrote all `len` elements; any bytes are a valid `T`
        // (`DeviceCopy`).
        unsafe { values.set_len(self.len) };
        Ok(values)
    }

    /// The last launch's output copied to `to` (host memory of the output's size that stays
    /// valid for the call), returning once the copy has completed: see
    /// [`GraphOutput::copy_to_slice`]. Nothing changes the output's state meanwhile: no launch
    /// (`exec` is borrowed, the only executable of the graph), no take (`&mut self`), and no
    /// taken buffer exists while a launch's output is untaken.
    fn read_into(&mut self, exec: &GraphExec, stream: impl AsStream, to: *mut c_void) -> Result<()> {
        refuse_inside_host_fn()?;
        let stream = stream.as_stream();
        same_device("a graph's output is read on a stream of its device", self.device, stream.device())?;
        if !HeldMemory::held_by(exec, &self.slot) {
            return Err(Error::GraphMisuse("a graph's output is read with the executable whose launches allocate it"));
        }
        if live_captures::any() {
            // This thread's own capture would be invalidated by the waits below.
            live_captures::refuse_unsafe_call()?;
        }
        sync_debug::before_sync("cudaMemcpyAsync (pageable host memory)", SyncKind::PageableCopy)?;
        {
            let state = self.slot.lock();
            let OutputState::Launched(launched) = &*state else {
                return Err(Error::GraphMisuse(
                    "no launch left an output to read (none yet, it was taken, or a launch failed after CUDA took it)",
                ));
            };
            // The launch's own event, recorded after it outside any capture. Waited for on the
            // host, with no hold of the enqueue path: another thread's capture begin, or a
            // signal the launch waits for, is not held up behind this wait. In CUDA where
            // other threads' captures cannot forbid it (the thread's mode settled: another
            // library's Global capture must not be invalidated); else (this thread chose
            // Global itself) by the event's own polls, which a capture's begin waits for.
            if other_threads_captures_ignored() {
                launched.synchronize_checked_earlier()?;
            } else {
                launched.synchronize()?;
            }
        }
        let done = Event::internal(self.device)?;
        let (from, bytes) = (self.address.as_ptr().cast::<c_void>().cast_const(), self.len * size_of::<T>());
        let (mut enqueued, mut recorded) = (false, false);
        let copied = stream.outside_transitions(
            InCapture::Refused("a graph's output is not read on a capturing stream"),
            || {
                if live_captures::any() {
                    // Again under the hold: a capture of this crate begun since the first check
                    // would be invalidated by the wait for the copy.
                    live_captures::refuse_unsafe_call()?;
                }
                copy_async(&stream, to, from, bytes, sys::cudaMemcpyKind::cudaMemcpyDeviceToHost)?;
                enqueued = true;
                // On a stream checked not capturing, under the hold: a plain record.
                stream.record_raw(done.as_raw(), 0)?;
                recorded = true;
                Ok(())
            },
        );
        // The copy is waited for before `to` goes back.
        match wait_for_blocking_copy(&stream, &done, enqueued, recorded) {
            Some(waited) => copied.and(waited),
            None => copied,
        }
    }
}
