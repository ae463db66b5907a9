//! Typed launches of your own kernels: an `extern "C" __global__` kernel of your `.cu` files
//! (built by `cuda-stream-build`), declared once with [`kernel!`](crate::kernel!), launched on
//! any stream through
//! [`cudaLaunchKernelEx`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EXECUTION.html)
//! with its launch attributes as values ([`LaunchConfig`]).
//!
//! ```no_run
//! use cuda_stream::{DeviceBuffer, LaunchConfig, Stream, StreamOptions, Device};
//!
//! cuda_stream::kernel! {
//!     /// `y[i] = a * x[i] + y[i]`, from `kernels/saxpy.cu`:
//!     /// `extern "C" __global__ void saxpy(float a, const float* x, float* y, uint32_t n)`.
//!     static SAXPY = fn saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
//! }
//!
//! # fn main() -> cuda_stream::Result<()> {
//! let stream = Stream::new(Device::new(0)?, StreamOptions::non_blocking())?;
//! let x = DeviceBuffer::from_slice(&stream, &[1.0f32; 1024])?;
//! let mut y = DeviceBuffer::from_slice(&stream, &[2.0f32; 1024])?;
//! let config = LaunchConfig::new(1024u32.div_ceil(256), 256);
//! // SAFETY: the kernel reads `x`'s 1024 floats and writes `y`'s, no others. The launch
//! // orders both uses (on any stream) and the frees after the kernel.
//! unsafe { SAXPY.launch(&stream, &config, (3.0, &x, &mut y, 1024))? };
//! assert_eq!(y.to_vec()?, vec![5.0; 1024]);
//! # Ok(()) }
//! ```
//!
//! # What is checked, and what cannot be
//! * **Argument types**: the tuple's types are the ones [`kernel!`](crate::kernel!) declared,
//!   checked by the compiler.
//! * **Argument count and sizes**: on the first launch, against the loaded kernel's own
//!   parameters ([`cuFuncGetParamInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html),
//!   drivers of CUDA 12.4 and later): a declaration that does not match the `.cu` file is
//!   [`Error::KernelArguments`] before CUDA reads an argument. What no check can see: two
//!   parameters of one size in the wrong order, or an `int` declared as `f32`; and with an
//!   older driver, nothing about the parameters.
//! * **What the kernel does with pointers** is the launch's `unsafe` contract. Buffers and
//!   views passed for pointer parameters ([`LaunchArg`]) narrow it: the launch orders their
//!   uses, reads for `const T*` and writes for `T*`, and the kernel promises to stay within
//!   their elements.
//! * **The configuration**: zero dimensions, a grid that is not a multiple of its cluster, a
//!   priority outside the device's range, a completion event of another device or with timing
//!   are refused before CUDA sees them; the rest is CUDA's to refuse
//!   (`cudaErrorInvalidConfiguration`, `cudaErrorCooperativeLaunchTooLarge`, ...).
//! * **Architectures**: a kernel without an image for the device is [`Error::NoKernelImage`],
//!   which names the device's architecture, what the kernels were built for, and how to
//!   rebuild them.
//!
//! A launch makes the stream's device current for the call (as [`StreamRef::launch`] does)
//! and returns this launch's own error.

// Layer 11 of docs/architecture.md, kernels. May use: every layer below (ffi to memory).

mod args;
mod config;
mod graph_node;

use args::sealed::Token;
pub use args::{KernelArg, KernelArgs, LaunchArg, LaunchArgs};
pub use config::{Dim3, LaunchConfig, MemSyncDomain};

use crate::call::race::{self, model::Step};
use crate::device::Device;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result};
use crate::memory::ordered_launch;
use crate::stream::enqueue::{InCapture, Work};
use crate::stream::{AsStream, StreamRef};
use crate::sys;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering};

/// Declares `extern "C" __global__` kernels of your `.cu` files as typed [`Kernel`] statics.
///
/// ```no_run
/// cuda_stream::kernel! {
///     /// Each declaration names the static, then the kernel's C name and its parameters,
///     /// with the Rust types whose bytes the C++ parameters take.
///     pub static FILL = fn fill(out: *mut u32, value: u32, n: u32);
///     static EMPTY = fn empty();
/// }
/// ```
///
/// A parameter's Rust type must have the C++ parameter's size (checked at the first launch
/// against the loaded kernel) and its bytes; on Linux x86-64 and aarch64:
///
/// | C++ parameter | Rust type |
/// |---|---|
/// | `int`, `unsigned`, `int32_t`, `uint32_t` | `i32`, `u32` |
/// | `long`, `long long`, `int64_t`, `clock_t`, `ptrdiff_t` | `i64` |
/// | `unsigned long`, `unsigned long long`, `uint64_t` | `u64` |
/// | `size_t` | `usize` |
/// | `short`, `unsigned short` | `i16`, `u16` |
/// | `char`, `signed char`, `unsigned char`, `bool` | `i8`, `i8`, `u8`, `u8` (0 or 1) |
/// | `float`, `double` | `f32`, `f64` |
/// | `half` (`__half`), `__nv_bfloat16` | `u16` (the bits) |
/// | `T*`, `const T*` | `*mut T`, `*const T` (a device address) |
/// | `float2`, `float4`, `int4`, `uchar4`, `double2`, ... | `[f32; 2]`, `[f32; 4]`, `[i32; 4]`, `[u8; 4]`, `[f64; 2]`, ... |
/// | a struct | a `#[repr(C)]` struct of the same fields, no padding, `unsafe impl DeviceCopy` |
///
/// A vector type's alignment does not matter here: CUDA copies each argument's bytes into the
/// parameter where the kernel expects it. A struct with padding in C++ gets explicit padding
/// fields in Rust (`DeviceCopy` forbids implicit padding).
///
/// The kernel's host stub (the C symbol nvcc emits for an `extern "C" __global__` function) is
/// declared with those parameters, never called: its address names the kernel to
/// `cudaLaunchKernelEx`. The static also carries what the kernels were built for
/// (`CUDA_STREAM_KERNEL_ARCHS`, set by `cuda-stream-build` for the crate that compiles them),
/// for [`Error::NoKernelImage`].
#[macro_export]
macro_rules! kernel {
    ($($(#[$meta:meta])* $vis:vis static $name:ident = fn $stub:ident($($param:ident : $ty:ty),* $(,)?);)+) => {$(
        $(#[$meta])*
        $vis static $name: $crate::Kernel<($($ty,)*)> = {
            unsafe extern "C" {
                fn $stub($($param: $ty),*);
            }
            // SAFETY: the address of the host stub of the `extern "C" __global__` kernel
            // `$stub`, declared above with the parameters the caller wrote for it (their
            // number and sizes are checked against the loaded kernel on the first launch).
            unsafe {
                $crate::Kernel::from_host_stub(
                    $stub as *const ::core::ffi::c_void,
                    ::core::stringify!($stub),
                    ::core::option_env!("CUDA_STREAM_KERNEL_ARCHS"),
                )
            }
        };
    )+};
}

/// A kernel of your `.cu` files with its parameter types `A` (a tuple): made by
/// [`kernel!`](crate::kernel!), launched with [`Kernel::launch`].
pub struct Kernel<A: KernelArgs> {
    stub: *const c_void,
    name: &'static str,
    built_for: Option<&'static str>,
    /// [`UNCHECKED`], [`MATCHES`] or [`UNKNOWABLE`]: whether `A` matched the loaded kernel's
    /// parameters.
    signature: AtomicU8,
    args: PhantomData<fn(A)>,
}

/// Why a launch with a completion event is refused on a capturing stream.
const COMPLETION_EVENT_CAPTURED: &str =
    "a launch with a completion event during a stream capture (the graph would not keep the event)";

const UNCHECKED: u8 = 0;
const MATCHES: u8 = 1;
/// The driver cannot tell the parameters (older than CUDA 12.4).
const UNKNOWABLE: u8 = 2;

// SAFETY: the stub's address is a value (never dereferenced here), and CUDA lets any thread
// launch a kernel; the signature state is atomic.
unsafe impl<A: KernelArgs> Send for Kernel<A> {}
// SAFETY: as above.
unsafe impl<A: KernelArgs> Sync for Kernel<A> {}

impl<A: KernelArgs> fmt::Debug for Kernel<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("parameter_sizes", &A::SIZES)
            .field("built_for", &self.built_for)
            .finish()
    }
}

impl<A: KernelArgs> Kernel<A> {
    /// A kernel from its host stub's address. [`kernel!`](crate::kernel!) is the way to make
    /// one.
    ///
    /// # Safety
    /// `stub` is the host stub of an `extern "C" __global__` kernel linked into this program,
    /// whose parameters take the bytes of `A`'s elements, in order.
    pub const unsafe fn from_host_stub(
        stub: *const c_void,
        name: &'static str,
        built_for: Option<&'static str>,
    ) -> Self {
        Kernel { stub, name, built_for, signature: AtomicU8::new(UNCHECKED), args: PhantomData }
    }

    /// The kernel's C name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What the kernels were built for, as their build said (`sm_90,compute_75`), if it did.
    pub fn built_for(&self) -> Option<&'static str> {
        self.built_for
    }

    /// The host stub's address, the kernel's name for the runtime API
    /// (`cudaFuncGetAttributes`, `cudaLaunchKernel`, ...).
    pub fn as_host_stub(&self) -> *const c_void {
        self.stub
    }

    /// Launches the kernel on `stream` with `config` and `args`
    /// ([`cudaLaunchKernelEx`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EXECUTION.html)).
    ///
    /// Each argument is a value of its parameter's type, or, for a pointer parameter, a buffer
    /// or a view ([`LaunchArg`]): `&DeviceSlice`, `&DeviceBuffer` for a `const T*`, a read of
    /// its elements; `&mut DeviceSliceMut`, `&mut DeviceBuffer` for a `T*`, a write. The launch
    /// orders those uses as [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on) does (after
    /// the earlier uses they conflict with, on any stream; later uses and the frees wait for
    /// the kernel) and tells the race detector, with no `use_on` and no declared accesses.
    ///
    /// ```no_run
    /// # use cuda_stream::{DeviceBuffer, LaunchConfig, Stream, StreamOptions, Device};
    /// cuda_stream::kernel! {
    ///     static SAXPY = fn saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
    /// }
    /// # fn main() -> cuda_stream::Result<()> {
    /// # let device = Device::new(0)?;
    /// let (home, other) = (Stream::new(device, StreamOptions::non_blocking())?, Stream::new(device, StreamOptions::non_blocking())?);
    /// let x = DeviceBuffer::from_slice(&home, &[1.0f32; 1024])?;
    /// let mut y = DeviceBuffer::from_slice(&home, &[2.0f32; 1024])?;
    /// let config = LaunchConfig::new(4, 256);
    /// // SAFETY: the kernel reads `x`'s and writes `y`'s first 1024 elements, no others.
    /// unsafe { SAXPY.launch(&other, &config, (3.0, &x, &mut y, 1024))? };
    /// assert_eq!(y.to_vec()?, vec![5.0; 1024]); // on the home stream, after the kernel
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// The kernel runs with these arguments: every raw pointer it reads or writes through must
    /// be valid for those accesses on the stream's device until the kernel completes, and no
    /// other work may access that memory concurrently in a way the kernel does not expect. Through
    /// a buffer or view argument, the kernel accesses only its elements, and through a shared
    /// one (a `const T*`) only reads them. A kernel whose parameters differ from `A` in ways the
    /// size check cannot see (see the [module docs](mod@crate::kernel)) reads garbage.
    ///
    /// # Errors
    /// [`Error::KernelArguments`] when `A` does not match the kernel's parameters;
    /// [`Error::InvalidLaunch`], [`Error::PriorityOutOfRange`] and
    /// [`Error::DeviceMismatch`] for a configuration refused before CUDA sees it;
    /// [`Error::NoKernelImage`] when the kernels were not built for the device; for a
    /// completion event, [`Error::CaptureMisuse`] while the stream is being captured; the
    /// errors of [`StreamRef::launch`]: CUDA's launch errors, [`Error::WrongThread`],
    /// [`Error::InsideHostFn`]. With buffer or view arguments, the errors of
    /// [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on); on a stream of a capture of this
    /// crate the launch is captured and the graph holds the buffers (see
    /// [the capture docs](crate::capture#what-a-captures-graph-holds-of-device-buffers)):
    /// [`Error::CaptureMisuse`] for another library's capture or a builder level's, a buffer of
    /// another device than the capture's, or a home stream captured elsewhere with uses not yet
    /// marked; [`Error::GraphMisuse`] for a buffer whose address was handed out;
    /// [`Error::Size`] past 12 device buffers in the capture's graph.
    #[inline]
    pub unsafe fn launch<L: LaunchArgs<A>>(
        &self,
        stream: impl AsStream,
        config: &LaunchConfig<'_>,
        args: L,
    ) -> Result<()> {
        let stream = stream.as_stream();
        let _current = stream.enter_runtime()?;
        if self.signature.load(Ordering::Acquire) == UNCHECKED {
            self.check_signature(stream.device())?;
        }
        config.check(stream.device())?;
        if L::TRACKED {
            let arg_uses = args.arg_uses(Token(()))?;
            let params = args.params(Token(()));
            let uses = || {
                let mut uses = race::uses(config.declared_accesses());
                uses.extend(arg_uses.iter().map(|arg| arg.access().as_use()));
                uses
            };
            // A launch with a completion event is never captured (`enqueue_launch`): nothing is
            // held for it.
            let refused = config.launch_completion_event().map(|_| COMPLETION_EVENT_CAPTURED);
            return ordered_launch(&stream, &arg_uses, refused, || self.enqueue_launch(&stream, config, &params, uses));
        }
        let params = args.params(Token(()));
        self.enqueue_launch(&stream, config, &params, || race::uses(config.declared_accesses()))
    }

    /// The launch, through the one enqueue path (entered by the caller: the checks needed the
    /// device), with `uses` told to the race detector.
    #[inline(always)]
    fn enqueue_launch(
        &self,
        stream: &StreamRef,
        config: &LaunchConfig<'_>,
        args: &A,
        uses: impl FnOnce() -> Vec<race::model::Use>,
    ) -> Result<()> {
        match config.launch_completion_event() {
            None => {
                stream.enqueue(Work::named(self.name).uses(uses).entered(), |_| self.launch_now(stream, config, args))
            }
            // Never into a capture: the graph would take the kernel with a node naming the
            // event, which it does not keep.
            Some(event) => stream.outside_transitions(InCapture::Refused(COMPLETION_EVENT_CAPTURED), || {
                let ticket = event.records().before_record();
                // To the race detector, the event records the work before the kernel (it
                // fires once the kernel's blocks have begun, not after their accesses): both
                // checked before the launch, recorded after it, the record first.
                let recorded = stream
                    .race_check(Step::Record(event.as_raw() as usize), Vec::new, || "completion event".to_owned())?;
                let checked = stream.race_check(Step::Work, uses, || self.name.to_owned())?;
                self.launch_now(stream, config, args)?;
                recorded.enqueued();
                checked.enqueued();
                event.records().note_uncaptured_record(ticket);
                Ok(())
            }),
        }
    }

    #[inline(always)]
    fn launch_now(&self, stream: &StreamRef, config: &LaunchConfig<'_>, args: &A) -> Result<()> {
        let code = config.with_raw(stream.as_raw(), |raw| {
            // SAFETY: `raw` is a configuration with its attributes alive for the call, `stub`
            // a kernel's host stub (`from_host_stub`), and `args` one pointer per parameter
            // (`KernelArgs`); what the kernel does with them is the caller's contract.
            args.with_pointers(|pointers| unsafe { sys::cudaLaunchKernelExC(raw, self.stub, pointers) })
        });
        if code == sys::cudaError::cudaSuccess {
            Ok(())
        } else {
            Err(stream.device().launch_error(code, "cudaLaunchKernelEx", self.name, self.built_for))
        }
    }

    /// Compares `A` with the loaded kernel's parameters, once; loads the kernel into the
    /// device's context (the current one).
    #[cold]
    #[inline(never)]
    fn check_signature(&self, device: Device) -> Result<()> {
        let function = self.function(device)?;
        let state = match driver::kernel_param_sizes(function)? {
            None => UNKNOWABLE,
            Some(expected) if expected == A::SIZES => MATCHES,
            Some(expected) => {
                return Err(Error::KernelArguments { kernel: self.name, expected, given: A::SIZES.to_vec() });
            }
        };
        self.signature.store(state, Ordering::Release);
        Ok(())
    }

    /// The kernel's driver handle in `device`'s context, which must be current; loads the
    /// kernel (`cudaGetFuncBySymbol`).
    fn function(&self, device: Device) -> Result<sys::cudaFunction_t> {
        let mut function: sys::cudaFunction_t = std::ptr::null_mut();
        // SAFETY: `stub` is a kernel's host stub (`from_host_stub`); a valid out-pointer.
        let code = unsafe { sys::cudaGetFuncBySymbol(&mut function, self.stub) };
        if code != sys::cudaError::cudaSuccess {
            return Err(device.launch_error(code, "cudaGetFuncBySymbol", self.name, self.built_for));
        }
        Ok(function)
    }

    /// What the kernel is on `device` (loading it there now, which CUDA's lazy loading would
    /// otherwise do at its first launch, possibly waiting for kernels already running)
    /// ([`cudaFuncGetAttributes`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EXECUTION.html)).
    ///
    /// # Errors
    /// [`Error::NoKernelImage`] when the kernels were not built for the device; CUDA's errors.
    pub fn attributes(&self, device: Device) -> Result<KernelAttributes> {
        let _current = device.make_current()?;
        // SAFETY: plain integers; CUDA fills them.
        let mut raw: sys::cudaFuncAttributes = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer; `stub` is a kernel's host stub.
        let code = unsafe { sys::cudaFuncGetAttributes(&mut raw, self.stub) };
        if code != sys::cudaError::cudaSuccess {
            return Err(device.launch_error(code, "cudaFuncGetAttributes", self.name, self.built_for));
        }
        Ok(KernelAttributes {
            binary_version: raw.binaryVersion,
            ptx_version: raw.ptxVersion,
            max_threads_per_block: raw.maxThreadsPerBlock,
            registers: raw.numRegs,
            static_shared_bytes: raw.sharedSizeBytes,
            local_bytes: raw.localSizeBytes,
        })
    }

    /// Lets launches of this kernel on `device` have up to `bytes` of dynamic shared memory
    /// per block ([`cudaFuncSetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EXECUTION.html)
    /// with `cudaFuncAttributeMaxDynamicSharedMemorySize`): above 48 KiB a kernel must opt in,
    /// up to the device's [`shared_memory_per_block_optin`](crate::DeviceProperties) less its
    /// static shared memory. Loads the kernel on `device` if needed, which CUDA's lazy loading
    /// may make wait for kernels already running (as [`Kernel::attributes`]).
    ///
    /// The limit is the process's, for this kernel on this device, as in C++: set it once at
    /// start-up. A launch on another thread meanwhile sees the old limit or the new; lowering
    /// it makes larger launches fail with CUDA's error.
    ///
    /// # Errors
    /// [`Error::Size`] above `i32::MAX` bytes; [`Error::NoKernelImage`] as for
    /// [`Kernel::attributes`]; CUDA's `cudaErrorInvalidValue` above what the device allows.
    pub fn set_max_dynamic_shared_memory(&self, device: Device, bytes: usize) -> Result<()> {
        let bytes = i32::try_from(bytes).map_err(|_| Error::Size("dynamic shared memory above 2 GiB"))?;
        let _current = device.make_current()?;
        let attribute = sys::cudaFuncAttribute::cudaFuncAttributeMaxDynamicSharedMemorySize;
        // SAFETY: `stub` is a kernel's host stub; the attribute takes an integer.
        let code = unsafe { sys::cudaFuncSetAttribute(self.stub, attribute, bytes) };
        if code != sys::cudaError::cudaSuccess {
            return Err(device.launch_error(code, "cudaFuncSetAttribute", self.name, self.built_for));
        }
        Ok(())
    }

    /// How many blocks of `block_threads` threads with `shared_bytes` of dynamic shared memory
    /// a cooperative launch of this kernel can have on `device`: blocks per SM at full
    /// occupancy times the SMs
    /// ([`cudaOccupancyMaxActiveBlocksPerMultiprocessor`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__OCCUPANCY.html)).
    ///
    /// # Errors
    /// As [`Kernel::attributes`].
    pub fn max_cooperative_blocks(&self, device: Device, block_threads: u32, shared_bytes: usize) -> Result<u32> {
        let _current = device.make_current()?;
        let mut per_sm = 0;
        // SAFETY: a valid out-pointer; `stub` is a kernel's host stub.
        let code = unsafe {
            sys::cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut per_sm,
                self.stub,
                block_threads as i32,
                shared_bytes,
            )
        };
        if code != sys::cudaError::cudaSuccess {
            return Err(device.launch_error(
                code,
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
                self.name,
                self.built_for,
            ));
        }
        let sms = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount)?;
        Ok((per_sm.max(0) as u32).saturating_mul(sms.max(0) as u32))
    }
}

/// What a kernel is on a device ([`Kernel::attributes`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelAttributes {
    /// The architecture of the binary that runs (`90` for sm_90): a PTX build compiled at load
    /// time reports the device's own.
    pub binary_version: i32,
    /// The PTX version the kernel was compiled from (`75` for compute_75), 0 without PTX.
    pub ptx_version: i32,
    /// The most threads a block of this kernel can have.
    pub max_threads_per_block: i32,
    /// Registers per thread.
    pub registers: i32,
    /// Static shared memory per block, in bytes.
    pub static_shared_bytes: usize,
    /// Local memory per thread, in bytes.
    pub local_bytes: usize,
}
