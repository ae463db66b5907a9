//! Driver API entry points, fetched once through the runtime
//! ([`cudaGetDriverEntryPointByVersion`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DRIVER__ENTRY__POINT.html)),
//! so that nothing links against `libcuda` directly. Two kinds:
//!
//! * context calls the runtime API has no equivalent for (`cuCtxGetCurrent`, ...);
//! * the hot stream and event operations and the event destroy, which skip the runtime's layer
//!   (10 to 25% of each call, see BENCHMARKS.md). They are used for real stream handles only: the special handles
//!   (0, `cudaStreamLegacy`, `cudaStreamPerThread`) name a stream of the *current* context,
//!   which the runtime binds lazily on a thread's first call and the driver does not (a fresh
//!   thread gets `CUDA_ERROR_INVALID_CONTEXT`), and 0 means per-thread or legacy by the
//!   runtime's compile mode. A real handle carries its context: the driver calls below work
//!   from a thread with no current context, or another device's (probed on CUDA 13.0).
//!
//! Errors keep the runtime's shape: [`Error::Cuda`] under the name of the runtime call the
//! operation stands for, with the code's runtime number. The driver's `CUresult` and the
//! runtime's `cudaError_t` share their numbers for every code these calls return (not ready
//! 600, invalid handle 400, capture errors 900 to 907, sticky faults 7xx: compared side by
//! side on the GPU by `tests/ffi/driver_paths.rs`); [`runtime_code`] is where a difference would be
//! mapped. A driver call leaves the runtime's last error untouched.

use crate::ffi::error::{Error, Result, check, check_code};
use crate::sys;
use std::ffi::{CStr, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// A driver context handle (`CUcontext`); null means "no context".
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Context(pub(crate) *mut c_void);

// SAFETY: a driver context handle is a value any thread may pass to the driver (making it
// current is per thread); the crate shares only primary contexts, retained for the process.
unsafe impl Send for Context {}
// SAFETY: as above: no method reads through the pointer.
unsafe impl Sync for Context {}

// The signatures of `cuda.h` (CUDA 12.0 and later), written with the runtime's handle types,
// which are the same C types (`cudaStream_t` is `CUstream`, ...). `CUresult` and the status a
// stream callback receives are C enums like `cudaError_t`: `c_int` here.
type CtxGetCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type CtxPushCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxPopCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type StreamGetCtx = unsafe extern "C" fn(sys::cudaStream_t, *mut *mut c_void) -> c_int;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type PrimaryCtxGetState = unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> c_int;
type PrimaryCtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type StreamGetPriority = unsafe extern "C" fn(sys::cudaStream_t, *mut c_int) -> c_int;
type StreamGetFlags = unsafe extern "C" fn(sys::cudaStream_t, *mut c_uint) -> c_int;
type OnStream = unsafe extern "C" fn(sys::cudaStream_t) -> c_int;
type OnEvent = unsafe extern "C" fn(sys::cudaEvent_t) -> c_int;
type StreamIsCapturing = unsafe extern "C" fn(sys::cudaStream_t, *mut sys::cudaStreamCaptureStatus) -> c_int;
type EventRecord = unsafe extern "C" fn(sys::cudaEvent_t, sys::cudaStream_t) -> c_int;
type EventRecordWithFlags = unsafe extern "C" fn(sys::cudaEvent_t, sys::cudaStream_t, c_uint) -> c_int;
type StreamWaitEvent = unsafe extern "C" fn(sys::cudaStream_t, sys::cudaEvent_t, c_uint) -> c_int;
type StreamAddCallback =
    unsafe extern "C" fn(sys::cudaStream_t, sys::cudaStreamCallback_t, *mut c_void, c_uint) -> c_int;
type GraphLaunch = unsafe extern "C" fn(sys::cudaGraphExec_t, sys::cudaStream_t) -> c_int;
type ThreadExchangeCaptureMode = unsafe extern "C" fn(*mut sys::cudaStreamCaptureMode) -> c_int;
type MemAllocAsync = unsafe extern "C" fn(*mut u64, usize, sys::cudaStream_t) -> c_int;
type MemAllocFromPoolAsync = unsafe extern "C" fn(*mut u64, usize, sys::cudaMemPool_t, sys::cudaStream_t) -> c_int;
type MemFreeAsync = unsafe extern "C" fn(u64, sys::cudaStream_t) -> c_int;

/// The entry points.
struct Driver {
    ctx_get_current: CtxGetCurrent,
    ctx_push_current: CtxPushCurrent,
    ctx_pop_current: CtxPopCurrent,
    ctx_get_device: CtxGetDevice,
    stream_get_ctx: StreamGetCtx,
    device_get: DeviceGet,
    primary_ctx_get_state: PrimaryCtxGetState,
    primary_ctx_retain: PrimaryCtxRetain,
    stream_get_priority: StreamGetPriority,
    stream_get_flags: StreamGetFlags,
    stream_query: OnStream,
    stream_synchronize: OnStream,
    stream_is_capturing: StreamIsCapturing,
    event_record: EventRecord,
    event_record_with_flags: EventRecordWithFlags,
    stream_wait_event: StreamWaitEvent,
    event_query: OnEvent,
    event_synchronize: OnEvent,
    event_destroy: OnEvent,
    stream_add_callback: StreamAddCallback,
    graph_launch: GraphLaunch,
    thread_exchange_capture_mode: ThreadExchangeCaptureMode,
    mem_alloc_async: MemAllocAsync,
    mem_alloc_from_pool_async: MemAllocFromPoolAsync,
    mem_free_async: MemFreeAsync,
}

/// Fetches one entry point as the function type `$ty`.
macro_rules! entry_point {
    ($symbol:literal as $ty:ty) => {
        // SAFETY: the symbol has the signature of `$ty` in cuda.h as of CUDA 12.0, the version
        // asked for; both are function pointers.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(entry($symbol)?) }
    };
}

#[inline(always)]
fn driver() -> Result<&'static Driver> {
    static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            Ok(Driver {
                ctx_get_current: entry_point!(c"cuCtxGetCurrent" as CtxGetCurrent),
                ctx_push_current: entry_point!(c"cuCtxPushCurrent" as CtxPushCurrent),
                ctx_pop_current: entry_point!(c"cuCtxPopCurrent" as CtxPopCurrent),
                ctx_get_device: entry_point!(c"cuCtxGetDevice" as CtxGetDevice),
                stream_get_ctx: entry_point!(c"cuStreamGetCtx" as StreamGetCtx),
                device_get: entry_point!(c"cuDeviceGet" as DeviceGet),
                primary_ctx_get_state: entry_point!(c"cuDevicePrimaryCtxGetState" as PrimaryCtxGetState),
                primary_ctx_retain: entry_point!(c"cuDevicePrimaryCtxRetain" as PrimaryCtxRetain),
                stream_get_priority: entry_point!(c"cuStreamGetPriority" as StreamGetPriority),
                stream_get_flags: entry_point!(c"cuStreamGetFlags" as StreamGetFlags),
                stream_query: entry_point!(c"cuStreamQuery" as OnStream),
                stream_synchronize: entry_point!(c"cuStreamSynchronize" as OnStream),
                stream_is_capturing: entry_point!(c"cuStreamIsCapturing" as StreamIsCapturing),
                event_record: entry_point!(c"cuEventRecord" as EventRecord),
                event_record_with_flags: entry_point!(c"cuEventRecordWithFlags" as EventRecordWithFlags),
                stream_wait_event: entry_point!(c"cuStreamWaitEvent" as StreamWaitEvent),
                event_query: entry_point!(c"cuEventQuery" as OnEvent),
                event_synchronize: entry_point!(c"cuEventSynchronize" as OnEvent),
                event_destroy: entry_point!(c"cuEventDestroy" as OnEvent),
                stream_add_callback: entry_point!(c"cuStreamAddCallback" as StreamAddCallback),
                graph_launch: entry_point!(c"cuGraphLaunch" as GraphLaunch),
                thread_exchange_capture_mode: entry_point!(
                    c"cuThreadExchangeStreamCaptureMode" as ThreadExchangeCaptureMode
                ),
                mem_alloc_async: entry_point!(c"cuMemAllocAsync" as MemAllocAsync),
                mem_alloc_from_pool_async: entry_point!(c"cuMemAllocFromPoolAsync" as MemAllocFromPoolAsync),
                mem_free_async: entry_point!(c"cuMemFreeAsync" as MemFreeAsync),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn entry(symbol: &CStr) -> Result<*mut c_void> {
    entry_of_version(symbol, 12000)
}

/// The entry point `symbol` with its signature as of CUDA `version` (`12040` for 12.4).
fn entry_of_version(symbol: &CStr, version: c_uint) -> Result<*mut c_void> {
    let mut function: *mut c_void = std::ptr::null_mut();
    let mut status = sys::cudaDriverEntryPointQueryResult::cudaDriverEntryPointSuccess;
    // SAFETY: `symbol` is NUL-terminated; both out-pointers are valid.
    let code =
        unsafe { sys::cudaGetDriverEntryPointByVersion(symbol.as_ptr(), &mut function, version, 0, &mut status) };
    check(code, "cudaGetDriverEntryPointByVersion")?;
    if function.is_null() {
        return Err(Error::Cuda {
            api: "cudaGetDriverEntryPointByVersion",
            code: crate::CudaCode(sys::cudaError::cudaErrorSymbolNotFound.0 as i32),
        });
    }
    Ok(function)
}

/// The runtime's number for a driver result code. The two enums agree on every code the calls
/// here return (see the module docs), so this is the identity; it is the one place to map a
/// code that would differ.
#[inline(always)]
pub(crate) fn runtime_code(code: c_int) -> sys::cudaError_t {
    sys::cudaError(code as u32)
}

#[inline(always)]
fn check_driver(code: c_int, api: &'static str) -> Result<()> {
    check_code(runtime_code(code), api)
}

/// Like `check_driver`, but not ready is `Ok(false)` and success `Ok(true)`.
#[inline(always)]
fn check_driver_ready(code: c_int, api: &'static str) -> Result<bool> {
    if runtime_code(code) == sys::cudaError::cudaErrorNotReady {
        Ok(false)
    } else {
        check_driver(code, api).map(|()| true)
    }
}

type FuncGetParamInfo = unsafe extern "C" fn(sys::cudaFunction_t, usize, *mut usize, *mut usize) -> c_int;

/// The byte size of each parameter of a kernel, in order (`cuFuncGetParamInfo`, CUDA 12.4 and
/// later drivers); `None` where the driver has no such call.
pub(crate) fn kernel_param_sizes(function: sys::cudaFunction_t) -> Result<Option<Vec<usize>>> {
    static PARAM_INFO: OnceLock<Option<FuncGetParamInfo>> = OnceLock::new();
    let Some(param_info) = *PARAM_INFO.get_or_init(|| {
        entry_of_version(c"cuFuncGetParamInfo", 12040)
            .ok()
            // SAFETY: the symbol has this signature in cuda.h as of CUDA 12.4, the version
            // asked for; both are function pointers.
            .map(|entry| unsafe { std::mem::transmute::<*mut c_void, FuncGetParamInfo>(entry) })
    }) else {
        return Ok(None);
    };
    let mut sizes = Vec::new();
    // A kernel's parameters fit in 32 KiB (CUDA 12.1 and later), so at most 32,768 of them.
    while sizes.len() <= 32 * 1024 {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `function` is a loaded kernel (the caller's); the out-pointers are valid.
        let code = unsafe { param_info(function, sizes.len(), &mut offset, &mut size) };
        if runtime_code(code) == sys::cudaError::cudaErrorInvalidValue {
            // Past the last parameter.
            return Ok(Some(sizes));
        }
        check_driver(code, "cuFuncGetParamInfo")?;
        sizes.push(size);
    }
    Ok(None)
}

/// A device resource (`CUdevResource`, resource ABI version 1 of CUDA 12.4 and later): its
/// type, the driver's internal bytes, and the SM description of an SM resource.
#[repr(C)]
#[derive(Copy, Clone)]
pub(crate) struct DevResource {
    kind: c_uint,
    internal: [u8; 92],
    /// For an SM resource: how many SMs, the smallest partition, the co-scheduling alignment.
    pub(crate) sm: [c_uint; 3],
    oversize: [u8; 48 - 12],
}

/// `CU_DEV_RESOURCE_TYPE_SM`.
const RESOURCE_TYPE_SM: c_uint = 1;

impl DevResource {
    fn empty() -> DevResource {
        DevResource { kind: 0, internal: [0; 92], sm: [0; 3], oversize: [0; 36] }
    }
}

type DeviceGetDevResource = unsafe extern "C" fn(c_int, *mut DevResource, c_uint) -> c_int;
type DevSmResourceSplitByCount =
    unsafe extern "C" fn(*mut DevResource, *mut c_uint, *const DevResource, *mut DevResource, c_uint, c_uint) -> c_int;
type DevResourceGenerateDesc = unsafe extern "C" fn(*mut *mut c_void, *mut DevResource, c_uint) -> c_int;
type GreenCtxCreate = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_int, c_uint) -> c_int;
type GreenCtxDestroy = unsafe extern "C" fn(*mut c_void) -> c_int;
type GreenCtxStreamCreate = unsafe extern "C" fn(*mut sys::cudaStream_t, *mut c_void, c_uint, c_int) -> c_int;

/// The green-context entry points (CUDA 12.4 and later drivers).
struct GreenDriver {
    device_get_dev_resource: DeviceGetDevResource,
    split_by_count: DevSmResourceSplitByCount,
    generate_desc: DevResourceGenerateDesc,
    create: GreenCtxCreate,
    destroy: GreenCtxDestroy,
    stream_create: GreenCtxStreamCreate,
}

fn green_driver() -> Result<&'static GreenDriver> {
    static GREEN: OnceLock<Result<GreenDriver>> = OnceLock::new();
    // Each entry point as of the version that introduced it (`cuGreenCtxStreamCreate` came in
    // CUDA 12.5, the others in 12.4): asking a symbol for an older version than its first finds
    // nothing. A missing one is `cudaErrorNotSupported` under its own name.
    macro_rules! green_entry {
        ($symbol:literal as $ty:ty, $version:literal) => {
            match entry_of_version($symbol, $version) {
                // SAFETY: the symbol has the signature of `$ty` in cuda.h as of `$version`, the
                // version asked for; both are function pointers.
                Ok(function) => unsafe { std::mem::transmute::<*mut c_void, $ty>(function) },
                Err(_) => {
                    return Err(Error::Cuda {
                        api: match $symbol.to_str() {
                            Ok(name) => name,
                            Err(_) => "cuGreenCtxCreate",
                        },
                        code: crate::CudaCode(sys::cudaError::cudaErrorNotSupported.0 as i32),
                    });
                }
            }
        };
    }
    GREEN
        .get_or_init(|| {
            Ok(GreenDriver {
                device_get_dev_resource: green_entry!(c"cuDeviceGetDevResource" as DeviceGetDevResource, 12040),
                split_by_count: green_entry!(c"cuDevSmResourceSplitByCount" as DevSmResourceSplitByCount, 12040),
                generate_desc: green_entry!(c"cuDevResourceGenerateDesc" as DevResourceGenerateDesc, 12040),
                create: green_entry!(c"cuGreenCtxCreate" as GreenCtxCreate, 12040),
                destroy: green_entry!(c"cuGreenCtxDestroy" as GreenCtxDestroy, 12040),
                stream_create: green_entry!(c"cuGreenCtxStreamCreate" as GreenCtxStreamCreate, 12050),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The SMs of device `ordinal` as one resource (`cuDeviceGetDevResource`).
pub(crate) fn device_sm_resource(ordinal: c_int) -> Result<DevResource> {
    let green = green_driver()?;
    let mut resource = DevResource::empty();
    check_driver(
        // SAFETY: a valid out-pointer of the driver's layout; a device ordinal is a `CUdevice`.
        unsafe { (green.device_get_dev_resource)(ordinal, &mut resource, RESOURCE_TYPE_SM) },
        "cuDeviceGetDevResource",
    )?;
    Ok(resource)
}

/// How many groups of at least `min_sms` SMs `all` splits into (`cuDevSmResourceSplitByCount`
/// without results).
pub(crate) fn sm_groups_possible(all: &DevResource, min_sms: c_uint) -> Result<c_uint> {
    let green = green_driver()?;
    let mut groups: c_uint = 0;
    check_driver(
        // SAFETY: a null result asks for the count; `all` is an SM resource of the driver's.
        unsafe { (green.split_by_count)(std::ptr::null_mut(), &mut groups, all, std::ptr::null_mut(), 0, min_sms) },
        "cuDevSmResourceSplitByCount",
    )?;
    Ok(groups)
}

/// `count` groups of at least `min_sms` SMs of `all` (`cuDevSmResourceSplitByCount`).
pub(crate) fn split_sms(all: &DevResource, min_sms: c_uint, count: c_uint) -> Result<Vec<DevResource>> {
    let green = green_driver()?;
    let mut groups = vec![DevResource::empty(); count as usize];
    let mut made = count;
    check_driver(
        // SAFETY: `groups` has room for `made` resources; `all` is an SM resource of the driver's.
        unsafe { (green.split_by_count)(groups.as_mut_ptr(), &mut made, all, std::ptr::null_mut(), 0, min_sms) },
        "cuDevSmResourceSplitByCount",
    )?;
    groups.truncate(made as usize);
    Ok(groups)
}

/// A green context of device `ordinal` with the SMs of `group` (`cuDevResourceGenerateDesc`,
/// then `cuGreenCtxCreate` with its required default stream). The caller destroys it with
/// [`green_context_destroy`].
pub(crate) fn green_context_create(ordinal: c_int, group: &DevResource) -> Result<*mut c_void> {
    let green = green_driver()?;
    let mut group = *group;
    let mut desc: *mut c_void = std::ptr::null_mut();
    // SAFETY: one resource of a split of this device; a valid out-pointer.
    check_driver(unsafe { (green.generate_desc)(&mut desc, &mut group, 1) }, "cuDevResourceGenerateDesc")?;
    let mut context: *mut c_void = std::ptr::null_mut();
    // SAFETY: a descriptor of this device's resources; `CU_GREEN_CTX_DEFAULT_STREAM` (1) is
    // required; a valid out-pointer.
    check_driver(unsafe { (green.create)(&mut context, desc, ordinal, 1) }, "cuGreenCtxCreate")?;
    Ok(context)
}

/// Destroys a green context (`cuGreenCtxDestroy`).
///
/// # Safety
/// `context` is a live green context that nothing uses after this: no stream of it is left.
pub(crate) unsafe fn green_context_destroy(context: *mut c_void) -> Result<()> {
    let green = green_driver()?;
    // SAFETY: the caller's contract.
    check_driver(unsafe { (green.destroy)(context) }, "cuGreenCtxDestroy")
}

/// A non-blocking stream of a green context (`cuGreenCtxStreamCreate`).
///
/// # Safety
/// `context` is a live green context.
pub(crate) unsafe fn green_stream_create(context: *mut c_void, priority: c_int) -> Result<sys::cudaStream_t> {
    let green = green_driver()?;
    let mut stream: sys::cudaStream_t = std::ptr::null_mut();
    // SAFETY: a live green context (the caller's); `CU_STREAM_NON_BLOCKING` (1) is required.
    check_driver(unsafe { (green.stream_create)(&mut stream, context, 1, priority) }, "cuGreenCtxStreamCreate")?;
    Ok(stream)
}

/// The calling thread's current context (`cuCtxGetCurrent`), null when there is none.
pub(crate) fn current_context() -> Result<Context> {
    let mut context: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    check_driver(unsafe { (driver()?.ctx_get_current)(&mut context) }, "cuCtxGetCurrent")?;
    Ok(Context(context))
}

/// Pushes `context` onto the calling thread's context stack (`cuCtxPushCurrent`): it is current
/// until [`pop_context`].
pub(crate) fn push_context(context: Context) -> Result<()> {
    // SAFETY: the caller passes a live context: a device's primary context (retained for the
    // life of the process by `primary_context`) or a live stream's own.
    check_driver(unsafe { (driver()?.ctx_push_current)(context.0) }, "cuCtxPushCurrent")
}

/// Pops the calling thread's current context off its stack (`cuCtxPopCurrent`): what was
/// current before the matching [`push_context`] is current again, as the driver keeps it.
pub(crate) fn pop_context() -> Result<()> {
    let mut popped: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    check_driver(unsafe { (driver()?.ctx_pop_current)(&mut popped) }, "cuCtxPopCurrent")
}

/// The primary context of the device with this runtime ordinal, retained once for the life of
/// the process (`cuDevicePrimaryCtxRetain`; never released, so the handle stays valid even
/// if every other user releases it). Initializes the context if nothing has yet.
pub(crate) fn primary_context(ordinal: i32) -> Result<Context> {
    let driver = driver()?;
    let mut device: c_int = 0;
    // SAFETY: a valid out-pointer; an invalid ordinal is reported as an error.
    check_driver(unsafe { (driver.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
    let mut context: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; `device` came from cuDeviceGet.
    check_driver(unsafe { (driver.primary_ctx_retain)(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
    Ok(Context(context))
}

/// `cuStreamGetPriority`, as `cudaStreamGetPriority`: allowed during any capture of the stream,
/// and it binds no context to the calling thread.
pub(crate) fn stream_priority(stream: sys::cudaStream_t) -> Result<c_int> {
    let mut priority: c_int = 0;
    // SAFETY: the caller passes a live, real stream handle; a valid out-pointer.
    check_driver(unsafe { (driver()?.stream_get_priority)(stream, &mut priority) }, "cudaStreamGetPriority")?;
    Ok(priority)
}

/// `cuStreamGetFlags`, as `cudaStreamGetFlags`. CUDA invalidates any capture of the stream in
/// progress for this call, whatever the capture mode (probed on CUDA 13.0): callers make sure
/// the stream is not capturing.
pub(crate) fn stream_flags(stream: sys::cudaStream_t) -> Result<c_uint> {
    let mut flags: c_uint = 0;
    // SAFETY: the caller passes a live, real stream handle; a valid out-pointer.
    check_driver(unsafe { (driver()?.stream_get_flags)(stream, &mut flags) }, "cudaStreamGetFlags")?;
    Ok(flags)
}

/// The context a real stream handle belongs to (`cuStreamGetCtx`; leaves a capture intact).
pub(crate) fn stream_context(stream: sys::cudaStream_t) -> Result<Context> {
    let mut context: *mut c_void = std::ptr::null_mut();
    // SAFETY: the caller passes a live, real stream handle; a valid out-pointer.
    check_driver(unsafe { (driver()?.stream_get_ctx)(stream, &mut context) }, "cuStreamGetCtx")?;
    Ok(Context(context))
}

/// The runtime ordinal of the device of a live context (a stream's, from [`stream_context`]):
/// the context pushed for `cuCtxGetDevice` and popped again, and that `CUdevice` matched
/// against each ordinal's (`cuDeviceGet`). None of these disturbs a capture of the stream,
/// where `cudaStreamGetDevice` would invalidate it.
pub(crate) fn context_device_ordinal(context: Context) -> Result<i32> {
    let driver = driver()?;
    // Popped below before anything else runs here.
    push_context(context)?;
    let mut device: c_int = 0;
    // SAFETY: a valid out-pointer; the stream's context is current.
    let read = check_driver(unsafe { (driver.ctx_get_device)(&mut device) }, "cuCtxGetDevice");
    read.and(pop_context())?;
    let mut count: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { sys::cudaGetDeviceCount(&mut count) }, "cudaGetDeviceCount")?;
    for ordinal in 0..count {
        let mut candidate: c_int = 0;
        // SAFETY: a valid out-pointer and an ordinal below the count.
        check_driver(unsafe { (driver.device_get)(&mut candidate, ordinal) }, "cuDeviceGet")?;
        if candidate == device {
            return Ok(ordinal);
        }
    }
    Err(Error::Cuda { api: "cuCtxGetDevice", code: crate::CudaCode(sys::cudaError::cudaErrorInvalidDevice.0 as i32) })
}

/// The flags of the device's primary context and whether it is active
/// (`cuDevicePrimaryCtxGetState`). The flags are those a context created now would get, or
/// the active one has: `cudaDeviceSchedule*` in the low bits (the driver's `CU_CTX_SCHED_*`
/// share their values).
pub(crate) fn primary_context_state(ordinal: i32) -> Result<(c_uint, bool)> {
    let driver = driver()?;
    let mut device: c_int = 0;
    // SAFETY: a valid out-pointer; an invalid ordinal is reported as an error.
    check_driver(unsafe { (driver.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
    let (mut flags, mut active): (c_uint, c_int) = (0, 0);
    // SAFETY: valid out-pointers; `device` came from cuDeviceGet.
    let code = unsafe { (driver.primary_ctx_get_state)(device, &mut flags, &mut active) };
    check_driver(code, "cuDevicePrimaryCtxGetState")?;
    Ok((flags, active != 0))
}

/// `cuDevicePrimaryCtxSetFlags` for the device of `ordinal` (rare: the entry point is fetched
/// at the call).
pub(crate) fn primary_context_set_flags(ordinal: i32, flags: c_uint) -> Result<()> {
    let driver = driver()?;
    let mut device: c_int = 0;
    // SAFETY: a valid out-pointer; an invalid ordinal is reported as an error.
    check_driver(unsafe { (driver.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
    // SAFETY: `cuDevicePrimaryCtxSetFlags` as of CUDA 12.0, the version asked for (`_v2`),
    // takes a device and flags and returns a CUresult; both are function pointers.
    let set = unsafe {
        std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int, c_uint) -> c_int>(entry(
            c"cuDevicePrimaryCtxSetFlags",
        )?)
    };
    // SAFETY: `device` came from cuDeviceGet; flags are plain bits, checked by the driver.
    check_driver(unsafe { set(device, flags) }, "cudaSetDeviceFlags")
}

// The hot operations. Each takes a real handle (never 0, `cudaStreamLegacy` or
// `cudaStreamPerThread`: see the module docs) and reports errors under the runtime call's name.

/// `cuStreamQuery`, as `cudaStreamQuery`: `Ok(false)` while work is pending.
#[inline]
pub(crate) fn stream_query(stream: sys::cudaStream_t) -> Result<bool> {
    // SAFETY: the caller passes a live, real stream handle.
    check_driver_ready(unsafe { (driver()?.stream_query)(stream) }, "cudaStreamQuery")
}

/// `cuStreamSynchronize`, as `cudaStreamSynchronize`.
#[inline]
pub(crate) fn stream_synchronize(stream: sys::cudaStream_t) -> Result<()> {
    // SAFETY: the caller passes a live, real stream handle.
    check_driver(unsafe { (driver()?.stream_synchronize)(stream) }, "cudaStreamSynchronize")
}

/// `cuStreamIsCapturing`, as `cudaStreamIsCapturing`.
#[inline]
pub(crate) fn stream_is_capturing(stream: sys::cudaStream_t) -> Result<sys::cudaStreamCaptureStatus> {
    let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
    // SAFETY: the caller passes a live, real stream handle; `status` is a valid out-pointer
    // (`CUstreamCaptureStatus` has the runtime enum's values).
    check_driver(unsafe { (driver()?.stream_is_capturing)(stream, &mut status) }, "cudaStreamIsCapturing")?;
    Ok(status)
}

/// `cuEventRecord`, or `cuEventRecordWithFlags` with flags, as `cudaEventRecord`.
#[inline]
pub(crate) fn event_record(event: sys::cudaEvent_t, stream: sys::cudaStream_t, flags: c_uint) -> Result<()> {
    let driver = driver()?;
    // SAFETY: the caller passes live handles, a real stream; `flags` is one of CUDA's record
    // flags (the runtime's have the driver's values). Without flags, the plain record: the
    // driver's shorter path, as the raw floor calls it.
    let code = unsafe {
        if flags == 0 {
            (driver.event_record)(event, stream)
        } else {
            (driver.event_record_with_flags)(event, stream, flags)
        }
    };
    check_driver(code, "cudaEventRecord")
}

/// `cuStreamWaitEvent`, as `cudaStreamWaitEvent`.
#[inline]
pub(crate) fn stream_wait_event(stream: sys::cudaStream_t, event: sys::cudaEvent_t, flags: c_uint) -> Result<()> {
    // SAFETY: the caller passes live handles, a real stream; `flags` is one of CUDA's wait
    // flags (the runtime's have the driver's values).
    check_driver(unsafe { (driver()?.stream_wait_event)(stream, event, flags) }, "cudaStreamWaitEvent")
}

/// `cuEventRecord` of `event` on `recorded`, then `cuStreamWaitEvent` of `waiting` on it: a
/// cross-stream dependency in two driver calls, the driver table fetched once.
#[inline]
pub(crate) fn record_then_wait(
    event: sys::cudaEvent_t,
    recorded: sys::cudaStream_t,
    waiting: sys::cudaStream_t,
) -> Result<()> {
    let driver = driver()?;
    // SAFETY: the caller passes a live event and two real streams of its context.
    check_driver(unsafe { (driver.event_record)(event, recorded) }, "cudaEventRecord")?;
    // SAFETY: as above; no flags.
    check_driver(unsafe { (driver.stream_wait_event)(waiting, event, 0) }, "cudaStreamWaitEvent")
}

/// `cuThreadExchangeStreamCaptureMode`, as `cudaThreadExchangeStreamCaptureMode`: sets the
/// calling thread's capture interaction mode and returns the one it had. Unlike the runtime's,
/// it binds no context to the thread.
pub(crate) fn thread_exchange_capture_mode(mode: sys::cudaStreamCaptureMode) -> Result<sys::cudaStreamCaptureMode> {
    let (mut mode, exchange) = (mode, driver()?.thread_exchange_capture_mode);
    // SAFETY: a valid in/out pointer holding one of CUDA's modes (the driver's enum has the
    // runtime's values); the driver writes back the previous mode.
    let code = unsafe { exchange(&mut mode) };
    check_driver(code, "cudaThreadExchangeStreamCaptureMode")?;
    Ok(mode)
}

/// `cuMemAllocAsync`, or `cuMemAllocFromPoolAsync` from `pool`, as `cudaMallocAsync` and
/// `cudaMallocFromPoolAsync`: `bytes` on `stream`'s device, in its order.
pub(crate) fn mem_alloc_async(
    bytes: usize,
    pool: Option<sys::cudaMemPool_t>,
    stream: sys::cudaStream_t,
) -> Result<*mut c_void> {
    let driver = driver()?;
    let mut address: u64 = 0;
    // SAFETY: a valid out-pointer; the caller passes a live real stream (which carries its
    // context) and a live pool of its device.
    let (code, api) = unsafe {
        match pool {
            None => ((driver.mem_alloc_async)(&mut address, bytes, stream), "cudaMallocAsync"),
            Some(pool) => {
                ((driver.mem_alloc_from_pool_async)(&mut address, bytes, pool, stream), "cudaMallocFromPoolAsync")
            }
        }
    };
    check_driver(code, api)?;
    Ok(address as *mut c_void)
}

/// `cuMemFreeAsync`, as `cudaFreeAsync`.
///
/// # Safety
/// `address` must be a stream-ordered allocation nothing else frees, and every use of it must
/// be ordered before this point of `stream`, a live real stream.
pub(crate) unsafe fn mem_free_async(address: *mut c_void, stream: sys::cudaStream_t) -> Result<()> {
    let free = driver()?.mem_free_async;
    // SAFETY: the caller's contract.
    check_driver(unsafe { free(address as u64, stream) }, "cudaFreeAsync")
}

/// `cuEventQuery`, as `cudaEventQuery`: `Ok(false)` while the recorded work is pending.
#[inline]
pub(crate) fn event_query(event: sys::cudaEvent_t) -> Result<bool> {
    // SAFETY: the caller passes a live event, which carries its context.
    check_driver_ready(unsafe { (driver()?.event_query)(event) }, "cudaEventQuery")
}

/// `cuEventQuery` in two steps, for a caller that must make the call alone inside a short
/// region (a fast call of [`uncaptured_calls`](crate::call::uncaptured_calls)): the entry point
/// is looked up before, and the code is turned into an answer after.
#[derive(Copy, Clone)]
pub(crate) struct EventQuery {
    query: OnEvent,
    event: sys::cudaEvent_t,
}

/// Looks up `cuEventQuery` for `event` (see [`EventQuery`]).
#[inline(always)]
pub(crate) fn prepare_event_query(event: sys::cudaEvent_t) -> Result<EventQuery> {
    Ok(EventQuery { query: driver()?.event_query, event })
}

impl EventQuery {
    /// The driver's code for the query.
    #[inline(always)]
    pub(crate) fn call(self) -> c_int {
        // SAFETY: the preparer passed a live event, which carries its context.
        unsafe { (self.query)(self.event) }
    }

    /// [`event_query`]'s answer for `code`.
    #[inline(always)]
    pub(crate) fn answer(code: c_int) -> Result<bool> {
        check_driver_ready(code, "cudaEventQuery")
    }
}

/// `cuEventSynchronize`, as `cudaEventSynchronize`.
#[inline]
pub(crate) fn event_synchronize(event: sys::cudaEvent_t) -> Result<()> {
    // SAFETY: the caller passes a live event, which carries its context.
    check_driver(unsafe { (driver()?.event_synchronize)(event) }, "cudaEventSynchronize")
}

/// `cuProfilerStart`, as `cudaProfilerStart`, on the current context.
pub(crate) fn profiler_start() -> Result<()> {
    profiler_call(c"cuProfilerStart", "cudaProfilerStart")
}

/// `cuProfilerStop`, as `cudaProfilerStop`, on the current context.
pub(crate) fn profiler_stop() -> Result<()> {
    profiler_call(c"cuProfilerStop", "cudaProfilerStop")
}

/// Calls the profiler entry point `symbol`, `CUresult (void)`, fetched at each call (they are
/// rare: not kept in the table every process fetches).
fn profiler_call(symbol: &CStr, api: &'static str) -> Result<()> {
    // SAFETY: `cuProfilerStart` and `cuProfilerStop` take nothing and return a CUresult; both
    // are function pointers.
    let function = unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(entry(symbol)?) };
    // SAFETY: no arguments; it acts on the current context, which the caller made current.
    check_driver(unsafe { function() }, api)
}

/// `cuEventDestroy`, as `cudaEventDestroy` (works from a thread with no current context).
///
/// # Safety
/// `event` must be live and owned by the caller, and not used after this.
#[inline]
pub(crate) unsafe fn event_destroy(event: sys::cudaEvent_t) -> Result<()> {
    // SAFETY: the caller's contract.
    check_driver(unsafe { (driver()?.event_destroy)(event) }, "cudaEventDestroy")
}

/// `cuStreamAddCallback`, as `cudaStreamAddCallback`. The callback receives a `CUresult`, with
/// the numbers of `cudaError_t`.
///
/// # Safety
/// `callback` must honour the contract of `data`, as for `cudaStreamAddCallback`.
#[inline]
pub(crate) unsafe fn stream_add_callback(
    stream: sys::cudaStream_t,
    callback: sys::cudaStreamCallback_t,
    data: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller's contract; flags must be 0.
    check_driver(unsafe { (driver()?.stream_add_callback)(stream, callback, data, 0) }, "cudaStreamAddCallback")
}

/// `cuGraphLaunch`, as `cudaGraphLaunch`.
///
/// # Safety
/// `exec` must be live and not in use by another thread.
#[inline]
pub(crate) unsafe fn graph_launch(exec: sys::cudaGraphExec_t, stream: sys::cudaStream_t) -> Result<()> {
    // SAFETY: the caller's contract, and a real stream handle.
    check_driver(unsafe { (driver()?.graph_launch)(exec, stream) }, "cudaGraphLaunch")
}

// Stream memory operations
// ([CUDA_MEMOP](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)): no
// runtime equivalent, so errors carry the driver call's own name. Fetched by version 12000,
// which gives the `_v2` entry points (`cuStreamWaitValue32_v2`, ...): these refuse the v1 flag
// `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER` (`CUDA_ERROR_INVALID_VALUE`, probed on driver 580),
// and take the batch operation `CU_STREAM_MEM_OP_BARRIER`, which v1 lacks.

type StreamWaitValue32 = unsafe extern "C" fn(sys::cudaStream_t, u64, u32, c_uint) -> c_int;
type StreamWaitValue64 = unsafe extern "C" fn(sys::cudaStream_t, u64, u64, c_uint) -> c_int;
type StreamBatchMemOp = unsafe extern "C" fn(sys::cudaStream_t, c_uint, *mut MemOpParams, c_uint) -> c_int;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// `CU_STREAM_WAIT_VALUE_GEQ`: wait until `(int32_t)(*addr - value) >= 0` (cyclic).
pub(crate) const WAIT_VALUE_GEQ: c_uint = 0x0;
/// `CU_STREAM_WAIT_VALUE_EQ`: wait until `*addr == value`.
pub(crate) const WAIT_VALUE_EQ: c_uint = 0x1;
/// `CU_STREAM_WAIT_VALUE_AND`: wait until `(*addr & value) != 0`.
pub(crate) const WAIT_VALUE_AND: c_uint = 0x2;
/// `CU_STREAM_WAIT_VALUE_NOR`: wait until `~(*addr | value) != 0`.
pub(crate) const WAIT_VALUE_NOR: c_uint = 0x3;
/// `CU_STREAM_WAIT_VALUE_FLUSH`: follow the wait with a flush of remote writes.
pub(crate) const WAIT_VALUE_FLUSH: c_uint = 1 << 30;
/// `CU_STREAM_MEMORY_BARRIER_TYPE_SYS`.
pub(crate) const MEMORY_BARRIER_SYS: c_uint = 0x0;
/// `CU_STREAM_MEMORY_BARRIER_TYPE_GPU`.
pub(crate) const MEMORY_BARRIER_GPU: c_uint = 0x1;
/// `CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES`.
pub(crate) const ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: c_int = 98;
/// `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS`.
pub(crate) const ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: c_int = 122;
/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR`.
pub(crate) const ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: c_int = 123;
/// The most operations one `cuStreamBatchMemOp` takes: the count "must be less than 256"
/// (256 is `CUDA_ERROR_INVALID_VALUE`, probed on driver 580).
pub(crate) const MAX_BATCH_MEM_OPS: usize = 255;

/// `CUstreamBatchMemOpType`.
const MEM_OP_WAIT_VALUE_32: u32 = 1;
const MEM_OP_WRITE_VALUE_32: u32 = 2;
const MEM_OP_FLUSH_REMOTE_WRITES: u32 = 3;
const MEM_OP_WAIT_VALUE_64: u32 = 4;
const MEM_OP_WRITE_VALUE_64: u32 = 5;
const MEM_OP_BARRIER: u32 = 6;

/// One operation of `cuStreamBatchMemOp`: `CUstreamBatchMemOpParams` of cuda.h, a union of 48
/// bytes whose first word is the operation's type.
#[repr(C)]
#[derive(Copy, Clone)]
pub(crate) union MemOpParams {
    value: ValueParams,
    flags: FlagParams,
    pad: [u64; 6],
}

/// `CUstreamMemOpWaitValueParams_st` and `CUstreamMemOpWriteValueParams_st` (the same layout).
#[repr(C)]
#[allow(dead_code)] // Read by the driver.
#[derive(Copy, Clone)]
struct ValueParams {
    operation: u32,
    address: u64,
    value: Value,
    flags: c_uint,
    /// For the driver's internal use.
    alias: u64,
}

/// The anonymous union of `value` (`cuuint32_t`) and `value64` (`cuuint64_t`).
#[repr(C)]
#[derive(Copy, Clone)]
union Value {
    value32: u32,
    value64: u64,
}

/// `CUstreamMemOpFlushRemoteWritesParams_st` and `CUstreamMemOpMemoryBarrierParams_st`.
#[repr(C)]
#[allow(dead_code)] // Read by the driver.
#[derive(Copy, Clone)]
struct FlagParams {
    operation: u32,
    flags: c_uint,
}

// The layout of cuda.h (CUDA 12 and 13), checked on the GPU host by a C++ probe: 48 bytes, the
// address at 8, the value at 16, the flags at 24, the alias at 32.
const _: () = {
    assert!(size_of::<MemOpParams>() == 48);
    assert!(std::mem::offset_of!(ValueParams, address) == 8);
    assert!(std::mem::offset_of!(ValueParams, value) == 16);
    assert!(std::mem::offset_of!(ValueParams, flags) == 24);
    assert!(std::mem::offset_of!(ValueParams, alias) == 32);
};

impl MemOpParams {
    fn value_op(operation: u32, address: u64, value: Value, flags: c_uint) -> MemOpParams {
        let mut params = MemOpParams { pad: [0; 6] };
        params.value = ValueParams { operation, address, value, flags, alias: 0 };
        params
    }

    fn flag_op(operation: u32, flags: c_uint) -> MemOpParams {
        let mut params = MemOpParams { pad: [0; 6] };
        params.flags = FlagParams { operation, flags };
        params
    }

    /// A 32-bit wait at the device address `address` (`CU_STREAM_MEM_OP_WAIT_VALUE_32`).
    pub(crate) fn wait32(address: u64, value: u32, flags: c_uint) -> MemOpParams {
        Self::value_op(MEM_OP_WAIT_VALUE_32, address, Value { value32: value }, flags)
    }

    /// A 64-bit wait (`CU_STREAM_MEM_OP_WAIT_VALUE_64`).
    pub(crate) fn wait64(address: u64, value: u64, flags: c_uint) -> MemOpParams {
        Self::value_op(MEM_OP_WAIT_VALUE_64, address, Value { value64: value }, flags)
    }

    /// A 32-bit write (`CU_STREAM_MEM_OP_WRITE_VALUE_32`).
    pub(crate) fn write32(address: u64, value: u32) -> MemOpParams {
        Self::value_op(MEM_OP_WRITE_VALUE_32, address, Value { value32: value }, 0)
    }

    /// A 64-bit write (`CU_STREAM_MEM_OP_WRITE_VALUE_64`).
    pub(crate) fn write64(address: u64, value: u64) -> MemOpParams {
        Self::value_op(MEM_OP_WRITE_VALUE_64, address, Value { value64: value }, 0)
    }

    /// A memory barrier of the scope `flags` (`CU_STREAM_MEM_OP_BARRIER`, `_v2` only).
    pub(crate) fn barrier(flags: c_uint) -> MemOpParams {
        Self::flag_op(MEM_OP_BARRIER, flags)
    }

    /// A flush of remote writes (`CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES`).
    pub(crate) fn flush_remote_writes() -> MemOpParams {
        Self::flag_op(MEM_OP_FLUSH_REMOTE_WRITES, 0)
    }
}

/// The stream memory operations' entry points.
struct MemOps {
    wait_value32: StreamWaitValue32,
    wait_value64: StreamWaitValue64,
    write_value32: StreamWaitValue32,
    write_value64: StreamWaitValue64,
    batch_mem_op: StreamBatchMemOp,
    device_get_attribute: DeviceGetAttribute,
}

fn mem_ops() -> Result<&'static MemOps> {
    static MEM_OPS: OnceLock<Result<MemOps>> = OnceLock::new();
    MEM_OPS
        .get_or_init(|| {
            Ok(MemOps {
                wait_value32: entry_point!(c"cuStreamWaitValue32" as StreamWaitValue32),
                wait_value64: entry_point!(c"cuStreamWaitValue64" as StreamWaitValue64),
                write_value32: entry_point!(c"cuStreamWriteValue32" as StreamWaitValue32),
                write_value64: entry_point!(c"cuStreamWriteValue64" as StreamWaitValue64),
                batch_mem_op: entry_point!(c"cuStreamBatchMemOp" as StreamBatchMemOp),
                device_get_attribute: entry_point!(c"cuDeviceGetAttribute" as DeviceGetAttribute),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// `cuStreamWaitValue32`: later work on `stream` waits until the 32-bit word at `address`
/// meets the condition `flags` names against `value`.
///
/// # Safety
/// `stream` is a live real handle, or a special handle (`CU_STREAM_LEGACY`,
/// `CU_STREAM_PER_THREAD`) with its device's primary context current; `address` is the device
/// address of a 4-byte-aligned word of device memory or mapped host memory that stays
/// allocated until the wait has completed (for every launch, if it is captured).
pub(crate) unsafe fn stream_wait_value32(
    stream: sys::cudaStream_t,
    address: u64,
    value: u32,
    flags: c_uint,
) -> Result<()> {
    let wait = mem_ops()?.wait_value32;
    // SAFETY: the caller's contract.
    check_driver(unsafe { wait(stream, address, value, flags) }, "cuStreamWaitValue32")
}

/// `cuStreamWaitValue64`, as [`stream_wait_value32`] for an 8-byte-aligned 64-bit word.
///
/// # Safety
/// As [`stream_wait_value32`], 8-byte aligned.
pub(crate) unsafe fn stream_wait_value64(
    stream: sys::cudaStream_t,
    address: u64,
    value: u64,
    flags: c_uint,
) -> Result<()> {
    let wait = mem_ops()?.wait_value64;
    // SAFETY: the caller's contract.
    check_driver(unsafe { wait(stream, address, value, flags) }, "cuStreamWaitValue64")
}

/// `cuStreamWriteValue32` (flags 0: a memory fence before the write, the only choice of the
/// `_v2` call).
///
/// # Safety
/// As [`stream_wait_value32`]; nothing else may own the word's value meanwhile (the GPU writes
/// it).
pub(crate) unsafe fn stream_write_value32(stream: sys::cudaStream_t, address: u64, value: u32) -> Result<()> {
    let write = mem_ops()?.write_value32;
    // SAFETY: the caller's contract.
    check_driver(unsafe { write(stream, address, value, 0) }, "cuStreamWriteValue32")
}

/// `cuStreamWriteValue64`, as [`stream_write_value32`] for an 8-byte-aligned 64-bit word.
///
/// # Safety
/// As [`stream_write_value32`], 8-byte aligned.
pub(crate) unsafe fn stream_write_value64(stream: sys::cudaStream_t, address: u64, value: u64) -> Result<()> {
    let write = mem_ops()?.write_value64;
    // SAFETY: the caller's contract.
    check_driver(unsafe { write(stream, address, value, 0) }, "cuStreamWriteValue64")
}

/// `cuStreamBatchMemOp`: `operations` enqueued on `stream` in order, in one call (at most
/// [`MAX_BATCH_MEM_OPS`]; the driver may write the operations' `alias` fields).
///
/// # Safety
/// As [`stream_wait_value32`] for every address the operations name.
pub(crate) unsafe fn stream_batch_mem_op(stream: sys::cudaStream_t, operations: &mut [MemOpParams]) -> Result<()> {
    let batch = mem_ops()?.batch_mem_op;
    let count = c_uint::try_from(operations.len()).unwrap_or(c_uint::MAX);
    // SAFETY: the caller's contract; `count` operations at a valid pointer; flags must be 0.
    check_driver(unsafe { batch(stream, count, operations.as_mut_ptr(), 0) }, "cuStreamBatchMemOp")
}

/// A device attribute the runtime's enum does not name (`cuDeviceGetAttribute`), for the
/// device of runtime ordinal `ordinal`.
pub(crate) fn device_attribute(ordinal: i32, attribute: c_int) -> Result<c_int> {
    let get = mem_ops()?.device_get_attribute;
    let mut device: c_int = 0;
    // SAFETY: a valid out-pointer; an invalid ordinal is reported as an error.
    check_driver(unsafe { (driver()?.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
    let mut value: c_int = 0;
    // SAFETY: a valid out-pointer; `device` came from cuDeviceGet; an unknown attribute is
    // reported as an error.
    check_driver(unsafe { get(&mut value, attribute, device) }, "cuDeviceGetAttribute")?;
    Ok(value)
}
