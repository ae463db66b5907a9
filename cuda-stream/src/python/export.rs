//! Producer: a [`DeviceBuffer`] handed to Python ([`ExportedBuffer`]), consumed through
//! `__dlpack__` and `__cuda_array_interface__`, with the consumer's stream ordered after every
//! use of the buffer.

use super::dlpack::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPACK_VERSION, DLPackVersion, DLTENSOR,
    DLTENSOR_VERSIONED, DLTensor, DlpackElement, KDL_CUDA,
};
use super::exchange_error;
use super::streams::{Library, protocol_handle};
use crate::call::uncaptured_calls::foreign_handle_seen;
use crate::device::Device;
use crate::ffi::error::{Error, Result};
use crate::memory::DeviceBuffer;
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use crate::sys;
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{IntoPyObjectExt, ffi};
use std::ffi::c_void;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, ThreadId};

/// A [`DeviceBuffer`] handed to Python: `torch.from_dlpack(buffer)`, `cupy.from_dlpack`,
/// `cupy.asarray` (the CUDA Array Interface), `cuda.core`'s `StridedMemoryView` take it as a
/// one-dimensional array of its elements.
///
/// - `__dlpack__(stream=...)`: the consumer's stream waits for every use of the buffer (of the
///   chunk, for [`ExportedBuffer::chunks`]) so far, on whatever streams (see the [module docs](super) for the stream values); the capsule
///   keeps the buffer alive until the consumer's deleter runs (a capsule never consumed frees
///   nothing early either); and the buffer's free waits for the work the consumer enqueued on
///   that stream before its deleter ran. Where that stream cannot be known to be alive then
///   (`stream=-1`, a handle of no library this module knows), the buffer is never used or freed
///   again once the deleter ran (see the [module docs](super)).
/// - `__cuda_array_interface__`, where offered ([`ExportedBuffer::with_array_interface`]):
///   every use so far (of the chunk) is joined into the buffer's home stream, which is the
///   interface's `stream`. The interface says nothing of when its consumer's work ends: the
///   whole allocation is never freed once it was read (it leaks when dropped).
///
/// The buffer is moved in: Rust code no longer uses it (another library does now), and it is
/// freed when Python drops the object and the last capsule's deleter has run.
///
/// What no DLPack producer can check, and this one does not either: a consumer's stream handle
/// is a live stream when `__dlpack__` gets it, and no capture of it begins or ends on another
/// thread while `__dlpack__` or the deleter reads it; a consumer renames the capsule before it
/// calls the deleter (PyTorch, CuPy and `cuda.core` do), as DLPack requires.
#[pyclass(frozen, name = "DeviceBuffer", module = "cuda_stream")]
pub struct ExportedBuffer {
    memory: Arc<dyn Lendable>,
    /// The elements of the buffer this object exports (all, or one chunk).
    range: Range<usize>,
    /// Whether `__cuda_array_interface__` is offered ([`ExportedBuffer::with_array_interface`]).
    array_interface: bool,
}

impl ExportedBuffer {
    /// Hands `buffer` to Python, through DLPack only (see
    /// [`ExportedBuffer::with_array_interface`]).
    ///
    /// # Errors
    /// [`Error::Exchange`] for a buffer whose home is a per-thread stream (handle 2, or 0 in the
    /// `per-thread-default-stream` build), which means another stream on each Python thread, and
    /// for a buffer this crate did not allocate (a graph's output, an imported tensor): only
    /// memory this crate frees is handed out; for a buffer whose memory a graph holds
    /// ([`GraphBuffer`](crate::GraphBuffer)).
    pub fn new<T: DlpackElement, S: AsStream + Send + Sync + 'static>(
        buffer: DeviceBuffer<T, S>,
    ) -> Result<ExportedBuffer> {
        if buffer.stream().is_thread_bound() {
            return Err(Error::Exchange(
                "a buffer whose home is a per-thread stream is not handed to Python: it means another \
                 stream on each thread"
                    .into(),
            ));
        }
        if !buffer.allocated_here() {
            return Err(Error::Exchange(
                "only a buffer this crate allocated is handed to Python (not a graph's output, not an \
                 imported tensor)"
                    .into(),
            ));
        }
        // A graph's launches are ordered with the buffer's noted uses only: never with the work
        // a consumer enqueues on the memory after its export.
        if buffer.held_by_graphs() {
            return Err(Error::Exchange(
                "a buffer whose memory a graph holds is not handed to Python: the graph's launches would \
                 not be ordered with the consumer's work"
                    .into(),
            ));
        }
        let len = buffer.len();
        let shared = Shared { buffer: ManuallyDrop::new(buffer), never_free: AtomicBool::new(false) };
        Ok(ExportedBuffer { memory: Arc::new(shared), range: 0..len, array_interface: false })
    }

    /// Offers `__cuda_array_interface__` too (CuPy's `asarray`, Numba). The interface keeps
    /// nothing alive and says nothing of when its consumer's work ends, so the first read of
    /// it makes the whole allocation never freed (it leaks when dropped). Without this, the
    /// attribute is absent, and libraries that probe it (`torch.as_tensor`, `cupy.asarray`)
    /// take DLPack instead.
    pub fn with_array_interface(mut self) -> ExportedBuffer {
        self.array_interface = true;
        self
    }

    /// Hands `buffer` to Python as views of `chunk` elements each, in order (the last one
    /// shorter if `chunk` does not divide the length): the chunks of a pipeline, each exported
    /// on its own. A chunk's consumer waits only for the uses of its own elements, so a chunk
    /// goes to PyTorch while the next one is still being written on another stream (the home
    /// stream's work counts as one use of the whole buffer). The memory is freed once every
    /// chunk's object and capsule is gone; a consumer whose work cannot be ordered leaks the
    /// whole allocation and makes every chunk refuse later exports.
    ///
    /// # Errors
    /// As [`ExportedBuffer::new`]; [`Error::Size`] for chunks of zero elements.
    pub fn chunks<T: DlpackElement, S: AsStream + Send + Sync + 'static>(
        buffer: DeviceBuffer<T, S>,
        chunk: usize,
    ) -> Result<Vec<ExportedBuffer>> {
        if chunk == 0 {
            return Err(Error::Size("chunks have at least one element"));
        }
        let whole = ExportedBuffer::new(buffer)?;
        let len = whole.range.len();
        Ok((0..len)
            .step_by(chunk)
            .map(|start| ExportedBuffer {
                memory: Arc::clone(&whole.memory),
                range: start..(start.saturating_add(chunk)).min(len),
                array_interface: false,
            })
            .collect())
    }

    /// The buffer's memory lent to our own import on `stream` (the consumer is this crate): the
    /// stream waits for every use so far; the memory's address, length and element type, and
    /// what keeps it alive.
    pub(super) fn lend_to_import(&self, stream: &StreamRef) -> Result<(usize, usize, Arc<dyn Lendable>)> {
        self.memory.lend_to(stream, self.range.clone())?;
        Ok((self.memory.address(self.range.start), self.range.len(), Arc::clone(&self.memory)))
    }

    /// The element type, as DLPack names it.
    pub(super) fn element_type(&self) -> DLDataType {
        self.memory.dtype()
    }
}

impl fmt::Debug for ExportedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportedBuffer")
            .field("address", &self.memory.address(self.range.start))
            .field("len", &self.range.len())
            .field("device", &self.memory.device())
            .finish()
    }
}

/// A buffer handed to Python, shared by its object and its capsules: freed by the last of
/// them, unless an export left a consumer whose work cannot be waited for.
struct Shared<T: DlpackElement, S: AsStream> {
    buffer: ManuallyDrop<DeviceBuffer<T, S>>,
    /// Exported through the CUDA Array Interface: never freed.
    never_free: AtomicBool,
}

impl<T: DlpackElement, S: AsStream> Drop for Shared<T, S> {
    fn drop(&mut self) {
        if !self.never_free.load(Ordering::Acquire) {
            // SAFETY: dropped once, here; never used after.
            unsafe { ManuallyDrop::drop(&mut self.buffer) };
        }
    }
}

/// What an export needs of a buffer, whatever its element type and home.
pub(super) trait Lendable: Send + Sync {
    /// The address of element `start`.
    fn address(&self, start: usize) -> usize;
    fn device(&self) -> Device;
    fn dtype(&self) -> DLDataType;
    fn typestr(&self) -> &'static str;
    /// `stream` waits for every use of the elements `range` so far, and is one of their users
    /// up to now.
    fn lend_to(&self, stream: &StreamRef, range: Range<usize>) -> Result<()>;
    /// Every use of the elements `range` so far joined into the home stream, whose protocol
    /// handle this is; the buffer is never freed from now on.
    fn joined_home(&self, range: Range<usize>) -> Result<usize>;
    /// A consumer's use could not be ordered before the free: the buffer leaks instead, and
    /// refuses every later use.
    fn leak_on_drop(&self);
    /// Whether [`Lendable::leak_on_drop`] was called.
    fn leaked(&self) -> bool;
}

impl<T: DlpackElement, S: AsStream + Send + Sync> Lendable for Shared<T, S> {
    fn address(&self, start: usize) -> usize {
        self.buffer.as_ptr_untracked().wrapping_add(start) as usize
    }

    fn device(&self) -> Device {
        self.buffer.device()
    }

    fn dtype(&self) -> DLDataType {
        T::DTYPE
    }

    fn typestr(&self) -> &'static str {
        T::TYPESTR
    }

    fn lend_to(&self, stream: &StreamRef, range: Range<usize>) -> Result<()> {
        self.buffer.lend_to(stream, range, "another library's use of an exported buffer")
    }

    fn joined_home(&self, range: Range<usize>) -> Result<usize> {
        let home = self.buffer.stream();
        self.buffer.lend_to(&home, range, "CUDA Array Interface export")?;
        self.never_free.store(true, Ordering::Release);
        // Python code may now capture the home stream (`cupy.cuda.ExternalStream(handle)`).
        foreign_handle_seen();
        Ok(protocol_handle(&home))
    }

    fn leak_on_drop(&self) {
        self.buffer.leak_on_drop();
    }

    fn leaked(&self) -> bool {
        self.buffer.leaked()
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
/// it and owns the stream: PyTorch's current stream of the device if it is that stream and one
/// of PyTorch's own (never destroyed; its `stream_id` is odd, where an external stream's is
/// its handle), or CuPy's current stream if it is that stream and a `cupy.cuda.Stream` that
/// owns it (which CuPy destroys only with its object, held then by the capsule; not an
/// `ExternalStream`, nor a `Stream.from_external`). Any other stream (an external stream, a
/// handle from `cuda.core` or C) cannot be kept alive.
fn stream_keeper(py: Python<'_>, handle: usize, device: Device) -> Option<Py<PyAny>> {
    [Library::Torch, Library::Cupy].into_iter().find_map(|library| {
        let current = library.current_stream(py, device).ok().flatten()?;
        (library.owns(&current) && library.handle(&current) == Some(handle)).then(|| current.unbind())
    })
}

/// The producer's side of one capsule: the buffer, kept alive until the deleter, and the
/// tensor's shape and strides, which the tensor points into.
struct ExportContext {
    memory: Arc<dyn Lendable>,
    range: Range<usize>,
    consumer: Option<Consumer>,
    shape: [i64; 1],
    strides: [i64; 1],
}

impl ExportContext {
    /// The consumer is done with the tensor (its deleter, `consumed`): the free waits for the
    /// work it enqueued on its stream so far, or, where that stream may be gone, is unknown
    /// (`-1`) or cannot be ordered, the buffer leaks. A capsule never consumed (its destructor)
    /// had no consumer work.
    fn consumer_done(self, consumed: bool) {
        let ExportContext { memory, range, consumer, .. } = self;
        if consumed {
            // Nothing unwinds into the consumer's C code; a panic counts as not ordered.
            let ordered = catch_unwind(AssertUnwindSafe(|| {
                let stream = consumer.as_ref().and_then(Consumer::alive_stream);
                stream.is_some_and(|stream| memory.lend_to(&stream, range).is_ok())
            }));
            if !matches!(ordered, Ok(true)) {
                memory.leak_on_drop();
            }
        }
        // The keeper's reference goes with it (deferred by PyO3 if this thread does not hold
        // the interpreter). A buffer's drop never panics.
        let _ = catch_unwind(AssertUnwindSafe(move || {
            drop(consumer);
            drop(memory);
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
        if self.memory.leaked() {
            return Err(exchange_error(
                "this buffer was lent to a consumer whose work could not be ordered: it is never used again".into(),
            ));
        }
        let consumer = match handle {
            Some(handle) => {
                let (memory, range) = (&self.memory, self.range.clone());
                py.detach(|| -> Result<()> {
                    // SAFETY: the consumer hands a live stream (the protocol: a handle of a
                    // destroyed stream is a crash in any producer); its device is checked
                    // against the buffer's. A capture of it that Python begins or ends on
                    // another thread meanwhile is `PyStream::borrow`'s excluded case.
                    let stream = unsafe { BorrowedStream::borrow_raw_on(handle as sys::cudaStream_t, device) }?;
                    memory.lend_to(&stream, range)
                })
                .map_err(refusal)?;
                let keeper =
                    if handle > sys::PER_THREAD_STREAM_HANDLE { stream_keeper(py, handle, device) } else { None };
                Some(Consumer { handle, device, thread: thread::current().id(), keeper })
            }
            None => None,
        };
        // DLPack 1.x for a consumer that reads it, at the minor version it asked for at most
        // (1.0 and 1.1 share the layout).
        let version = max_version.filter(|&(major, _)| major >= 1).map(|(major, minor)| {
            if major > 1 { DLPACK_VERSION } else { DLPackVersion { major: 1, minor: minor.min(DLPACK_VERSION.minor) } }
        });
        capsule(py, Arc::clone(&self.memory), self.range.clone(), consumer, version)
    }

    /// `(kDLCUDA, device)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (KDL_CUDA, self.memory.device().ordinal())
    }

    /// The CUDA Array Interface, version 3 (see the type's docs), where the export offers it
    /// ([`ExportedBuffer::with_array_interface`]); `AttributeError` otherwise.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if !self.array_interface {
            return Err(PyAttributeError::new_err(
                "this buffer is exported through DLPack only (ExportedBuffer::with_array_interface offers the \
                 CUDA Array Interface)",
            ));
        }
        let (memory, range) = (&self.memory, self.range.clone());
        let stream = py.detach(|| memory.joined_home(range)).map_err(refusal)?;
        let interface = PyDict::new(py);
        interface.set_item("shape", (self.range.len(),))?;
        interface.set_item("typestr", self.memory.typestr())?;
        interface.set_item("data", (self.memory.address(self.range.start), false))?;
        interface.set_item("version", 3)?;
        interface.set_item("strides", py.None())?;
        interface.set_item("stream", stream)?;
        Ok(interface)
    }

    fn __len__(&self) -> usize {
        self.range.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<cuda_stream.DeviceBuffer of {} {} at {:#x} on device {}>",
            self.range.len(),
            self.memory.typestr(),
            self.memory.address(self.range.start),
            self.memory.device().ordinal()
        )
    }
}

/// An error of an export as Python sees it: a device mismatch is the protocol's refusal
/// (`BufferError`), as [`Error::Exchange`] is; CUDA's and the crate's other errors stay
/// themselves (`RuntimeError`).
fn refusal(error: Error) -> PyErr {
    match error {
        Error::DeviceMismatch { .. } => exchange_error(error.to_string()),
        error => error.into(),
    }
}

/// A fresh capsule of the buffer for `consumer` (versioned, at `version`, if the consumer reads
/// DLPack 1.x).
fn capsule(
    py: Python<'_>,
    memory: Arc<dyn Lendable>,
    range: Range<usize>,
    consumer: Option<Consumer>,
    version: Option<DLPackVersion>,
) -> PyResult<Py<PyAny>> {
    let (address, len, device, dtype) = (memory.address(range.start), range.len(), memory.device(), memory.dtype());
    let context = Box::into_raw(Box::new(ExportContext { memory, range, consumer, shape: [len as i64], strides: [1] }));
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
    let capsule = if let Some(version) = version {
        let managed = Box::into_raw(Box::new(DLManagedTensorVersioned {
            version,
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
            unsafe { release(managed, false) };
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
    unsafe { release(managed, true) }
}

/// The deleter of an unversioned tensor made by [`capsule`], which its consumer calls.
///
/// # Safety
/// As [`delete_versioned`].
unsafe extern "C" fn delete(managed: *mut DLManagedTensor) {
    // SAFETY: the caller's contract.
    unsafe { release(managed, true) }
}

/// DLPack's two managed tensors, as their release reads them.
trait ManagedTensor {
    fn manager_ctx(&self) -> *mut c_void;
}

impl ManagedTensor for DLManagedTensor {
    fn manager_ctx(&self) -> *mut c_void {
        self.manager_ctx
    }
}

impl ManagedTensor for DLManagedTensorVersioned {
    fn manager_ctx(&self) -> *mut c_void {
        self.manager_ctx
    }
}

/// A tensor's release, by its consumer (`consumed`) or by its capsule never consumed.
///
/// # Safety
/// As [`delete_versioned`].
unsafe fn release<M: ManagedTensor>(managed: *mut M, consumed: bool) {
    if managed.is_null() {
        return;
    }
    // SAFETY: the caller's contract: both boxes were made by `capsule`, and are freed once.
    let managed = unsafe { Box::from_raw(managed) };
    // SAFETY: as above.
    let context = unsafe { Box::from_raw(managed.manager_ctx().cast::<ExportContext>()) };
    drop(managed);
    context.consumer_done(consumed);
}

/// A versioned capsule's destructor: a capsule still named `dltensor_versioned` was never
/// consumed, and its tensor is deleted; a consumed one (renamed) is its consumer's.
///
/// # Safety
/// Called by Python with a capsule [`capsule`] made.
unsafe extern "C" fn destroy_versioned_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: a live capsule; the name check reads it only; the interpreter is held (a
    // destructor), and an exception pending is kept across the release.
    unsafe {
        keeping_exception(|| {
            if ffi::PyCapsule_IsValid(capsule, DLTENSOR_VERSIONED.as_ptr()) == 1 {
                release(
                    ffi::PyCapsule_GetPointer(capsule, DLTENSOR_VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>(),
                    false,
                );
            }
        });
    }
}

/// Runs `body` with the interpreter's pending exception set aside (a destructor may run
/// while one is being raised; the release may run Python code: a keeper's deallocation).
///
/// # Safety
/// The interpreter is held.
unsafe fn keeping_exception(body: impl FnOnce()) {
    let (mut kind, mut value, mut traceback) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the caller holds the interpreter; the three out-pointers are ours.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Fetch(&mut kind, &mut value, &mut traceback)
    };
    body();
    // SAFETY: as above; the references fetched are handed back.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Restore(kind, value, traceback)
    };
}

/// An unversioned capsule's destructor (see [`destroy_versioned_capsule`]).
///
/// # Safety
/// As [`destroy_versioned_capsule`].
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `destroy_versioned_capsule`.
    unsafe {
        keeping_exception(|| {
            if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
                release(ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast::<DLManagedTensor>(), false);
            }
        });
    }
}
