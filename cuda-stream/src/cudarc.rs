//! Interoperation with [cudarc](https://docs.rs/cudarc) (feature `cudarc`), in both directions:
//!
//! * [`BorrowedStream::from_cudarc`] borrows cudarc's `CudaStream` for as long as it is
//!   borrowed, so that every function of this crate that takes a stream takes it.
//! * [`StreamRef::to_cudarc`] lends one of ours to cudarc code, with cudarc's own contract for
//!   borrowed streams (`CudaContext::wrap_borrowed_stream`).
//!
//! Both directions are `unsafe`, because cudarc's safe API can begin and end captures on the
//! stream (`CudaStream::begin_capture`, `end_capture`) from any thread, outside this crate's
//! sight: the conditions are [`BorrowedStream::borrow_raw`]'s. And both accept the devices'
//! primary contexts only (`CudaContext::new`), the ones the CUDA runtime (and so this crate)
//! uses: a context of `CudaContext::new_non_primary` is
//! [`Error::ForeignContext`](crate::Error::ForeignContext), because cudarc destroys it when its
//! last `Arc` drops, and this crate keeps no handle of a context it cannot keep alive. Your own
//! dependency on cudarc picks its CUDA version feature, as for any cudarc user.
//!
//! The feature needs Rust 1.88, cudarc's own minimum (cudarc 0.19 depends on libloading 0.9);
//! the crate without it needs 1.85.

// Layer 9 of docs/architecture.md, cudarc interop. May use: every layer below.

use crate::device::Device;
use crate::device::same_device;
use crate::ffi::driver::Context;
use crate::ffi::error::Result;
use crate::stream::{BorrowedStream, BuiltinStream, StreamRef};
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;

/// The device of a cudarc context, refused unless the context is that device's primary one.
fn primary_device_of(context: &CudaContext) -> Result<Device> {
    let device = Device::new(i32::try_from(context.ordinal()).unwrap_or(i32::MAX))?;
    device.require_primary(Context(context.cu_ctx().cast()))?;
    Ok(device)
}

impl<'a> BorrowedStream<'a> {
    /// Borrows cudarc's stream for as long as `stream` is borrowed. cudarc's default stream
    /// (handle 0, the driver API's legacy stream) is lent as [`BuiltinStream::legacy`] in both
    /// of this crate's builds, since handle 0 means the per-thread stream to a
    /// `per-thread-default-stream` build; its per-thread stream (0x2) as
    /// [`BuiltinStream::per_thread`].
    ///
    /// # Safety
    /// As for [`BorrowedStream::borrow_raw`]: no capture of the stream begins or ends (cudarc's
    /// `begin_capture`, `end_capture`) on another thread while a call of this crate on it (or,
    /// for an end, on another stream of that capture) runs.
    ///
    /// # Errors
    /// [`Error::ForeignContext`](crate::Error::ForeignContext) for a stream of a non-primary
    /// context (see the module docs); the errors of [`Device::new`].
    #[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
    pub unsafe fn from_cudarc(stream: &'a CudaStream) -> Result<BorrowedStream<'a>> {
        let device = primary_device_of(stream.context())?;
        let handle: crate::sys::cudaStream_t = stream.cu_stream().cast();
        if handle.is_null() {
            return Ok(BuiltinStream::legacy(device).into());
        }
        // SAFETY: the `CudaStream` keeps its handle alive while it is borrowed, and the handle
        // belongs to its context, the device's primary one (checked); the caller's contract.
        Ok(unsafe { BorrowedStream::borrow_unchecked(handle, device) })
    }
}

impl StreamRef {
    /// Lends this stream to cudarc code as a `CudaStream` of `context`
    /// ([`CudaContext::wrap_borrowed_stream`](https://docs.rs/cudarc/latest/cudarc/driver/safe/struct.CudaContext.html#method.wrap_borrowed_stream)):
    /// dropping it never destroys the stream. Handle 0 is passed as the stream it means in
    /// this build (`CU_STREAM_LEGACY` or `CU_STREAM_PER_THREAD`), since cudarc's handle 0 is
    /// the legacy stream.
    ///
    /// # Safety
    /// cudarc's contract for borrowed streams: the returned `CudaStream`, and everything cudarc
    /// makes that retains it (its slices, events, forks), must not be used after this stream
    /// is destroyed, and you order work submitted through cudarc with work submitted here. A
    /// per-thread stream must stay on this thread. And, because cudarc's safe API may capture
    /// it: no capture of the stream begins or ends through cudarc on another thread while a
    /// call of this crate on it (or, for an end, on another stream of that capture) runs, and
    /// a capture begun through cudarc is ended through
    /// cudarc (for a pool's lease, before the lease drops). Not called inside a raw launcher's
    /// closure, as for [`BorrowedStream::borrow_raw`].
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) if `context` is another
    /// device's; [`Error::ForeignContext`](crate::Error::ForeignContext) if it is not the
    /// device's primary context.
    #[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
    pub unsafe fn to_cudarc(&self, context: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        let theirs = primary_device_of(context)?;
        same_device("a stream is lent to cudarc with its own device's context", self.device(), theirs)?;
        // cudarc code may now capture it, outside this crate's sight.
        crate::call::uncaptured_calls::foreign_handle_seen();
        // SAFETY: the handle belongs to `context`'s device and its primary context (checked);
        // the caller keeps it alive and ordered (this function's contract).
        Ok(unsafe { context.wrap_borrowed_stream(self.unambiguous_raw().cast()) })
    }
}
