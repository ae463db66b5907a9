//! Producer: a [`DeviceBuffer`] handed to Python ([`ExportedBuffer`]), consumed through
//! `__dlpack__` and `__cuda_array_interface__`, with the consumer's stream ordered after every
//! use of the buffer.

use super::dlpack::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPACK_VERSION, DLTENSOR, DLTENSOR_VERSIONED,
    DLTensor, DlpackElement, KDL_CUDA,
};
use super::exchange_error;
use super::streams::protocol_handle;
use crate::device::Device;
use crate::ffi::error::Result;
use crate::memory::DeviceBuffer;
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use crate::sys;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{IntoPyObjectExt, ffi};
use std::ffi::c_void;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::{self, ThreadId};

/// A [`DeviceBuffer`] handed to Python: `torch.from_dlpack(buffer)`, `cupy.from_dlpack`,
/// `cupy.asarray` (the CUDA Array Interface), `cuda.core`'s `StridedMemoryView` take it as a
/// one-dimensional array of its elements.
///
/// - `__dlpack__(stream=...)`: the consumer's stream waits for every use of the buffer so far,
///   on whatever streams (see the [module docs](super) for the stream values); the capsule
///   keeps the buffer alive until the consumer's deleter runs (a capsule never consumed frees
///   nothing early either); and the buffer's free waits for the work the consumer enqueued on
///   that stream before its deleter ran, or, where that stream cannot be known to be alive
///   then, the buffer is never used or freed again (see the [module docs](super)).
/// - `__cuda_array_interface__`: every use so far is joined into the buffer's home stream,
///   which is the interface's `stream`.
///
/// The buffer is moved in: Rust code no longer uses it (another library does now), and it is
/// freed when Python drops the object and the last capsule's deleter has run.
#[pyclass(frozen, name = "DeviceBuffer", module = "cuda_stream")]
pub struct ExportedBuffer {
    memory: Arc<dyn Lendable>,
}

impl ExportedBuffer {
    /// Hands `buffer` to Python.
    pub fn new<T: DlpackElement, S: AsStream + Send + Sync + 'static>(buffer: DeviceBuffer<T, S>) -> ExportedBuffer {
        ExportedBuffer { memory: Arc::new(buffer) }
    }
}

impl fmt::Debug for ExportedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportedBuffer")
            .field("address", &self.memory.address())
            .field("len", &self.memory.len())
            .field("device", &self.memory.device())
            .finish()
    }
}

/// What an export needs of a buffer, whatever its element type and home.
trait Lendable: Send + Sync {
    fn address(&self) -> usize;
    fn len(&self) -> usize;
    fn device(&self) -> Device;
    fn dtype(&self) -> DLDataType;
    fn typestr(&self) -> &'static str;
    /// `stream` waits for every use so far, and is one of the buffer's users up to now.
    fn lend_to(&self, stream: &StreamRef) -> Result<()>;
    /// Every use so far joined into the home stream, whose protocol handle this is.
    fn joined_home(&self) -> Result<usize>;
    /// A consumer's use could not be ordered before the free: the buffer leaks instead.
    fn leak_on_drop(&self);
}

impl<T: DlpackElement, S: AsStream + Send + Sync> Lendable for DeviceBuffer<T, S> {
    fn address(&self) -> usize {
        self.as_ptr_untracked() as usize
    }

    fn len(&self) -> usize {
        DeviceBuffer::len(self)
    }

    fn device(&self) -> Device {
        DeviceBuffer::device(self)
    }

    fn dtype(&self) -> DLDataType {
        T::DTYPE
    }

    fn typestr(&self) -> &'static str {
        T::TYPESTR
    }

    fn lend_to(&self, stream: &StreamRef) -> Result<()> {
        DeviceBuffer::lend_to(self, stream, "another library's use of an exported buffer")
    }

    fn joined_home(&self) -> Result<usize> {
        let home = self.stream();
        DeviceBuffer::lend_to(self, &home, "CUDA Array Interface export")?;
        Ok(protocol_handle(&home))
    }

    fn leak_on_drop(&self) {
        DeviceBuffer::leak_on_drop(self);
    }
}

/// The consumer's stream of one `__dlpack__` call, which its deleter orders the free after
/// where the stream is sure to be alive then.
struct Consumer {
    handle: usize,
    device: Device,
    /// The thread a per-thread stream (handle 2) was named on.
    thread: ThreadId,
    /// The Python object that keeps a stream of another handle alive (see [`stream_keeper`]).
    keeper: Option<Py<PyAny>>,
}

impl Consumer {
    /// The stream, if it is sure to be alive here: a built-in stream (the per-thread one only
    /// on the thread that named it), or a stream its keeper keeps alive.
    fn alive_stream(&self) -> Option<BorrowedStream<'_>> {
        let alive = match self.handle {
            sys::LEGACY_STREAM_HANDLE => true,
            sys::PER_THREAD_STREAM_HANDLE => thread::current().id() == self.thread,
            _ => self.keeper.is_some(),
        };
        // SAFETY: a built-in stream, or one whose owner is kept alive with it (the keeper);
        // the device was checked at the export.
        alive.then(|| unsafe { BorrowedStream::borrow_unchecked(self.handle as sys::cudaStream_t, self.device) })
    }
}

/// The Python object of the consumer's stream `handle`, where the consumer's library tells
/// it: PyTorch's or CuPy's current stream of the device, if it is that stream. PyTorch's
/// streams are never destroyed (an external one is its user's to keep alive, as PyTorch
/// itself requires); a CuPy stream is destroyed only with its object, which the capsule then
/// holds. Any other stream (a handle from `cuda.core`, from C) cannot be kept alive: its
/// consumer's later work is not waited for, and the buffer is leaked rather than freed under
/// it.
fn stream_keeper(py: Python<'_>, handle: usize, device: Device) -> Option<Py<PyAny>> {
    let modules = py.import("sys").ok()?.getattr("modules").ok()?;
    let loaded = |name: &str| modules.get_item(name).ok();
    if let Some(torch) = loaded("torch") {
        let current = torch.getattr("cuda").and_then(|cuda| cuda.call_method1("current_stream", (device.ordinal(),)));
        if let Ok(current) = current {
            if current.getattr("cuda_stream").and_then(|h| h.extract::<usize>()).ok() == Some(handle) {
                return Some(current.unbind());
            }
        }
    }
    if let Some(cupy) = loaded("cupy") {
        let current = cupy.getattr("cuda").and_then(|cuda| cuda.call_method0("get_current_stream"));
        if let Ok(current) = current {
            if current.getattr("ptr").and_then(|h| h.extract::<usize>()).ok() == Some(handle) {
                return Some(current.unbind());
            }
        }
    }
    None
}

/// The producer's side of one capsule: the buffer, kept alive until the deleter, and the
/// tensor's shape and strides, which the tensor points into.
struct ExportContext {
    memory: Arc<dyn Lendable>,
    consumer: Option<Consumer>,
    shape: [i64; 1],
    strides: [i64; 1],
}

impl ExportContext {
    /// The consumer is done with the tensor (its deleter, `consumed`): the free waits for the
    /// work it enqueued on its stream so far, or, where that stream may be gone or cannot be
    /// ordered, the buffer leaks. A capsule never consumed (its destructor) had no consumer work.
    fn consumer_done(self, consumed: bool) {
        // Nothing unwinds into the consumer's C code.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            if let Some(consumer) = self.consumer.as_ref().filter(|_| consumed) {
                let ordered = consumer.alive_stream().map(|stream| self.memory.lend_to(&stream));
                if !matches!(ordered, Some(Ok(()))) {
                    self.memory.leak_on_drop();
                }
            }
            // The keeper's reference goes with it (deferred by PyO3 if this thread does not hold
            // the interpreter).
            drop(self.consumer);
            drop(self.memory);
        }));
    }
}

#[pymethods]
impl ExportedBuffer {
    /// DLPack's export (see the type's docs).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let device = self.memory.device();
        if dl_device.is_some_and(|asked| asked != (KDL_CUDA, device.ordinal())) {
            return Err(exchange_error(format!(
                "__dlpack__(dl_device={dl_device:?}): the buffer is on CUDA device {} and is not copied",
                device.ordinal()
            )));
        }
        if copy == Some(true) {
            return Err(exchange_error("__dlpack__(copy=True): this buffer is exported, never copied".into()));
        }
        let handle = match stream {
            None | Some(1) => Some(sys::LEGACY_STREAM_HANDLE),
            Some(2) => Some(sys::PER_THREAD_STREAM_HANDLE),
            Some(-1) => None,
            Some(handle) if handle > 2 => Some(handle as usize),
            Some(value) => {
                return Err(exchange_error(format!(
                    "__dlpack__(stream={value}): 0 is ambiguous and other negative values mean nothing"
                )));
            }
        };
        let consumer = match handle {
            Some(handle) => {
                let memory = &self.memory;
                py.detach(|| -> Result<()> {
                    // SAFETY: the consumer hands a live stream (the protocol); its device is
                    // checked against the buffer's.
                    let stream = unsafe { BorrowedStream::borrow_raw_on(handle as sys::cudaStream_t, device) }?;
                    memory.lend_to(&stream)
                })?;
                let keeper =
                    if handle > sys::PER_THREAD_STREAM_HANDLE { stream_keeper(py, handle, device) } else { None };
                Some(Consumer { handle, device, thread: thread::current().id(), keeper })
            }
            None => None,
        };
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        capsule(py, Arc::clone(&self.memory), consumer, versioned)
    }

    /// `(kDLCUDA, device)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (KDL_CUDA, self.memory.device().ordinal())
    }

    /// The CUDA Array Interface, version 3 (see the type's docs).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let memory = &self.memory;
        let stream = py.detach(|| memory.joined_home())?;
        let interface = PyDict::new(py);
        interface.set_item("shape", (self.memory.len(),))?;
        interface.set_item("typestr", self.memory.typestr())?;
        interface.set_item("data", (self.memory.address(), false))?;
        interface.set_item("version", 3)?;
        interface.set_item("strides", py.None())?;
        interface.set_item("stream", stream)?;
        Ok(interface)
    }

    fn __len__(&self) -> usize {
        self.memory.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<cuda_stream.DeviceBuffer of {} {} at {:#x} on device {}>",
            self.memory.len(),
            self.memory.typestr(),
            self.memory.address(),
            self.memory.device().ordinal()
        )
    }
}

/// A fresh capsule of the buffer for `consumer` (versioned if the consumer reads DLPack 1.x).
fn capsule(
    py: Python<'_>,
    memory: Arc<dyn Lendable>,
    consumer: Option<Consumer>,
    versioned: bool,
) -> PyResult<Py<PyAny>> {
    let (address, len, device, dtype) = (memory.address(), memory.len(), memory.device(), memory.dtype());
    let context = Box::into_raw(Box::new(ExportContext { memory, consumer, shape: [len as i64], strides: [1] }));
    // SAFETY: just allocated; the tensor points into it until the deleter frees it.
    let (shape, strides) = unsafe { ((*context).shape.as_mut_ptr(), (*context).strides.as_mut_ptr()) };
    let dl_tensor = DLTensor {
        data: address as *mut c_void,
        device: DLDevice { device_type: KDL_CUDA, device_id: device.ordinal() },
        ndim: 1,
        dtype,
        shape,
        strides,
        byte_offset: 0,
    };
    let manager_ctx = context.cast::<c_void>();
    let capsule = if versioned {
        let managed = Box::into_raw(Box::new(DLManagedTensorVersioned {
            version: DLPACK_VERSION,
            manager_ctx,
            deleter: Some(delete_versioned),
            flags: 0,
            dl_tensor,
        }));
        // SAFETY: a valid pointer, a static name, a destructor that frees it unless consumed.
        let capsule =
            unsafe { ffi::PyCapsule_New(managed.cast(), DLTENSOR_VERSIONED.as_ptr(), Some(destroy_versioned_capsule)) };
        if capsule.is_null() {
            // SAFETY: not handed to anyone: released once, here.
            unsafe { release_versioned(managed, false) };
        }
        capsule
    } else {
        let managed = Box::into_raw(Box::new(DLManagedTensor { dl_tensor, manager_ctx, deleter: Some(delete) }));
        // SAFETY: as above.
        let capsule = unsafe { ffi::PyCapsule_New(managed.cast(), DLTENSOR.as_ptr(), Some(destroy_capsule)) };
        if capsule.is_null() {
            // SAFETY: as above.
            unsafe { release(managed, false) };
        }
        capsule
    };
    // SAFETY: a new reference, or null with the exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.into_py_any(py)
}

/// The deleter of a versioned tensor made by [`capsule`], which its consumer calls.
///
/// # Safety
/// `managed` is null or a tensor [`capsule`] made, not deleted yet.
unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: the caller's contract.
    unsafe { release_versioned(managed, true) }
}

/// A versioned tensor's release, by its consumer (`consumed`) or by its capsule never consumed.
///
/// # Safety
/// As [`delete_versioned`].
unsafe fn release_versioned(managed: *mut DLManagedTensorVersioned, consumed: bool) {
    if managed.is_null() {
        return;
    }
    // SAFETY: the caller's contract: both boxes were made by `capsule`, and are freed once.
    let (managed, context) =
        unsafe { (Box::from_raw(managed), Box::from_raw((*managed).manager_ctx.cast::<ExportContext>())) };
    drop(managed);
    context.consumer_done(consumed);
}

/// The deleter of an unversioned tensor made by [`capsule`], which its consumer calls.
///
/// # Safety
/// As [`delete_versioned`].
unsafe extern "C" fn delete(managed: *mut DLManagedTensor) {
    // SAFETY: the caller's contract.
    unsafe { release(managed, true) }
}

/// An unversioned tensor's release (see [`release_versioned`]).
///
/// # Safety
/// As [`delete_versioned`].
unsafe fn release(managed: *mut DLManagedTensor, consumed: bool) {
    if managed.is_null() {
        return;
    }
    // SAFETY: as in `release_versioned`.
    let (managed, context) =
        unsafe { (Box::from_raw(managed), Box::from_raw((*managed).manager_ctx.cast::<ExportContext>())) };
    drop(managed);
    context.consumer_done(consumed);
}

/// A versioned capsule's destructor: a capsule still named `dltensor_versioned` was never
/// consumed, and its tensor is deleted; a consumed one (renamed) is its consumer's.
///
/// # Safety
/// Called by Python with a capsule [`capsule`] made.
unsafe extern "C" fn destroy_versioned_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: a live capsule; the name check reads it only.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            release_versioned(ffi::PyCapsule_GetPointer(capsule, DLTENSOR_VERSIONED.as_ptr()).cast(), false);
        }
    }
}

/// An unversioned capsule's destructor (see [`destroy_versioned_capsule`]).
///
/// # Safety
/// As [`destroy_versioned_capsule`].
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `destroy_versioned_capsule`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            release(ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast(), false);
        }
    }
}
