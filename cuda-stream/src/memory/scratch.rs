//! Graph-owned device memory: [`Capture::scratch`] allocates inside a capture and frees there,
//! so the allocation and the free are the graph's own memory nodes.

use super::{DeviceCopy, byte_size};
use crate::call::transitions::no_capture_transitions;
use crate::device::keep_alive::graph_mutations;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::graph::capture::{Capture, CaptureMode, CaptureStatus};
use crate::stream::capture_status::capture_state;
use crate::stream::{AsStream, StreamRef};
use crate::sys;
use std::ffi::c_void;

impl<M: CaptureMode> Capture<'_, M> {
    /// Runs `f` with `len` elements of device memory that the graph owns: allocated on
    /// `stream` (the captured stream, or one that joined this capture) before the work `f`
    /// enqueues there, and freed after it, as the graph's own memory nodes
    /// ([graph memory nodes](https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/cuda-graphs.html):
    /// `cudaMallocAsync` and `cudaFreeAsync` during capture). Every launch of an executable
    /// made from the graph allocates and frees it again, in the graph's order; nothing outside
    /// the graph can free it. Also freed when `f` panics.
    ///
    /// The address is valid only for work `f` enqueues on `stream` (or on streams it orders
    /// after that work and before the free); launching a kernel that uses it is `unsafe`, as
    /// every launch.
    ///
    /// # Errors
    /// [`Error::Size`] for zero elements or an overflowing byte size;
    /// [`Error::CaptureMisuse`] for a stream that is not part of this capture; CUDA's errors
    /// (a failed free in a capture that `f` broke: the graph is lost anyway).
    pub fn scratch<T: DeviceCopy, R>(
        &mut self,
        stream: impl AsStream,
        len: usize,
        f: impl FnOnce(&StreamRef, *mut T) -> R,
    ) -> Result<R> {
        const { assert!(align_of::<T>() <= 256, "CUDA's allocations are aligned to 256 bytes") };
        let bytes = byte_size::<T>(len)?;
        let stream = stream.as_stream();
        // The check and the allocation hold the read side of the capture-transition lock: no
        // node is added by hand to the capture's graph in between (it would take the stream's
        // capture dependencies past the allocation).
        refuse_inside_host_fn()?;
        let address = {
            let _transitions = no_capture_transitions();
            let state = capture_state(&stream)?;
            if state.info.status != CaptureStatus::Active || state.info.id != self.id() {
                return Err(Error::CaptureMisuse("graph scratch memory is allocated on a stream of this capture"));
            }
            // The stream stays in this capture until `end`, which needs `self`.
            let _current = stream.enter_runtime()?;
            // Not beside another thread's work on the same graph.
            let _turn = graph_mutations();
            let mut address: *mut c_void = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; a stream of an active capture (the allocation is
            // the graph's node); bytes > 0.
            check(unsafe { sys::cudaMallocAsync(&mut address, bytes, stream.as_raw()) }, "cudaMallocAsync")?;
            address
        };
        let free = FreeInCapture { stream: &stream, address, done: false };
        let result = f(&stream, address.cast());
        free.finish()?;
        Ok(result)
    }
}

/// The graph's free node for scratch memory: at `finish`, or when dropped during a panic.
struct FreeInCapture<'a> {
    stream: &'a StreamRef,
    address: *mut c_void,
    done: bool,
}

impl FreeInCapture<'_> {
    fn finish(mut self) -> Result<()> {
        self.done = true;
        self.free()
    }

    fn free(&self) -> Result<()> {
        // Under the read side, as the allocation.
        refuse_inside_host_fn()?;
        let _transitions = no_capture_transitions();
        let _current = self.stream.enter_runtime()?;
        let _turn = graph_mutations();
        // SAFETY: the graph's own allocation of this capture, freed once, after the work that
        // was enqueued on its stream.
        check(unsafe { sys::cudaFreeAsync(self.address, self.stream.as_raw()) }, "cudaFreeAsync")
    }
}

impl Drop for FreeInCapture<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.free();
        }
    }
}
