//! Host memory the program already has, page-locked for a while
//! ([`cudaHostRegister`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)):
//! [`register_host`] lends a `&mut [T]` to CUDA for the duration of a closure, where copies
//! between it and device buffers run asynchronously, as a [`PinnedBuffer`](super::PinnedBuffer)'s
//! do; at the end it waits for those copies and unregisters the memory
//! (`cudaHostUnregister`) before the slice is the caller's again.

use super::DeviceCopy;
use super::page_locked::{PageLocked, PageLockedMemory, PinnedSliceMut, host_memory_call, page_locked_holder, sealed};
use crate::call::sync_debug;
use crate::ffi::error::{Error, Result};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A slice of the program's own memory, page-locked while [`register_host`]'s closure runs.
/// Copies to and from device buffers take it as they take a [`PinnedBuffer`](super::PinnedBuffer)
/// (`copy_from_pinned`, `copy_to_pinned`, and the views' copies), and it waits for them as a
/// pinned buffer does. It exists only inside the closure (`'scope` is the closure's own), so the
/// memory is never used after it is unregistered and handed back.
pub struct RegisteredSlice<'scope, T: DeviceCopy> {
    memory: PageLocked<T>,
    /// Invariant in `'scope`: two registrations' slices cannot be swapped.
    _scope: PhantomData<fn(&'scope ()) -> &'scope ()>,
}

page_locked_holder!(RegisteredSlice<'_, T>, "RegisteredSlice");

/// Page-locks `memory` (`cudaHostRegister`, portable to every device) and runs `body` with it
/// as a [`RegisteredSlice`], whose copies to and from device buffers are asynchronous; then
/// waits for the copies still in flight and unregisters it (`cudaHostUnregister`), also when
/// `body` panics. The registration costs what CUDA's costs (page-locking is slow, proportional
/// to the size): register large, long-lived buffers, not one per copy.
///
/// ```no_run
/// # use cuda_stream::{Device, DeviceBuffer, Stream, StreamOptions, register_host};
/// # fn main() -> cuda_stream::Result<()> {
/// let stream = Stream::new(Device::new(0)?, StreamOptions::non_blocking())?;
/// let mut data = vec![1.0f32; 1 << 20];
/// let mut buffer = DeviceBuffer::<f32, _>::new(&stream, data.len())?;
/// register_host(&mut data, |registered| {
///     buffer.copy_from_pinned(&stream, registered) // asynchronous
/// })??; // the copy has completed here, and `data` is unregistered
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Size`] for an empty slice; CUDA's errors registering it
/// (`cudaErrorHostMemoryAlreadyRegistered` for memory already page-locked, a
/// [`PinnedBuffer`](super::PinnedBuffer)'s too), before `body` runs; an error unregistering it
/// after `body` ran (the memory is still the caller's: the copies have completed).
///
/// # Aborts
/// If the copies in flight cannot be waited for at the end (the device faulted and CUDA
/// refuses every wait), the process aborts: returning would hand back memory a copy may still
/// read or write.
pub fn register_host<T: DeviceCopy, R>(
    memory: &mut [T],
    body: impl for<'scope> FnOnce(&mut RegisteredSlice<'scope, T>) -> R,
) -> Result<R> {
    if memory.is_empty() || size_of::<T>() == 0 {
        return Err(Error::Size("an empty slice cannot be registered"));
    }
    refuse_inside_host_fn()?;
    let bytes = size_of_val(memory);
    let ptr = NonNull::from(&mut *memory).cast::<T>();
    // SAFETY: `bytes` bytes of memory the caller lends for this call, which outlives the
    // registration (unregistered below before returning, also on a panic).
    host_memory_call("cudaHostRegister", || unsafe {
        sys::cudaHostRegister(ptr.as_ptr().cast(), bytes, sys::cudaHostRegisterPortable)
    })?;
    let slice = RegisteredSlice { memory: PageLocked::new(ptr, memory.len(), "RegisteredSlice"), _scope: PhantomData };
    let mut registration = Registration { slice, ended: false };
    let result = body(&mut registration.slice);
    registration.end().map(|()| result)
}

/// A registration in progress: ended (waited for and unregistered) by [`Registration::end`],
/// or, if `body` panics, by its drop.
struct Registration<'scope, T: DeviceCopy> {
    slice: RegisteredSlice<'scope, T>,
    /// Waited for and unregistered (by `end`): the drop has nothing left to do.
    ended: bool,
}

impl<T: DeviceCopy> Registration<'_, T> {
    fn end(mut self) -> Result<()> {
        self.ended = true;
        self.wait_and_unregister()
    }

    /// Waits for the copies in flight (aborting if that cannot be done), then unregisters.
    fn wait_and_unregister(&mut self) -> Result<()> {
        let memory = &mut self.slice.memory;
        let waited = !memory.leaked()
            && (sync_debug::reporting_only(|| memory.settle()).is_ok() || memory.settle_relaxed().is_ok());
        if !waited {
            eprintln!("cuda-stream: the copies of a registered slice cannot be waited for; aborting");
            std::process::abort();
        }
        let address = memory.as_mut_ptr();
        // SAFETY: memory registered by `register_host`; no copy uses it any more.
        host_memory_call("cudaHostUnregister", || unsafe { sys::cudaHostUnregister(address.cast()) })
    }
}

impl<T: DeviceCopy> Drop for Registration<'_, T> {
    /// On a panic of `body`: the copies are waited for and the memory unregistered before the
    /// unwinding hands the slice back.
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.wait_and_unregister();
        }
    }
}
