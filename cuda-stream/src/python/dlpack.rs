//! DLPack's C structures (`dlpack.h`, versions 0.8 and 1.x), as the
//! [specification](https://dmlc.github.io/dlpack/latest/c_api.html) lays them out, and the
//! element types this crate exchanges through them.

use std::ffi::{CStr, c_void};

/// `DLDeviceType::kDLCUDA`: memory of a CUDA device (not managed, not page-locked host).
pub const KDL_CUDA: i32 = 2;
/// `DLDataTypeCode::kDLInt`.
const KDL_INT: u8 = 0;
/// `DLDataTypeCode::kDLUInt`.
const KDL_UINT: u8 = 1;
/// `DLDataTypeCode::kDLFloat`.
const KDL_FLOAT: u8 = 2;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write the tensor.
pub const FLAG_READ_ONLY: u64 = 1;

/// The capsule names of the protocol: a fresh one, and the name its consumer gives it.
pub(super) const DLTENSOR: &CStr = c"dltensor";
pub(super) const USED_DLTENSOR: &CStr = c"used_dltensor";
pub(super) const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";
pub(super) const USED_DLTENSOR_VERSIONED: &CStr = c"used_dltensor_versioned";

/// `DLPackVersion`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Changes that break the layout.
    pub major: u32,
    /// Compatible additions.
    pub minor: u32,
}

/// The version this crate produces and reads (1.x; 0.x capsules are read and made too).
pub const DLPACK_VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 1 };

/// `DLDevice`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DLDevice {
    /// `DLDeviceType` ([`KDL_CUDA`] for a CUDA device's memory).
    pub device_type: i32,
    /// The device's ordinal.
    pub device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DLDataType {
    /// `DLDataTypeCode`.
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes (1 for scalars).
    pub lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    /// The data's address (on the device for [`KDL_CUDA`]), before `byte_offset`.
    pub data: *mut c_void,
    /// Where the data is.
    pub device: DLDevice,
    /// The number of dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or null for a compact row-major tensor.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor` (DLPack 0.x, capsule `"dltensor"`).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it no longer uses the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned` (DLPack 1.x, capsule `"dltensor_versioned"`).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The layout's version.
    pub version: DLPackVersion,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it no longer uses the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*`.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// An element type that DLPack and the CUDA Array Interface name: the element types of the
/// buffers this module exchanges. Sealed: a consumer sizes the memory by [`DTYPE`](Self::DTYPE),
/// so a wrong one would make it read and write past the allocation.
pub trait DlpackElement: sealed::Sealed + crate::DeviceCopy + Send + Sync + 'static {
    /// DLPack's name for it.
    const DTYPE: DLDataType;
    /// The CUDA Array Interface's (NumPy's array-interface `typestr`).
    const TYPESTR: &'static str;
}

mod sealed {
    /// Only the element types below.
    pub trait Sealed {}
}

macro_rules! dlpack_elements {
    ($($ty:ty => $code:expr, $typestr:literal;)*) => {$(
        impl sealed::Sealed for $ty {}
        impl DlpackElement for $ty {
            const DTYPE: DLDataType = DLDataType { code: $code, bits: (8 * size_of::<$ty>()) as u8, lanes: 1 };
            const TYPESTR: &'static str = $typestr;
        }
    )*};
}

dlpack_elements! {
    f32 => KDL_FLOAT, "<f4";
    f64 => KDL_FLOAT, "<f8";
    i8 => KDL_INT, "|i1";
    i16 => KDL_INT, "<i2";
    i32 => KDL_INT, "<i4";
    i64 => KDL_INT, "<i8";
    u8 => KDL_UINT, "|u1";
    u16 => KDL_UINT, "<u2";
    u32 => KDL_UINT, "<u4";
    u64 => KDL_UINT, "<u8";
}

/// `DLPackExchangeAPIHeader` (DLPack 1.2 and later): the version of the function table that
/// follows, and older tables of the same producer.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPIHeader {
    /// The table's DLPack version: a consumer reads a table of a major version it knows.
    pub version: DLPackVersion,
    /// An older table of the producer, or null.
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// `DLPackExchangeAPI` (DLPack 1.2 and later), the function table a producer's type offers as
/// `__dlpack_c_exchange_api__` (a capsule named `dlpack_exchange_api`). No function
/// synchronizes: the consumer orders its work after `current_work_stream` itself.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPI {
    /// The table's version.
    pub header: DLPackExchangeAPIHeader,
    /// Allocates a tensor like a prototype (not used by this crate).
    pub managed_tensor_allocator: Option<
        unsafe extern "C" fn(
            *mut DLTensor,
            *mut *mut DLManagedTensorVersioned,
            *mut c_void,
            Option<unsafe extern "C" fn(*mut c_void, *const std::ffi::c_char, *const std::ffi::c_char)>,
        ) -> std::ffi::c_int,
    >,
    /// The producer's tensor of a Python object, owned by the caller (0, or -1 with a Python
    /// exception set).
    pub managed_tensor_from_py_object_no_sync:
        Option<unsafe extern "C" fn(*mut c_void, *mut *mut DLManagedTensorVersioned) -> std::ffi::c_int>,
    /// A Python object of the producer's type made of a tensor (not used by this crate).
    pub managed_tensor_to_py_object_no_sync:
        Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned, *mut *mut c_void) -> std::ffi::c_int>,
    /// A borrowed description of a Python object's tensor (optional; not used by this crate).
    pub dltensor_from_py_object_no_sync: Option<unsafe extern "C" fn(*mut c_void, *mut DLTensor) -> std::ffi::c_int>,
    /// The producer's current stream of a device (PyTorch's `current_stream`): its pending work
    /// is ordered on it.
    pub current_work_stream: Option<unsafe extern "C" fn(i32, i32, *mut *mut c_void) -> std::ffi::c_int>,
}

/// The capsule name of a producer's [`DLPackExchangeAPI`].
pub(super) const EXCHANGE_API: &CStr = c"dlpack_exchange_api";
