//! Streams and device buffers exchanged with Python libraries (feature `python`, PyO3 with
//! the stable ABI, CPython 3.9 and later): PyTorch, CuPy, `cuda.core`, anything that speaks
//! `__cuda_stream__`, DLPack or the CUDA Array Interface. For PyO3 extensions written with
//! this crate: take the caller's stream and tensors, hand back buffers, and never race the
//! caller's work.
//!
//! | Direction | Call | Ordering |
//! |---|---|---|
//! | a Python stream in | [`PyStream::borrow`] (`__cuda_stream__`) | an [`AsStream`](crate::AsStream); the owner stays alive |
//! | our stream out | [`CudaStream`] (`__cuda_stream__`) | the stream stays alive while Python holds it |
//! | our buffer out, whole or as chunks | [`ExportedBuffer`] (`__dlpack__`, `__cuda_array_interface__`) | the consumer's stream waits for **every** stream with a pending use of the buffer (of the chunk) |
//! | a tensor in | [`import`] (`__dlpack__(stream=...)`) | the exporter orders its work before our stream; the tensor goes back once our uses completed |
//!
//! # The protocols, and how this module honours them
//! **DLPack** (`__dlpack__(stream=...)`, the array API's text): `None` and `1` mean the
//! legacy stream, `2` the per-thread stream, `-1` "do not synchronize", a larger integer a
//! stream handle, and `0` is refused (ambiguous). As producer ([`ExportedBuffer`]), the
//! consumer's stream is made to wait, through the buffer's use tracking, for every use of the
//! buffer (of the chunk, for a chunk's view) on every stream so far (events reused across
//! calls, none made per call in the steady state), and the consumer's stream is then one of
//! the buffer's users: the memory is freed after the consumer's work on it that was enqueued
//! before the capsule's deleter ran.
//! As consumer ([`import`]), our stream is passed so that the exporter orders its own work
//! before it (or, through DLPack's C exchange API, our stream waits for the producer's
//! `current_work_stream`); during a capture of our stream, `-1` is passed, and while the
//! producer's stream is being captured ours does not wait for it (a wait would join its
//! capture): nothing is synchronized then, as PyTorch's own producer does during a capture
//! (pytorch#163242); order the graph's launch after the exporter's work yourself. A buffer
//! of this module's own export is taken directly, ordered by its ledger, and refused during
//! a capture of our stream (as a buffer's uses are).
//!
//! **CUDA Array Interface v3** (`__cuda_array_interface__`): its `stream` is a stream the
//! consumer synchronizes with before using the data (`None` or absent would mean none at
//! all, the opposite of DLPack's `None`); the producer joins every stream with work on the
//! data into it. [`ExportedBuffer`], where the export offers the interface
//! ([`ExportedBuffer::with_array_interface`]), joins every use into the buffer's home stream
//! and exports that stream (kept alive by the buffer, as the interface requires).
//!
//! **`__cuda_stream__`** (`cuda.core`): `(0, handle)`; version 0 is the only one, and
//! [`PyStream::borrow`] refuses any other (one library shipped version 1 by mistake). It
//! carries no device (read through the stream's context) and no lifetime (the object is kept
//! alive).
//!
//! # PyTorch's deviations
//! - `Tensor.__dlpack__` defaults to `stream=-1`, not `None` (pytorch#163242): called with no
//!   stream, it synchronizes nothing. [`import`] always passes one.
//! - It raises `BufferError` for `stream=2` (the per-thread stream): for a PyTorch tensor,
//!   [`import`] on a per-thread stream passes `-1` and makes our stream wait for PyTorch's
//!   current stream itself, which is what PyTorch's producer would have done.
//! - It orders by PyTorch's current stream only (an event recorded there per call), not by
//!   the streams that wrote the tensor: work on a side stream that is not PyTorch's current
//!   stream when you import must be ordered by you (`torch.cuda.current_stream().wait_stream`)
//!   or done with that stream current.
//! - `torch.from_dlpack` maps a stream handle of 0 to `1`, and passes PyTorch's current stream;
//!   it raises unless the tensor's device is the current device, so [`import`] makes the
//!   stream's device current around the call.
//!
//! # The consumer's stream after the export, and what the protocols leave to their users
//! A DLPack consumer's deleter says it no longer uses the tensor, but its kernels may still
//! run on its stream (PyTorch calls it as soon as the tensor is garbage). So the deleter makes
//! the buffer's free wait for that stream's work so far, where the stream is sure to be alive
//! then: the legacy stream; the per-thread stream, on the thread that named it; PyTorch's own
//! current stream, or CuPy's current `cupy.cuda.Stream`, at the export (the capsule holds its
//! Python object: CuPy destroys a stream only with it, PyTorch never destroys its own). A
//! consumer's stream is never touched after the export otherwise: an external stream, a
//! `cuda.core` stream (its `close()` destroys it), a handle from C may be gone, and CUDA
//! crashes the process on a destroyed stream. For those, and for `stream=-1` (the consumer
//! orders its work itself), the buffer is never used or freed again once that deleter ran: it
//! leaks, rather than be reused under work nothing can wait for.
//! - The CUDA Array Interface keeps nothing alive and says nothing of when its consumer's work
//!   ends: a buffer whose interface was read is never freed (it leaks when dropped), which is
//!   why it is offered only on request (a `hasattr` probe reads it). Prefer DLPack
//!   (`cupy.from_dlpack` rather than `cupy.asarray`).
//! - With chunks, a leak is the whole allocation's, and every chunk then refuses exports.
//! - A stream handle handed to `__dlpack__` must be a live stream at that call (DLPack's own
//!   rule: a destroyed one is a crash in any producer).
//! - A per-thread stream (2) means the calling thread's: a consumer on another thread means
//!   another stream. A buffer whose home is a per-thread stream is not exported.
//! - An imported buffer's drop waits (on the host) for its last use before it hands the tensor
//!   back. Drop it with the interpreter released (`py.detach(|| drop(buffer))`) where that use
//!   may wait for Python code (a host function that takes the interpreter).
//!
//! Errors reach Python as `BufferError` for what a protocol refuses
//! ([`Error::Exchange`], and a device mismatch of an export or import) and `RuntimeError` for
//! CUDA's and this crate's other errors, with the same message.

mod dlpack;
mod export;
mod import;
mod streams;

pub use dlpack::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPACK_VERSION, DLPackExchangeAPI,
    DLPackExchangeAPIHeader, DLPackVersion, DLTensor, DlpackElement, FLAG_READ_ONLY, KDL_CUDA,
};
pub use export::ExportedBuffer;
pub use import::{import, import_with_dlpack};
pub use streams::{CudaStream, PyStream};

use crate::ffi::error::Error;
use pyo3::PyErr;
use pyo3::exceptions::{PyBufferError, PyRuntimeError};

impl From<Error> for PyErr {
    /// `BufferError` for [`Error::Exchange`], `RuntimeError` for the others, with the error's
    /// message.
    fn from(error: Error) -> PyErr {
        match error {
            Error::Exchange(_) => PyBufferError::new_err(error.to_string()),
            error => PyRuntimeError::new_err(error.to_string()),
        }
    }
}

/// A protocol's refusal, as Python sees it.
fn exchange_error(message: String) -> PyErr {
    Error::Exchange(message).into()
}

/// What Python may do with these values from any thread: the compiler checks it here (the
/// compile-fail programs of `tests/compile_fail_python/` check what it must refuse).
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<ExportedBuffer>();
    send_and_sync::<CudaStream>();
    send_and_sync::<PyStream>();
};
