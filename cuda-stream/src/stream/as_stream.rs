//! [`AsStream`]: anything that is a stream, the way [`AsFd`](std::os::fd::AsFd) is anything
//! that is a file descriptor (and Python's `__cuda_stream__` protocol is anything that has a
//! CUDA stream). Every function of this crate that takes a stream takes an `impl AsStream`.

use crate::stream::{BorrowedStream, BuiltinStream, Stream, StreamRef};
use std::rc::Rc;
use std::sync::Arc;

/// A value that is, holds or lends a CUDA stream.
///
/// [`as_stream`](AsStream::as_stream) lends it as a [`BorrowedStream`] for as long as `self` is
/// borrowed, exactly as [`AsFd::as_fd`](std::os::fd::AsFd::as_fd) lends a `BorrowedFd`: the
/// stream cannot be destroyed while the loan lasts. Implemented for this crate's streams and
/// pool leases, for references, `Box`, `Rc` and `Arc` of any of them, and (feature `cudarc`)
/// for cudarc's `CudaStream`. Implement it for your own type that holds a stream:
///
/// ```
/// use cuda_stream::{AsStream, BorrowedStream, Stream};
///
/// struct Worker {
///     stream: Stream,
/// }
///
/// impl AsStream for Worker {
///     fn as_stream(&self) -> BorrowedStream<'_> {
///         self.stream.as_stream()
///     }
/// }
/// ```
pub trait AsStream {
    /// Lends the stream for as long as `self` is borrowed.
    fn as_stream(&self) -> BorrowedStream<'_>;
}

impl AsStream for StreamRef {
    #[inline(always)]
    fn as_stream(&self) -> BorrowedStream<'_> {
        BorrowedStream::of(self)
    }
}

/// Each of these derefs to the [`StreamRef`] it lends.
macro_rules! as_stream_by_deref {
    ($($ty:ty),*) => {$(
        impl AsStream for $ty {
            #[inline(always)]
            fn as_stream(&self) -> BorrowedStream<'_> {
                BorrowedStream::of(self)
            }
        }
    )*};
}

as_stream_by_deref!(Stream, BorrowedStream<'_>, BuiltinStream, crate::StreamLease<'_>);

/// Each of these points to a stream that lives at least as long as it.
macro_rules! as_stream_by_pointer {
    ($($ty:ty),*) => {$(
        impl<T: AsStream + ?Sized> AsStream for $ty {
            #[inline(always)]
            fn as_stream(&self) -> BorrowedStream<'_> {
                (**self).as_stream()
            }
        }
    )*};
}

as_stream_by_pointer!(&T, &mut T, Box<T>, Rc<T>, Arc<T>);
