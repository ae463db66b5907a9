//! Errors: every CUDA failure carries the API that failed and its [`CudaCode`]; the crate's own
//! checks (bad priorities, wrong devices, ...) have their own variants.
//!
//! `cudaErrorNotReady` is never an error: queries return `Ok(false)` for it.

use super::priority::PriorityRange;
use crate::sys;
use std::ffi::CStr;
use std::fmt;

/// The result of every fallible operation in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A [`Result`] as a fast call carries it out of its closure: the error boxed, so that the
/// whole value fits in registers. An [`Error`] is 56 bytes, so its `Result` is returned through
/// memory; the caller then copies it in 16-byte loads that straddle the callee's stores, and
/// each such load waits until those stores reach the cache (a failed store forward). On the
/// H200s' host that cost 15 to 30 ns a fast call, beside a wait of about 350 ns
/// (`docs/bench/2026-11-28-wait-fast-call`). Only an error pays the box.
pub(crate) type Carried<T> = Result<T, Box<Error>>;

/// `result` as a fast call carries it out ([`Carried`]).
#[inline(always)]
pub(crate) fn carry<T>(result: Result<T>) -> Carried<T> {
    result.map_err(Box::new)
}

/// What [`carry`] carried, as the caller returns it.
#[inline(always)]
pub(crate) fn unpack<T>(carried: Carried<T>) -> Result<T> {
    carried.map_err(|error| *error)
}

/// A CUDA runtime error code (`cudaError_t`), as an integer: a code this crate's header did not
/// know is still representable.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct CudaCode(pub i32);

impl CudaCode {
    /// `cudaErrorNotReady`: asynchronous work has not completed yet.
    pub const NOT_READY: CudaCode = CudaCode(sys::cudaError::cudaErrorNotReady.0 as i32);

    /// The codes after which the CUDA context is unusable: every later call in this process
    /// fails the same way (CUDA's documentation: "the process must be terminated").
    const STICKY: [sys::cudaError; 10] = [
        sys::cudaError::cudaErrorIllegalAddress,
        sys::cudaError::cudaErrorLaunchTimeout,
        sys::cudaError::cudaErrorAssert,
        sys::cudaError::cudaErrorHardwareStackError,
        sys::cudaError::cudaErrorIllegalInstruction,
        sys::cudaError::cudaErrorMisalignedAddress,
        sys::cudaError::cudaErrorInvalidAddressSpace,
        sys::cudaError::cudaErrorInvalidPc,
        sys::cudaError::cudaErrorLaunchFailure,
        sys::cudaError::cudaErrorECCUncorrectable,
    ];

    /// The code as the runtime returns it.
    pub fn raw(self) -> sys::cudaError_t {
        sys::cudaError(self.0 as u32)
    }

    /// The code's name, e.g. `cudaErrorIllegalAddress`
    /// ([`cudaGetErrorName`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)).
    pub fn name(self) -> &'static str {
        // SAFETY: cudaGetErrorName needs no context and returns a pointer to a static,
        // NUL-terminated string (or null, handled by `static_str`).
        static_str(unsafe { sys::cudaGetErrorName(self.raw()) }).unwrap_or("unrecognized CUDA error code")
    }

    /// The code's description, e.g. `an illegal memory access was encountered`
    /// ([`cudaGetErrorString`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)).
    pub fn description(self) -> &'static str {
        // SAFETY: as in `name`: a static string or null.
        static_str(unsafe { sys::cudaGetErrorString(self.raw()) }).unwrap_or("no description")
    }

    /// Whether this code poisons the process's CUDA context: every later CUDA call fails, and
    /// only a new process recovers.
    pub fn is_sticky(self) -> bool {
        Self::STICKY.contains(&self.raw())
    }

    /// Whether this is one of CUDA's stream-capture errors (`cudaErrorStreamCaptureUnsupported`
    /// to `cudaErrorStreamCaptureWrongThread`, 900 to 908): a call refused because of a
    /// capture, or a capture that broke.
    pub fn is_capture_error(self) -> bool {
        (sys::cudaError::cudaErrorStreamCaptureUnsupported.0..=sys::cudaError::cudaErrorStreamCaptureWrongThread.0)
            .contains(&self.raw().0)
    }

    /// Whether this is `cudaErrorNotReady` (which this crate never returns as an error).
    pub fn is_not_ready(self) -> bool {
        self == Self::NOT_READY
    }
}

/// An integer newtype for one of CUDA's C result enums (never a Rust enum: a value the header
/// did not know is still representable), with a named constant per value, `name()`, and
/// `Display`/`Debug` that show both name and number.
macro_rules! result_codes {
    ($(#[$doc:meta])* $name:ident: $c:ident { $($(#[$cdoc:meta])* $constant:ident = $raw:ident,)* }) => {
        $(#[$doc])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash)]
        pub struct $name(pub u32);

        impl $name {
            $($(#[$cdoc])* pub const $constant: $name = $name(sys::$c::$raw.0);)*

            /// CUDA's name for the value (its C enumerator); `"unrecognized value"` for one this
            /// crate does not know.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$constant => stringify!($raw),)*
                    _ => "unrecognized value",
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} ({})", self.name(), self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({} {})", stringify!($name), self.0, self.name())
            }
        }
    };
}

result_codes! {
    /// Why [`Graph::instantiate_with`](crate::Graph::instantiate_with) failed
    /// (`cudaGraphInstantiateResult`, the `result_out` of `cudaGraphInstantiateParams`).
    GraphInstantiateResult: cudaGraphInstantiateResult {
        /// `cudaGraphInstantiateSuccess`.
        SUCCESS = cudaGraphInstantiateSuccess,
        /// `cudaGraphInstantiateError`: an invalid value or an unexpected error, described by
        /// the returned [`CudaCode`].
        ERROR = cudaGraphInstantiateError,
        /// `cudaGraphInstantiateInvalidStructure`: the graph's structure is invalid.
        INVALID_STRUCTURE = cudaGraphInstantiateInvalidStructure,
        /// `cudaGraphInstantiateNodeOperationNotSupported`: instantiated for device launch, the
        /// graph has a node of a type (a host node, ...) or an operation that it cannot run.
        NODE_OPERATION_NOT_SUPPORTED = cudaGraphInstantiateNodeOperationNotSupported,
        /// `cudaGraphInstantiateMultipleDevicesNotSupported`: instantiated for device launch,
        /// the graph's nodes are on more than one device.
        MULTIPLE_DEVICES_NOT_SUPPORTED = cudaGraphInstantiateMultipleDevicesNotSupported,
        /// `cudaGraphInstantiateConditionalHandleUnused`: a conditional handle is not used.
        CONDITIONAL_HANDLE_UNUSED = cudaGraphInstantiateConditionalHandleUnused,
    }
}

result_codes! {
    /// Why [`GraphExec::update`](crate::GraphExec::update) failed
    /// (`cudaGraphExecUpdateResult`, the `result` of `cudaGraphExecUpdateResultInfo`).
    GraphExecUpdateResult: cudaGraphExecUpdateResult {
        /// `cudaGraphExecUpdateSuccess`.
        SUCCESS = cudaGraphExecUpdateSuccess,
        /// `cudaGraphExecUpdateError`: an invalid value, or a reason not listed here.
        ERROR = cudaGraphExecUpdateError,
        /// `cudaGraphExecUpdateErrorTopologyChanged`: the graphs' nodes or edges differ.
        TOPOLOGY_CHANGED = cudaGraphExecUpdateErrorTopologyChanged,
        /// `cudaGraphExecUpdateErrorNodeTypeChanged`: a node's type changed.
        NODE_TYPE_CHANGED = cudaGraphExecUpdateErrorNodeTypeChanged,
        /// `cudaGraphExecUpdateErrorFunctionChanged`: a kernel node's function changed (drivers
        /// older than CUDA 11.2).
        FUNCTION_CHANGED = cudaGraphExecUpdateErrorFunctionChanged,
        /// `cudaGraphExecUpdateErrorParametersChanged`: a node's parameters changed in a way
        /// that cannot be updated.
        PARAMETERS_CHANGED = cudaGraphExecUpdateErrorParametersChanged,
        /// `cudaGraphExecUpdateErrorNotSupported`: something about a node is not supported.
        NOT_SUPPORTED = cudaGraphExecUpdateErrorNotSupported,
        /// `cudaGraphExecUpdateErrorUnsupportedFunctionChange`: a kernel's function changed in
        /// an unsupported way.
        UNSUPPORTED_FUNCTION_CHANGE = cudaGraphExecUpdateErrorUnsupportedFunctionChange,
        /// `cudaGraphExecUpdateErrorAttributesChanged`: a node's attributes changed in a way
        /// that cannot be updated.
        ATTRIBUTES_CHANGED = cudaGraphExecUpdateErrorAttributesChanged,
    }
}

/// Converts a pointer from `cudaGetErrorName`/`cudaGetErrorString` to a string.
fn static_str(ptr: *const std::ffi::c_char) -> Option<&'static str> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the runtime returns pointers to static NUL-terminated strings that live for the
    // whole process.
    unsafe { CStr::from_ptr(ptr) }.to_str().ok()
}

impl fmt::Display for CudaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.name(), self.0, self.description())
    }
}

impl fmt::Debug for CudaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaCode({} {})", self.0, self.name())
    }
}

/// Everything that can go wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA runtime call failed.
    #[error("{api} failed: {code}")]
    Cuda {
        /// The runtime function that returned the code, e.g. `cudaStreamSynchronize`.
        api: &'static str,
        /// What it returned.
        code: CudaCode,
    },
    /// A device ordinal outside `0..count`.
    #[error("device ordinal {ordinal} is invalid: this machine has {count} CUDA device(s)")]
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: i32,
        /// How many devices there are.
        count: i32,
    },
    /// A stream priority outside the device's range (CUDA would clamp it in silence).
    #[error("stream priority {requested} is outside device {device}'s range {range}")]
    PriorityOutOfRange {
        /// The priority asked for.
        requested: i32,
        /// The device's ordinal.
        device: i32,
        /// The device's range.
        range: PriorityRange,
    },
    /// Two objects that must be on one device are not.
    #[error("{what}: expected device {expected}, found device {found}")]
    DeviceMismatch {
        /// What was being done.
        what: &'static str,
        /// The device the operation needed.
        expected: i32,
        /// The device it got.
        found: i32,
    },
    /// The per-thread default stream was used from a thread other than the one that made it,
    /// where handle 0x2 would silently mean that thread's own, different stream.
    #[error("the per-thread default stream of one thread was used on another thread")]
    WrongThread,
    /// What holds a [`DeviceBuffer`](crate::DeviceBuffer)'s home stream now lends another
    /// stream than the one the buffer was allocated on (an `AsStream` that changes its
    /// answer): no use can be ordered with the allocation, and the buffer will be leaked.
    #[error("the value holding a device buffer's home stream now lends another stream")]
    HomeStreamChanged,
    /// `elapsed` on an event created without timing.
    #[error(
        "elapsed time needs both events created with timing enabled (EventFlags::timing; unlike \
         cudaEventCreate, EventFlags::default() and Event::new's default have timing off)"
    )]
    TimingDisabled,
    /// `elapsed` where the end event completed before the start event (CUDA's value, negative).
    #[error("the end event completed {before:?} before the start event")]
    NegativeElapsed {
        /// How much earlier (what `cudaEventElapsedTime` returned, negated).
        before: std::time::Duration,
    },
    /// `elapsed` on an event that was never recorded.
    #[error("elapsed time needs both events recorded on a stream first")]
    EventNotRecorded,
    /// An interprocess handle was asked of an event without the interprocess flag.
    #[error("an IPC handle needs an event created with EventFlags::interprocess (and timing disabled)")]
    NotInterprocess,
    /// A CUDA call from inside a host function, where CUDA forbids them (they may deadlock).
    #[error("CUDA calls are not allowed inside a host function (CUDA may deadlock); do the work after it instead")]
    InsideHostFn,
    /// Graph capture used in a way CUDA cannot capture or this crate refuses.
    #[error("capture misuse: {0}")]
    CaptureMisuse(&'static str),
    /// A size or length refused before CUDA sees it: a buffer of zero elements, a byte size
    /// that overflows, the two sides of a copy of different lengths.
    #[error("bad size: {0}")]
    Size(&'static str),
    /// Every stream of a [`StreamPool`](crate::StreamPool) is leased.
    #[error("all {capacity} streams of the pool are leased")]
    PoolExhausted {
        /// The pool's bound.
        capacity: usize,
    },
    /// An L2 access-policy window larger than the device allows
    /// (`cudaDevAttrMaxAccessPolicyWindowSize`), refused before it reaches CUDA.
    #[error("an L2 access-policy window of {num_bytes} bytes exceeds device {device}'s maximum of {max} bytes")]
    AccessPolicyWindowTooLarge {
        /// The window's size in bytes.
        num_bytes: usize,
        /// The device's maximum window size in bytes.
        max: usize,
        /// The device's ordinal.
        device: i32,
    },
    /// An L2 access-policy window CUDA's documentation rules out (a hit ratio outside
    /// `0.0..=1.0`, a persisting miss property), refused before it reaches CUDA.
    #[error("invalid L2 access-policy window: {0}")]
    InvalidAccessPolicyWindow(&'static str),
    /// A graph could not be instantiated
    /// ([`Graph::instantiate_with`](crate::Graph::instantiate_with)).
    #[error("cudaGraphInstantiateWithParams failed: {result}; {code}")]
    GraphInstantiate {
        /// CUDA's reason.
        result: GraphInstantiateResult,
        /// What the call returned.
        code: CudaCode,
    },
    /// An executable graph could not be updated from a graph
    /// ([`GraphExec::update`](crate::GraphExec::update)); the executable is unchanged.
    #[error("cudaGraphExecUpdate failed: {result}; {code}; the executable is unchanged")]
    GraphUpdate {
        /// CUDA's reason.
        result: GraphExecUpdateResult,
        /// What the call returned (`cudaErrorGraphExecUpdateFailure` when the update broke one
        /// of its rules).
        code: CudaCode,
    },
    /// A graph built in a way CUDA forbids or this crate refuses, refused before CUDA sees it:
    /// a node or a condition of another graph, a condition used twice, a switch of no case,
    /// a second executable of a graph with conditional nodes, a graph whose body capture did
    /// not end (graphs built node by node: `Graph::builder`).
    #[error("graph misuse: {0}")]
    GraphMisuse(&'static str),
    /// A [`StreamPool`](crate::StreamPool) asked for more streams than it can index
    /// ([`StreamPool::MAX_CAPACITY`](crate::StreamPool::MAX_CAPACITY)).
    #[error("a stream pool holds at most {max} streams, not {capacity}")]
    PoolTooLarge {
        /// The capacity asked for.
        capacity: usize,
        /// The most a pool holds.
        max: usize,
    },
    /// A special handle (null, legacy, per-thread) offered as an owned stream.
    #[error("handle {handle:#x} is a built-in stream and cannot be owned or destroyed")]
    BuiltinNotOwnable {
        /// The handle value.
        handle: usize,
    },
    /// A [`CurrentStream`](crate::CurrentStream) used after the
    /// [`as_current`](crate::StreamRef::as_current) scope that made its stream current ended:
    /// the stream may be gone, and its handle value may name another stream by now.
    #[error("the stream was current in a scope that has ended")]
    NotCurrent,
    /// A call between two devices given one device twice (peer access, a pool's access).
    #[error("{what}: device {device} given as both")]
    SameDevice {
        /// What the call is for.
        what: &'static str,
        /// The device.
        device: i32,
    },
    /// [`Device::set_flags`](crate::Device::set_flags) after the device's primary context
    /// exists: this crate sets flags only before (CUDA would overwrite the live context's).
    #[error("device {device}'s primary context exists already: its flags are set before anything uses the device")]
    ContextActive {
        /// The device.
        device: i32,
    },
    /// The thread that wakes [`Completion`](crate::Completion)s could not be started (the
    /// reason the operating system gave; a later future tries again), or this is a child
    /// process made by `fork` after it started, which has no such thread (`Unsupported`).
    #[error("no completion reactor thread: {0}")]
    ReactorUnavailable(std::io::ErrorKind),
    /// A stream (or a cudarc context) of a context that is not its device's primary context
    /// (cudarc's `new_non_primary`, a raw `cuCtxCreate`): this crate creates, caches and uses
    /// handles of primary contexts only, which nothing but process exit destroys.
    #[error("the stream or context is not device {device}'s primary context (only primary contexts are supported)")]
    ForeignContext {
        /// The device the context belongs to.
        device: i32,
    },
    /// A launch found no kernel image for the device's architecture
    /// (`cudaErrorNoKernelImageForDevice`, 209): the kernels were built for other GPUs, and
    /// without PTX old enough for this one to compile at load time.
    #[error(
        "{kernel}: no kernel image for device {device}, compute capability {major}.{minor} (sm_{major}{minor}): \
         the kernels were built for {}. Rebuild them for this GPU: build where `nvidia-smi` shows it, or set \
         CUDA_COMPUTE_CAP={major}{minor} (or CUDA_STREAM_ARCHS), or name it in cuda_stream_build::Kernels::archs",
        .built_for.unwrap_or("other architectures")
    )]
    NoKernelImage {
        /// The kernel or launcher that was launched.
        kernel: &'static str,
        /// The device it was launched on.
        device: i32,
        /// The device's compute capability, major.
        major: i32,
        /// The device's compute capability, minor.
        minor: i32,
        /// What the kernels were built for (`sm_90,compute_75`), where the build said so
        /// (`CUDA_STREAM_KERNEL_ARCHS`, embedded by [`kernel!`](crate::kernel!)).
        built_for: Option<&'static str>,
    },
    /// Launch arguments that do not match the kernel's parameters in number or byte sizes, as
    /// the loaded kernel reports them (`cuFuncGetParamInfo`): refused before CUDA reads them.
    #[error(
        "kernel {kernel} takes {} parameter(s) of {expected:?} bytes; the launch passes {} of {given:?} bytes",
        .expected.len(),
        .given.len()
    )]
    KernelArguments {
        /// The kernel.
        kernel: &'static str,
        /// The byte size of each parameter the kernel takes.
        expected: Vec<usize>,
        /// The byte size of each argument passed.
        given: Vec<usize>,
    },
    /// A call that would make the host wait for the device, refused by the sync-debug mode
    /// ([`SyncDebugMode::Refuse`](crate::sync_debug::SyncDebugMode::Refuse)) before it waits or
    /// enqueues.
    #[error("{api} would make the host wait for the device (refused by the sync-debug mode)")]
    SyncRefused {
        /// The CUDA call it stands for, e.g. `cudaStreamSynchronize`.
        api: &'static str,
    },
    /// An operation refused by the race detector ([`RaceMode::Fail`](crate::race::RaceMode::Fail))
    /// before it was enqueued: it would access memory that an operation of another stream
    /// may still be using, with nothing ordering the two.
    #[error("{0}")]
    Race(Box<crate::ffi::race_report::RaceReport>),
    /// A split of a device's SMs into partitions that the device cannot make
    /// ([`Device::split_sms`](crate::Device::split_sms)).
    #[error(
        "device {device} cannot split its {sm_count} SMs into {count} partition(s) of at least {min_sms} SMs \
         (it can make {possible})"
    )]
    SmSplit {
        /// The device.
        device: i32,
        /// The SMs asked for per partition.
        min_sms: u32,
        /// The partitions asked for.
        count: u32,
        /// How many partitions of that size the device can make.
        possible: u32,
        /// The device's SMs.
        sm_count: u32,
    },
    /// A launch configuration CUDA cannot run, refused before CUDA sees it.
    #[error("invalid launch configuration: {0}")]
    InvalidLaunch(&'static str),
    /// An object another library hands over that its protocol does not allow or this crate
    /// cannot take (feature `python`): a `__cuda_stream__` of another version than 0, a
    /// DLPack tensor of another element type or device kind, strided or read-only; or a
    /// request the protocol forbids (stream 0 for `__dlpack__`). Python sees it as
    /// `BufferError`.
    #[error("exchange refused: {0}")]
    Exchange(String),
    /// A word index past the end of its words
    /// ([`MappedWords`](crate::MappedWords), [`DeviceWords`](crate::DeviceWords)), refused
    /// before CUDA sees it.
    #[error("word index {index} is out of range for {len} words")]
    WordOutOfRange {
        /// The index asked for.
        index: usize,
        /// How many words there are.
        len: usize,
    },
    /// A raw address for a stream memory operation
    /// ([`StreamRef::wait_value_raw`](crate::StreamRef::wait_value_raw)) that is null or not
    /// aligned to its word's size (CUDA requires 4 bytes for 32-bit words, 8 for 64-bit ones),
    /// refused before CUDA sees it.
    #[error("address {address:#x} is null or not aligned to its {align}-byte word")]
    MisalignedWord {
        /// The address.
        address: usize,
        /// The word's size and required alignment.
        align: usize,
    },
}

impl Error {
    /// The CUDA code behind this error, if it came from CUDA.
    pub fn cuda_code(&self) -> Option<CudaCode> {
        match self {
            Error::Cuda { code, .. } | Error::GraphInstantiate { code, .. } | Error::GraphUpdate { code, .. } => {
                Some(*code)
            }
            Error::NoKernelImage { .. } => Some(CudaCode(sys::cudaError::cudaErrorNoKernelImageForDevice.0 as i32)),
            _ => None,
        }
    }

    /// Whether this error poisoned the process's CUDA context (see [`CudaCode::is_sticky`]).
    pub fn is_sticky(&self) -> bool {
        self.cuda_code().is_some_and(CudaCode::is_sticky)
    }
}

/// Turns a runtime return code into a `Result`, naming the API that returned it: the checker
/// behind every runtime call in this crate, public for launchers of your own kernels. A failure
/// also clears the runtime's last error (`cudaGetLastError`), which the failed call set: a
/// launcher that checks `cudaGetLastError()` after its next `<<<>>>` sees its own error, not
/// this one. Sticky errors stay, as CUDA keeps them.
///
/// Outside a host function only: a failure makes a CUDA call.
///
/// # Errors
/// [`Error::Cuda`] for every code but `cudaSuccess`.
#[inline(always)]
pub fn check(code: sys::cudaError_t, api: &'static str) -> Result<()> {
    if code == sys::cudaError::cudaSuccess { Ok(()) } else { Err(runtime_error(code, api)) }
}

/// Like [`check`], but `cudaErrorNotReady` is `Ok(false)` and success is `Ok(true)`.
#[inline(always)]
pub(crate) fn check_ready(code: sys::cudaError_t, api: &'static str) -> Result<bool> {
    if code == sys::cudaError::cudaErrorNotReady { Ok(false) } else { check(code, api).map(|()| true) }
}

/// Like [`check`], for a code that is not the runtime's last error (a driver call's result, a
/// callback's status): nothing to clear, no CUDA call.
#[inline(always)]
pub(crate) fn check_code(code: sys::cudaError_t, api: &'static str) -> Result<()> {
    if code == sys::cudaError::cudaSuccess { Ok(()) } else { Err(cuda_error(code, api)) }
}

/// The error for a failed runtime call, which leaves no last error behind. Out of line to keep
/// the callers' hot paths small.
#[cold]
#[inline(never)]
fn runtime_error(code: sys::cudaError_t, api: &'static str) -> Error {
    let _ = take_last_error();
    cuda_error(code, api)
}

/// Reads and resets the calling thread's runtime last error (`cudaGetLastError`). Not inside a
/// host function: it is a CUDA call.
#[inline]
pub(crate) fn take_last_error() -> sys::cudaError_t {
    // SAFETY: no arguments; reads and resets this thread's last error.
    unsafe { sys::cudaGetLastError() }
}

#[cold]
#[inline(never)]
fn cuda_error(code: sys::cudaError_t, api: &'static str) -> Error {
    Error::Cuda { api, code: CudaCode(code.0 as i32) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_names_and_descriptions_without_a_gpu() {
        let code = CudaCode(sys::cudaError::cudaErrorIllegalAddress.0 as i32);
        assert_eq!(code.name(), "cudaErrorIllegalAddress");
        assert!(code.description().contains("illegal memory access"), "{}", code.description());
        assert!(code.is_sticky());
        assert!(!CudaCode::NOT_READY.is_sticky());
        assert!(CudaCode::NOT_READY.is_not_ready());
        let invalidated = CudaCode(sys::cudaError::cudaErrorStreamCaptureInvalidated.0 as i32);
        assert!(invalidated.is_capture_error() && !code.is_capture_error() && !CudaCode::NOT_READY.is_capture_error());
    }

    #[test]
    fn not_ready_is_a_state_not_an_error() {
        assert_eq!(check_ready(sys::cudaError::cudaErrorNotReady, "cudaStreamQuery"), Ok(false));
        assert_eq!(check_ready(sys::cudaError::cudaSuccess, "cudaStreamQuery"), Ok(true));
        let error = check_ready(sys::cudaError::cudaErrorInvalidResourceHandle, "cudaStreamQuery").unwrap_err();
        assert_eq!(error.cuda_code().map(CudaCode::name), Some("cudaErrorInvalidResourceHandle"));
        let shown = error.to_string();
        assert!(shown.starts_with("cudaStreamQuery failed: cudaErrorInvalidResourceHandle (400)"), "{shown}");
    }

    #[test]
    fn graph_results_are_named_values() {
        assert_eq!(GraphExecUpdateResult::TOPOLOGY_CHANGED.name(), "cudaGraphExecUpdateErrorTopologyChanged");
        assert_eq!(GraphExecUpdateResult(2), GraphExecUpdateResult::TOPOLOGY_CHANGED);
        assert_eq!(GraphExecUpdateResult(1_000).name(), "unrecognized value");
        let result = GraphInstantiateResult::NODE_OPERATION_NOT_SUPPORTED;
        assert_eq!(result.to_string(), "cudaGraphInstantiateNodeOperationNotSupported (3)");
        let code = CudaCode(sys::cudaError::cudaErrorGraphExecUpdateFailure.0 as i32);
        let error = Error::GraphUpdate { result: GraphExecUpdateResult::TOPOLOGY_CHANGED, code };
        assert_eq!(error.cuda_code(), Some(code));
        assert!(error.to_string().contains("cudaGraphExecUpdateErrorTopologyChanged"), "{error}");
    }

    #[test]
    fn unknown_codes_are_values_not_undefined_behaviour() {
        let code = CudaCode(123_456);
        assert!(!code.is_sticky());
        assert!(!code.name().is_empty());
    }
}
