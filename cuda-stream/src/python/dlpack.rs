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
/// buffers this module exchanges.
pub trait DlpackElement: crate::DeviceCopy + Send + Sync + 'static {
    /// DLPack's name for it.
    const DTYPE: DLDataType;
    /// The CUDA Array Interface's (NumPy's array-interface `typestr`).
    const TYPESTR: &'static str;
}

macro_rules! dlpack_elements {
    ($($ty:ty => $code:expr, $typestr:literal;)*) => {$(
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
