//! Consumer: a tensor of another library (PyTorch, CuPy, anything with `__dlpack__` or DLPack's
//! C exchange API) imported as a [`DeviceBuffer`] whose home is our stream ([`import`]).

use super::dlpack::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_VERSION, DLPackExchangeAPI, DLPackExchangeAPIHeader, DLTENSOR,
    DLTENSOR_VERSIONED, DLTensor, DlpackElement, EXCHANGE_API, FLAG_READ_ONLY, KDL_CUDA, USED_DLTENSOR,
    USED_DLTENSOR_VERSIONED,
};
use super::exchange_error;
use super::export::ExportedBuffer;
use super::streams::{Library, PyStream, protocol_handle};
use crate::CaptureStatus;
use crate::call::uncaptured_calls::foreign_handle_seen;
use crate::device::{Device, same_device};
use crate::ffi::error::Error;
use crate::memory::DeviceBuffer;
use crate::memory::lent::LentMemory;
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use crate::sys;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ffi::{CStr, c_void};
use std::ptr::NonNull;

/// Imports `object`'s tensor as a buffer whose home is `stream`, through the producer's C
/// exchange API where its type offers one (`__dlpack_c_exchange_api__`: `stream` then waits
/// for the producer's `current_work_stream`), else through `__dlpack__`
/// ([`import_with_dlpack`]). The buffer orders every use on other streams through its own
/// tracking, like any buffer of this crate, and its drop hands the tensor back to the exporter
/// (DLPack's deleter) only once every use has completed: the exporter's allocator may reuse
/// the memory at once. During a capture of `stream`, nothing is synchronized: the capture is
/// left intact (order the graph's launch after the producer's work yourself).
///
/// The tensor must be a CUDA tensor of `stream`'s device, of element type `T`, compact
/// (row-major contiguous, any shape: the buffer has all its elements) and writable.
///
/// A buffer this module exported ([`ExportedBuffer`](super::ExportedBuffer)) is taken
/// directly: `stream` waits for its uses, and it stays usable by other consumers after.
///
/// Read-only tensors are refused where the producer says so (DLPack 1.x's flag; a 0.x capsule
/// cannot).
///
/// # Safety
/// * `object` is a DLPack producer that keeps its promises: the tensor describes device
///   memory that stays valid until its deleter is called, and an exchange API's functions do
///   what DLPack says (PyTorch, CuPy, JAX, `cuda.core` do).
/// * No capture of `stream` begins on another thread during the call (the producer's wait
///   would cross into it).
/// * When `stream` is being captured, nothing is synchronized: the graph's launches must be
///   ordered after the producer's pending work on the tensor by you.
///
/// # Errors
/// `BufferError` ([`Error::Exchange`]) for a tensor of another kind of device, another element
/// type, strides that are not compact, a read-only tensor, or a DLPack major version other
/// than 0 or 1, or of another device than `stream`'s (with [`Error::DeviceMismatch`]'s
/// message); [`Error::Size`] for an empty one; the producer's exceptions; the errors of
/// [`StreamRef::wait_stream`](crate::StreamRef::wait_stream). A refused tensor is given back
/// unused.
pub unsafe fn import<T: DlpackElement, S: AsStream>(
    object: &Bound<'_, PyAny>,
    stream: S,
) -> PyResult<DeviceBuffer<T, S>> {
    // Python code may capture streams this thread uses, unseen: from here on the crate reads
    // capture statuses where it matters (the first time, with the interpreter released: it
    // waits for other threads' calls of this crate, one of which may wait for Python).
    object.py().detach(foreign_handle_seen);
    if let Ok(ours) = object.cast::<ExportedBuffer>() {
        return import_ours(ours.get(), stream);
    }
    match exchange_api(object) {
        // SAFETY: the caller's contract; the table lives as long as its capsule, held here.
        Some((_capsule, api)) => unsafe { import_through_api(object, stream, api.as_ref()) },
        // SAFETY: the caller's contract.
        None => unsafe { through_dlpack(object, stream) },
    }
}

/// [`import`] through `__dlpack__` only: the exporter is asked to order its pending work on
/// the tensor before `stream` (the stream value encoded for this build: 1 for the legacy
/// stream, 2 for the per-thread one, never 0, and never 2 to PyTorch, see the
/// [module docs](super)); during a capture of `stream`, `-1`.
///
/// # Safety
/// As [`import`].
///
/// # Errors
/// As [`import`].
pub unsafe fn import_with_dlpack<T: DlpackElement, S: AsStream>(
    object: &Bound<'_, PyAny>,
    stream: S,
) -> PyResult<DeviceBuffer<T, S>> {
    object.py().detach(foreign_handle_seen);
    // SAFETY: the caller's contract.
    unsafe { through_dlpack(object, stream) }
}

/// [`import_with_dlpack`], the foreign mark taken.
///
/// # Safety
/// As [`import`].
unsafe fn through_dlpack<T: DlpackElement, S: AsStream>(
    object: &Bound<'_, PyAny>,
    stream: S,
) -> PyResult<DeviceBuffer<T, S>> {
    let device = stream.as_stream().device();
    dlpack_device_checked(object, device)?;
    let capsule = {
        let ours = stream.as_stream();
        // PyTorch exports only tensors of the current device; CuPy's current stream is the
        // current device's.
        let _current = device.make_current()?;
        // The producer's current stream, where the producer is PyTorch or CuPy: while it is
        // being captured, the producer's wait would make our stream join that capture (both
        // record an event there and make ours wait for it): nothing is synchronized then.
        let library = Library::of_array(object);
        let producer = producer_stream(object.py(), library, device)?;
        let producer_captures = producer
            .as_ref()
            .map(|p| p.as_stream().capture_status())
            .transpose()?
            .is_some_and(|s| s != CaptureStatus::None);
        let mut argument = stream_argument(&ours)?;
        // PyTorch refuses 2: it is asked for nothing, and our stream waits for PyTorch's
        // current stream below, as PyTorch's producer would make it.
        let order_here = argument == 2 && library == Some(Library::Torch);
        if producer_captures || order_here {
            argument = -1;
        }
        let capsule = call_dlpack(object, argument)?;
        if let (true, false, Some(producer)) = (order_here, producer_captures, &producer) {
            ours.wait_stream(producer)?;
        }
        if argument > 0 && ours.capture_status()? != CaptureStatus::None {
            // The producer made our stream join a capture of its own (its stream began one
            // between our check and its wait): the capsule goes back unconsumed.
            return Err(exchange_error(
                "the producer's wait made this stream join a capture of the producer's; the import is refused".into(),
            ));
        }
        capsule
    };
    // SAFETY: the caller's contract: a capsule of a conforming producer.
    let (managed, address, len) = unsafe { take_tensor::<T>(&capsule, device) }?;
    Ok(lent_buffer(stream, managed, address, len))
}

/// The current stream of the producer `library` (PyTorch or CuPy, where it is one of them)
/// on `device` (current), borrowed for the call.
fn producer_stream(py: Python<'_>, library: Option<Library>, device: Device) -> PyResult<Option<PyStream>> {
    let Some(current) = library.map(|library| library.current_stream(py, device)).transpose()?.flatten() else {
        return Ok(None);
    };
    // SAFETY: the producer's current stream, alive while it is current; the borrow ends within
    // the import.
    Ok(Some(unsafe { PyStream::borrow(&current) }?))
}

/// A buffer of this module's own export, imported on `stream`: ordered after its uses, kept
/// alive until the import's last use has completed.
fn import_ours<T: DlpackElement, S: AsStream>(ours: &ExportedBuffer, stream: S) -> PyResult<DeviceBuffer<T, S>> {
    if ours.element_type() != T::DTYPE {
        return Err(exchange_error(format!(
            "a buffer of {:?} is not one of {} ({:?})",
            ours.element_type(),
            std::any::type_name::<T>(),
            T::DTYPE
        )));
    }
    let (address, len, memory) = ours.lend_to_import(&stream.as_stream()).map_err(|error| match error {
        Error::DeviceMismatch { .. } => exchange_error(error.to_string()),
        error => error.into(),
    })?;
    let address = NonNull::new(address as *mut T).ok_or_else(|| exchange_error("a buffer at address 0".into()))?;
    // The import's drop waits for its last use before it lets the memory go.
    let lent = LentMemory::own(move || drop(memory));
    Ok(DeviceBuffer::lent(stream, address, len, lent))
}

/// The imported tensor as a buffer on `stream`, handed back by its drop.
fn lent_buffer<T: DlpackElement, S: AsStream>(
    stream: S,
    managed: Managed,
    address: NonNull<T>,
    len: usize,
) -> DeviceBuffer<T, S> {
    let lent = LentMemory::new(move || {
        // SAFETY: the tensor was consumed here and is deleted once, after its last use.
        unsafe { managed.delete() }
    });
    DeviceBuffer::lent(stream, address, len, lent)
}

/// `ours` waits for the producer's stream `theirs`, unless that stream is being captured: a
/// wait would make ours join the producer's capture (CUDA's fork), which the producer would
/// then find unjoined at its end. PyTorch's own producer synchronizes nothing during a capture
/// either (pytorch#163242).
fn wait_unless_capturing(ours: &StreamRef, theirs: &StreamRef) -> PyResult<()> {
    if theirs.capture_status()? == CaptureStatus::None {
        ours.wait_stream(theirs)?;
    }
    Ok(())
}

/// The producer's C exchange API of DLPack major version 1, if its type offers one, with the
/// capsule that keeps it alive.
fn exchange_api<'py>(object: &Bound<'py, PyAny>) -> Option<(Bound<'py, PyAny>, NonNull<DLPackExchangeAPI>)> {
    let capsule = object.get_type().getattr(pyo3::intern!(object.py(), "__dlpack_c_exchange_api__")).ok()?;
    // SAFETY: any object; a name check has no side effect.
    if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), EXCHANGE_API.as_ptr()) } != 1 {
        return None;
    }
    // SAFETY: a valid capsule of that name: the producer's table, which lives as long as its
    // type (DLPack: a static table).
    let mut header = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), EXCHANGE_API.as_ptr()) }
        .cast::<DLPackExchangeAPIHeader>()
        .cast_const();
    // The newest table first, then the older ones the producer chains.
    while !header.is_null() {
        // SAFETY: a header of the producer's chain.
        let version = unsafe { (*header).version };
        if version.major == 1 {
            // A table of major version 1 begins with its header; it lives as long as its
            // capsule, which goes with it.
            return NonNull::new(header.cast::<DLPackExchangeAPI>().cast_mut()).map(|api| (capsule, api));
        }
        // SAFETY: as above.
        header = unsafe { (*header).prev_api };
    }
    None
}

/// [`import`] through the producer's C exchange API.
///
/// # Safety
/// As [`import`], and `api` is `object`'s type's table.
unsafe fn import_through_api<T: DlpackElement, S: AsStream>(
    object: &Bound<'_, PyAny>,
    stream: S,
    api: &DLPackExchangeAPI,
) -> PyResult<DeviceBuffer<T, S>> {
    let py = object.py();
    let (Some(from_object), Some(current_work_stream)) =
        (api.managed_tensor_from_py_object_no_sync, api.current_work_stream)
    else {
        return Err(exchange_error("a DLPack exchange API without its required functions".into()));
    };
    let (device, capturing) = {
        let ours = stream.as_stream();
        (ours.device(), stream_argument(&ours)? == -1)
    };
    dlpack_device_checked(object, device)?;
    let mut out: *mut DLManagedTensorVersioned = std::ptr::null_mut();
    // SAFETY: a live object; the out-pointer is ours; the producer's function (the contract).
    if unsafe { from_object(object.as_ptr().cast(), &mut out) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let managed = Managed::Versioned(
        NonNull::new(out).ok_or_else(|| exchange_error("the exchange API returned no tensor".into()))?,
    );
    // SAFETY: the producer's tensor, ours to delete.
    let checked = unsafe { checked_managed::<T>(&managed, device) }.and_then(|(address, len)| {
        if !capturing {
            let mut theirs: *mut c_void = std::ptr::null_mut();
            // SAFETY: the out-pointer is ours; the producer's function (the contract).
            if unsafe { current_work_stream(KDL_CUDA, device.ordinal(), &mut theirs) } != 0 {
                return Err(PyErr::fetch(py));
            }
            // The producer's null stream is its legacy stream (as `PyStream::borrow` reads it).
            let theirs = if theirs.is_null() { sys::cudaStreamLegacy } else { theirs.cast() };
            // SAFETY: the producer's current stream, alive while it is current (this call).
            let theirs = unsafe { BorrowedStream::borrow_raw_on(theirs, device) }?;
            wait_unless_capturing(&stream.as_stream(), &theirs)?;
        }
        Ok((address, len))
    });
    match checked {
        Ok((address, len)) => Ok(lent_buffer(stream, managed, address, len)),
        Err(error) => {
            // SAFETY: never handed to anyone: given back once, here.
            unsafe { managed.delete() };
            Err(error)
        }
    }
}

/// The `stream` argument of `__dlpack__` for our stream: `-1` while it is being captured,
/// else 1 (legacy), 2 (per-thread) or the handle.
fn stream_argument(stream: &StreamRef) -> crate::Result<i64> {
    Ok(match stream.capture_status()? {
        CaptureStatus::None => protocol_handle(stream) as i64,
        CaptureStatus::Active | CaptureStatus::Invalidated => -1,
    })
}

/// `object.__dlpack__(stream=argument, max_version=(1, 1))`, or without `max_version` for an
/// exporter older than DLPack 1.0 (a `TypeError`).
fn call_dlpack<'py>(object: &Bound<'py, PyAny>, argument: i64) -> PyResult<Bound<'py, PyAny>> {
    let py = object.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("stream", argument)?;
    kwargs.set_item("max_version", (DLPACK_VERSION.major, DLPACK_VERSION.minor))?;
    match object.call_method("__dlpack__", (), Some(&kwargs)) {
        Err(error) if error.is_instance_of::<PyTypeError>(py) => {
            kwargs.del_item("max_version")?;
            object.call_method("__dlpack__", (), Some(&kwargs))
        }
        result => result,
    }
}

/// A consumed tensor: ours to delete.
enum Managed {
    Unversioned(NonNull<DLManagedTensor>),
    Versioned(NonNull<DLManagedTensorVersioned>),
}

// SAFETY: DLPack lets the consumer call the deleter on any thread (producers that need their
// interpreter take its lock themselves).
unsafe impl Send for Managed {}

impl Managed {
    /// Calls the producer's deleter.
    ///
    /// # Safety
    /// Once, when the memory is no longer used.
    unsafe fn delete(self) {
        // SAFETY: the caller's contract; a consumed tensor, alive until its deleter.
        unsafe {
            match self {
                Managed::Unversioned(managed) => {
                    if let Some(deleter) = (*managed.as_ptr()).deleter {
                        deleter(managed.as_ptr());
                    }
                }
                Managed::Versioned(managed) => {
                    if let Some(deleter) = (*managed.as_ptr()).deleter {
                        deleter(managed.as_ptr());
                    }
                }
            }
        }
    }
}

/// The tensor in `capsule`, checked, then consumed (the capsule renamed): the managed tensor,
/// its first element's address and its number of elements. A refused tensor stays in its
/// capsule, whose destructor gives it back.
///
/// # Safety
/// A capsule of a conforming producer.
unsafe fn take_tensor<T: DlpackElement>(
    capsule: &Bound<'_, PyAny>,
    device: Device,
) -> PyResult<(Managed, NonNull<T>, usize)> {
    let raw = capsule.as_ptr();
    let named = |name: &CStr| {
        // SAFETY: any object; a name check has no side effect.
        unsafe { ffi::PyCapsule_IsValid(raw, name.as_ptr()) == 1 }
    };
    let (name, used) = if named(DLTENSOR_VERSIONED) {
        (DLTENSOR_VERSIONED, USED_DLTENSOR_VERSIONED)
    } else if named(DLTENSOR) {
        (DLTENSOR, USED_DLTENSOR)
    } else {
        return Err(exchange_error(format!("__dlpack__ returned {capsule}, not a fresh DLPack capsule")));
    };
    // SAFETY: a valid capsule of that name.
    let pointer = NonNull::new(unsafe { ffi::PyCapsule_GetPointer(raw, name.as_ptr()) })
        .ok_or_else(|| exchange_error("a DLPack capsule holds no tensor".into()))?;
    let managed = if name == DLTENSOR_VERSIONED {
        Managed::Versioned(pointer.cast::<DLManagedTensorVersioned>())
    } else {
        Managed::Unversioned(pointer.cast::<DLManagedTensor>())
    };
    // SAFETY: the producer's tensor, alive until its deleter.
    let (address, len) = unsafe { checked_managed::<T>(&managed, device) }?;
    // SAFETY: a valid capsule; from here on the tensor is ours to delete.
    if unsafe { ffi::PyCapsule_SetName(raw, used.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok((managed, address, len))
}

/// The first element's address and the number of elements of a managed tensor, checked: its
/// version, its flags, and the tensor itself.
///
/// # Safety
/// A producer's tensor, alive until its deleter.
unsafe fn checked_managed<T: DlpackElement>(managed: &Managed, device: Device) -> PyResult<(NonNull<T>, usize)> {
    // SAFETY: the caller's contract.
    let tensor = unsafe {
        match managed {
            Managed::Unversioned(managed) => &(*managed.as_ptr()).dl_tensor,
            Managed::Versioned(managed) => {
                let (version, flags) = ((*managed.as_ptr()).version, (*managed.as_ptr()).flags);
                if version.major != 1 {
                    return Err(exchange_error(format!(
                        "DLPack {}.{}: only 0.x and 1.x are read",
                        version.major, version.minor
                    )));
                }
                if flags & FLAG_READ_ONLY != 0 {
                    return Err(exchange_error(
                        "a read-only DLPack tensor is not imported as a writable buffer".into(),
                    ));
                }
                &(*managed.as_ptr()).dl_tensor
            }
        }
    };
    // SAFETY: the producer's description of its tensor.
    unsafe { checked_tensor::<T>(tensor, device) }
}

/// Refuses `object`'s DLPack device (`__dlpack_device__`, where it has one) unless it is
/// `device`'s memory, before the producer is asked for anything (for another kind of device,
/// PyTorch asserts that the stream is `None`).
fn dlpack_device_checked(object: &Bound<'_, PyAny>, device: Device) -> PyResult<()> {
    if let Ok(dl_device) = object.call_method0(pyo3::intern!(object.py(), "__dlpack_device__")) {
        let (kind, ordinal) = dl_device.extract::<(i32, i32)>()?;
        checked_device(kind, ordinal, device)?;
    }
    Ok(())
}

/// Refuses a DLPack device (`kind`, `ordinal`) other than `device`'s memory.
fn checked_device(kind: i32, ordinal: i32, device: Device) -> PyResult<()> {
    if kind != KDL_CUDA {
        return Err(exchange_error(format!(
            "a DLPack tensor of device type {kind} is not CUDA device memory (kDLCUDA, {KDL_CUDA})"
        )));
    }
    same_device("a tensor is imported on a stream of its device", device, Device::new(ordinal)?)
        .map_err(|mismatch| exchange_error(mismatch.to_string()))?;
    Ok(())
}

/// The first element's address and the number of elements of a compact CUDA tensor of `T`
/// on `device`.
///
/// # Safety
/// `shape` and `strides` (if not null) point to `ndim` values.
unsafe fn checked_tensor<T: DlpackElement>(tensor: &DLTensor, device: Device) -> PyResult<(NonNull<T>, usize)> {
    checked_device(tensor.device.device_type, tensor.device.device_id, device)?;
    if tensor.dtype != T::DTYPE {
        return Err(exchange_error(format!(
            "a DLPack tensor of {:?} is not one of {} ({:?})",
            tensor.dtype,
            std::any::type_name::<T>(),
            T::DTYPE
        )));
    }
    let ndim = usize::try_from(tensor.ndim).map_err(|_| exchange_error("a negative ndim".into()))?;
    let slice = |values: *const i64| {
        if ndim == 0 || values.is_null() {
            &[][..]
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(values, ndim) }
        }
    };
    if ndim > 0 && tensor.shape.is_null() {
        return Err(exchange_error("a DLPack tensor of several dimensions without a shape".into()));
    }
    let shape = slice(tensor.shape);
    let mut len = 1_usize;
    let mut expected = 1_i64;
    for (at, &extent) in shape.iter().enumerate().rev() {
        let extent_len = usize::try_from(extent).map_err(|_| exchange_error("a negative extent".into()))?;
        len = len.checked_mul(extent_len).ok_or(Error::Size("a tensor's element count overflows"))?;
        if !tensor.strides.is_null() && extent != 1 && slice(tensor.strides)[at] != expected {
            return Err(exchange_error("a strided DLPack tensor is not compact: take a contiguous copy".into()));
        }
        expected = expected.saturating_mul(extent);
    }
    if len == 0 {
        return Err(Error::Size("an empty tensor is not imported").into());
    }
    len.checked_mul(size_of::<T>()).ok_or(Error::Size("a tensor's byte size overflows"))?;
    let address = (tensor.data as usize).wrapping_add(tensor.byte_offset as usize);
    if address % align_of::<T>() != 0 {
        return Err(exchange_error("a DLPack tensor's address is not aligned for its element type".into()));
    }
    let address =
        NonNull::new(address as *mut T).ok_or_else(|| exchange_error("a DLPack tensor at address 0".into()))?;
    Ok((address, len))
}
