//! Interoperation with [cudarc](https://docs.rs/cudarc) (feature `cudarc`), in both directions:
//!
//! * cudarc's `CudaStream` is an [`AsStream`]: every function of this crate that takes a stream
//!   takes one, borrowed for as long as the `CudaStream` is.
//! * [`StreamRef::to_cudarc`] lends one of ours to cudarc code, with cudarc's own contract for
//!   borrowed streams (`CudaContext::wrap_borrowed_stream`).
//!
//! cudarc's contexts are the devices' primary contexts, the ones the CUDA runtime (and so this
//! crate) uses. Your own dependency on cudarc picks its CUDA version feature, as for any cudarc
//! user.

use crate::as_stream::AsStream;
use crate::device::Device;
use crate::error::{Result, same_device};
use crate::stream::{BorrowedStream, BuiltinStream, StreamRef};
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;

impl AsStream for CudaStream {
    /// cudarc's stream on the device of its context. cudarc's default stream (handle 0, the
    /// driver API's legacy stream) is lent as [`BuiltinStream::legacy`] in both of this crate's
    /// builds, since handle 0 means the per-thread stream to a `per-thread-default-stream`
    /// build; its per-thread stream (0x2) as [`BuiltinStream::per_thread`].
    fn as_stream(&self) -> BorrowedStream<'_> {
        let device = Device::from_ordinal(self.context().ordinal() as i32);
        let handle: crate::sys::cudaStream_t = self.cu_stream().cast();
        if handle.is_null() {
            return BuiltinStream::legacy(device).into();
        }
        // SAFETY: the `CudaStream` keeps its handle alive while it is borrowed, and the handle
        // belongs to its context's device (cudarc's contract for every `CudaStream`).
        unsafe { BorrowedStream::borrow_unchecked(handle, device) }
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
    /// per-thread stream must stay on this thread.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) if `context` is another
    /// device's.
    pub unsafe fn to_cudarc(&self, context: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        let theirs = Device::from_ordinal(context.ordinal() as i32);
        same_device("a stream is lent to cudarc with its own device's context", self.device(), theirs)?;
        // SAFETY: the handle belongs to `context`'s device (checked) and its primary context;
        // the caller keeps it alive and ordered (this function's contract).
        Ok(unsafe { context.wrap_borrowed_stream(self.unambiguous_raw().cast()) })
    }
}
