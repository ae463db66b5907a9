//! Streams across the boundary: a Python object with `__cuda_stream__` borrowed as an
//! [`AsStream`] ([`PyStream`]), and this crate's streams handed to Python with
//! `__cuda_stream__` ([`CudaStream`]).

use super::exchange_error;
use crate::call::uncaptured_calls::foreign_handle_seen;
use crate::device::Device;
use crate::stream::{AsStream, BorrowedStream, Builtin, Ownership, StreamRef};
use crate::sys;
use pyo3::prelude::*;
use std::fmt;
use std::sync::Arc;

/// A stream another Python library owns (a `torch.cuda.Stream`, a CuPy or `cuda.core`
/// stream, any object with `__cuda_stream__`), borrowed for as long as this value lives: it
/// keeps the Python object alive. Every function of this crate that takes a stream takes it.
///
/// The handle's meaning: the protocol's version 0 is `(0, handle)`. Handle 0 is the
/// exporting library's null stream, which PyTorch and CuPy (built without per-thread default
/// streams) mean as the legacy stream: it is borrowed as
/// [`BuiltinStream::legacy`](crate::BuiltinStream::legacy) in both of this crate's builds.
/// Handles 1 and 2 (`cudaStreamLegacy`, `cudaStreamPerThread`) are the built-in streams
/// they name (the per-thread one is the calling thread's). Any other handle's device is read
/// through its context, as [`BorrowedStream::borrow_raw`] reads it.
///
/// A borrow for the length of a call: a buffer whose home is a `PyStream` is freed on that
/// stream, which Python code may destroy (`cuda.core`'s `close()`) once the call returned.
/// Allocate what outlives the call on a stream of yours ([`CudaStream::shared`], an
/// `Arc<Stream>`) and order it with the borrowed one (`use_on`, `wait_stream`).
pub struct PyStream {
    /// The stream's owner on the Python side, alive while the borrow lasts.
    owner: Py<PyAny>,
    stream: BorrowedStream<'static>,
}

impl PyStream {
    /// Borrows the stream of `object`'s `__cuda_stream__()`.
    ///
    /// # Safety
    /// As [`BorrowedStream::borrow_raw`]: the handle is a live stream for as long as the
    /// `PyStream` is (true of PyTorch's own streams and of a CuPy `Stream`, which their objects
    /// keep; a `cuda.core` stream is destroyed by its `close()`, and an external stream wrapper,
    /// such as `torch.cuda.ExternalStream`, leaves it to you); no capture of it begins or ends
    /// on another thread (`torch.cuda.graph`) while a call of this crate on it runs; the device
    /// is not reset.
    ///
    /// # Errors
    /// `BufferError` ([`Error::Exchange`](crate::Error::Exchange)) for a version other than 0 or
    /// a handle that is not an integer; the errors of [`BorrowedStream::borrow_raw`]; the
    /// Python exception of a missing or failing `__cuda_stream__`.
    pub unsafe fn borrow(object: &Bound<'_, PyAny>) -> PyResult<PyStream> {
        let (version, handle) = cuda_stream_of(object)?;
        if version != 0 {
            return Err(exchange_error(format!(
                "__cuda_stream__ returned version {version}: version 0 is the only version of the protocol"
            )));
        }
        let handle = match handle {
            // The exporter's null stream: the legacy stream (see the type's docs).
            0 => sys::cudaStreamLegacy,
            handle => handle as sys::cudaStream_t,
        };
        // The interpreter is released: the first foreign handle of the process waits for other
        // threads' calls of this crate, one of which may wait for Python.
        let address = handle as usize;
        let stream = object.py().detach(|| {
            // SAFETY: the caller's contract; the owner is kept alive below for the borrow.
            unsafe { BorrowedStream::borrow_raw(address as sys::cudaStream_t) }
        })?;
        Ok(PyStream { owner: object.clone().unbind(), stream })
    }

    /// The Python object whose stream this is.
    pub fn owner(&self) -> &Py<PyAny> {
        &self.owner
    }
}

/// `object.__cuda_stream__()` as (version, handle).
fn cuda_stream_of(object: &Bound<'_, PyAny>) -> PyResult<(i64, usize)> {
    let answer = object.call_method0(pyo3::intern!(object.py(), "__cuda_stream__"))?;
    answer.extract::<(i64, usize)>().map_err(|_| {
        exchange_error(format!("__cuda_stream__ must return (version, handle) as two integers, not {answer}"))
    })
}

impl AsStream for PyStream {
    fn as_stream(&self) -> BorrowedStream<'_> {
        self.stream.as_stream()
    }
}

impl fmt::Debug for PyStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PyStream").field("stream", &self.stream).finish_non_exhaustive()
    }
}

/// One of this crate's streams handed to Python: it has `__cuda_stream__`, so PyTorch
/// (`torch.cuda.ExternalStream`), CuPy (`cupy.cuda.Stream.from_external`) and `cuda.core`
/// (`Device.create_stream(obj)`) take it, and it keeps the stream alive while Python holds
/// it (an [`AsStream`] moved in: an `Arc<Stream>`, a pool lease, a built-in stream).
#[pyclass(frozen, name = "CudaStream", module = "cuda_stream")]
pub struct CudaStream {
    stream: Arc<dyn AsStream + Send + Sync>,
}

impl CudaStream {
    /// Hands `stream` to Python. Python code may then capture it (a PyTorch or CuPy
    /// `ExternalStream` of its handle): from now on, the calls whose meaning changes during a
    /// capture read the stream's capture status first, as for a borrowed stream.
    ///
    /// # Safety
    /// As the capture clause of `StreamRef::to_cudarc` (feature `cudarc`): no capture of the
    /// stream that Python code begins or ends (`torch.cuda.graph`, `Stream.begin_capture`)
    /// runs on another thread while a call of this crate on it runs (or, for an end, on another
    /// stream of that capture), and a capture Python begins, Python ends. Not called inside a
    /// raw launcher's closure ([`StreamRef::launch`](crate::StreamRef::launch)), as for
    /// [`BorrowedStream::borrow_raw`]. Its first call in the process waits for other threads'
    /// calls of this crate in progress: make it with the interpreter released where one of them
    /// may wait for Python (a host function that takes the interpreter).
    pub unsafe fn new(stream: impl AsStream + Send + Sync + 'static) -> CudaStream {
        foreign_handle_seen();
        CudaStream { stream: Arc::new(stream) }
    }

    /// The stream, shared: a home for buffers that keeps it alive as long as they need it,
    /// whatever Python does with this object.
    pub fn shared(&self) -> Arc<dyn AsStream + Send + Sync> {
        Arc::clone(&self.stream)
    }
}

impl AsStream for CudaStream {
    fn as_stream(&self) -> BorrowedStream<'_> {
        self.stream.as_stream()
    }
}

#[pymethods]
impl CudaStream {
    /// `(0, handle)`. A built-in stream is named by CUDA's own special handle, never 0 (whose
    /// meaning depends on how the consumer was built): 1 for the legacy stream, 2 for the
    /// per-thread one.
    fn __cuda_stream__(&self) -> (u32, usize) {
        (0, protocol_handle(&self.stream.as_stream()))
    }

    /// The device's ordinal.
    #[getter]
    fn device(&self) -> i32 {
        self.stream.as_stream().device().ordinal()
    }

    fn __repr__(&self) -> String {
        let stream = self.stream.as_stream();
        format!("<cuda_stream.CudaStream {:#x} of device {}>", protocol_handle(&stream), stream.device().ordinal())
    }
}

impl fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaStream").field("stream", &*self.stream.as_stream()).finish()
    }
}

/// A stream's handle as the exchange protocols spell it: 1 (legacy) or 2 (per-thread) for a
/// built-in stream, the handle itself otherwise; never 0.
pub(super) fn protocol_handle(stream: &StreamRef) -> usize {
    match stream.ownership() {
        Ownership::Builtin(Builtin::Legacy) => sys::LEGACY_STREAM_HANDLE,
        Ownership::Builtin(Builtin::PerThread) => sys::PER_THREAD_STREAM_HANDLE,
        Ownership::Builtin(Builtin::Null) if crate::NULL_STREAM_IS_PER_THREAD => sys::PER_THREAD_STREAM_HANDLE,
        Ownership::Builtin(Builtin::Null) => sys::LEGACY_STREAM_HANDLE,
        Ownership::Owned | Ownership::Borrowed => stream.as_raw() as usize,
    }
}

/// A Python library whose current stream this module reads: the producers and consumers that
/// have one (`cuda.core` has none).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Library {
    Torch,
    Cupy,
}

impl Library {
    /// The library's module, if the program loaded it (never imported here).
    fn loaded<'py>(self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let name = match self {
            Library::Torch => "torch",
            Library::Cupy => "cupy",
        };
        py.import("sys").and_then(|sys| sys.getattr("modules")).and_then(|modules| modules.get_item(name)).ok()
    }

    /// The library whose array `object` is (a `torch.Tensor`, a `cupy.ndarray`, or a subclass).
    pub(super) fn of_array(object: &Bound<'_, PyAny>) -> Option<Library> {
        [(Library::Torch, "Tensor"), (Library::Cupy, "ndarray")].into_iter().find_map(|(library, class)| {
            let class = library.loaded(object.py())?.getattr(class).ok()?;
            object.is_instance(&class).unwrap_or(false).then_some(library)
        })
    }

    /// The library's current stream object of `device` (CuPy's of the current device), if the
    /// library is loaded.
    ///
    /// # Errors
    /// The library's exception.
    pub(super) fn current_stream<'py>(self, py: Python<'py>, device: Device) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(module) = self.loaded(py) else { return Ok(None) };
        let cuda = module.getattr("cuda")?;
        Ok(Some(match self {
            Library::Torch => cuda.call_method1("current_stream", (device.ordinal(),))?,
            Library::Cupy => cuda.call_method0("get_current_stream")?,
        }))
    }

    /// Whether `stream`, one of this library's stream objects, owns its CUDA stream: a PyTorch
    /// stream of its own (never destroyed; its `stream_id` is odd, where an external stream's
    /// is its handle), or a `cupy.cuda.Stream` that CuPy destroys only with the object (not an
    /// `ExternalStream`, nor a `Stream.from_external`, which keeps the foreign object in
    /// `_foreign_stream_ref`).
    pub(super) fn owns(self, stream: &Bound<'_, PyAny>) -> bool {
        match self {
            Library::Torch => {
                stream.getattr("stream_id").and_then(|id| id.extract::<i64>()).is_ok_and(|id| id & 1 == 1)
            }
            Library::Cupy => {
                let owned_type =
                    self.loaded(stream.py()).and_then(|cupy| cupy.getattr("cuda").ok()?.getattr("Stream").ok());
                let foreign = stream.getattr("_foreign_stream_ref").is_ok_and(|foreign| !foreign.is_none());
                owned_type.is_some_and(|owned_type| stream.get_type().is(&owned_type)) && !foreign
            }
        }
    }

    /// The CUDA handle of one of this library's stream objects.
    pub(super) fn handle(self, stream: &Bound<'_, PyAny>) -> Option<usize> {
        let attribute = match self {
            Library::Torch => "cuda_stream",
            Library::Cupy => "ptr",
        };
        stream.getattr(attribute).and_then(|handle| handle.extract::<usize>()).ok()
    }
}
