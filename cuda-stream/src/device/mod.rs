//! CUDA devices, and the scoped guard that makes a device's primary context current: pushed
//! over another context and popped after, or made current on a thread that had none.

// Layer 3 of docs/architecture.md, devices and contexts. May use: ffi, call.

mod controls;
pub(crate) mod keep_alive;
mod peer;

pub use controls::{DeviceFlags, DeviceProperties, GraphMemoryStats, MemoryInfo, Schedule};

use crate::call::capture_mode::{Relaxed, with_thread_mode};
use crate::call::live_captures;
use crate::call::race;
use crate::call::sync_debug::{self, SyncKind};
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::ffi::priority::{Priority, PriorityRange};
use crate::sys;
use std::ffi::c_int;
use std::marker::PhantomData;
use std::sync::OnceLock;

/// A CUDA device, by ordinal. Cheap to copy; holds no resources.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    ordinal: i32,
}

impl Device {
    /// How many CUDA devices this process sees
    /// ([`cudaGetDeviceCount`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    ///
    /// # Errors
    /// Without a driver: `cudaErrorInsufficientDriver`; with a driver but no GPU:
    /// `cudaErrorNoDevice`.
    pub fn count() -> Result<i32> {
        refuse_inside_host_fn()?;
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid out-pointer for the duration of the call.
        check(unsafe { sys::cudaGetDeviceCount(&mut count) }, "cudaGetDeviceCount")?;
        Ok(count)
    }

    /// The device with this ordinal, checked against [`Device::count`].
    ///
    /// # Errors
    /// [`Error::InvalidDevice`] outside `0..count`; the errors of [`Device::count`].
    pub fn new(ordinal: i32) -> Result<Device> {
        let count = Device::count()?;
        if (0..count).contains(&ordinal) {
            Ok(Device { ordinal })
        } else {
            Err(Error::InvalidDevice { ordinal, count })
        }
    }

    /// The device of any ordinal, for the host-only unit tests: no CUDA call.
    #[cfg(test)]
    pub(crate) fn from_ordinal(ordinal: i32) -> Device {
        Device { ordinal }
    }

    /// The calling thread's current device
    /// ([`cudaGetDevice`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    ///
    /// # Errors
    /// As [`Device::count`] when there is no usable device.
    pub fn current() -> Result<Device> {
        refuse_inside_host_fn()?;
        Ok(Device { ordinal: current_ordinal()? })
    }

    /// The ordinal, as CUDA numbers devices.
    pub fn ordinal(self) -> i32 {
        self.ordinal
    }

    /// Waits for all work on this device
    /// ([`cudaDeviceSynchronize`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    ///
    /// # Errors
    /// Errors of earlier asynchronous work on the device. [`Error::CaptureMisuse`], before CUDA
    /// sees the call (which would invalidate the capture), while a capture begun through this
    /// crate forbids it: a stream of this device is being captured, this thread has a Global or
    /// ThreadLocal capture in progress, or any thread has a Global one
    /// ([the rules](crate::capture#calls-refused-during-a-capture); captures begun outside this
    /// crate are not counted). A Global capture begun outside this crate on another thread is
    /// invalidated by it, whatever the thread's mode: CUDA's rule for a device-wide wait.
    pub fn synchronize(self) -> Result<()> {
        let _current = self.make_current()?;
        if live_captures::any() {
            live_captures::refuse_device_synchronize(self.ordinal())?;
        }
        sync_debug::before_sync("cudaDeviceSynchronize", SyncKind::DeviceSynchronize)?;
        let snapshot = race::snapshot(|model| model.device_clock(self.ordinal()));
        // SAFETY: no arguments; the device is current.
        check(unsafe { sys::cudaDeviceSynchronize() }, "cudaDeviceSynchronize")?;
        race::host_saw(snapshot);
        Ok(())
    }

    /// The device's stream priority range
    /// ([`cudaDeviceGetStreamPriorityRange`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    ///
    /// # Errors
    /// As [`Device::count`] when the device is unusable.
    pub fn priority_range(self) -> Result<PriorityRange> {
        refuse_inside_host_fn()?;
        // A device's range never changes: read it once per device.
        static RANGES: PerDevice<PriorityRange> = PerDevice::new();
        RANGES.get_or_read(self.ordinal, || self.read_priority_range())
    }

    /// `priority` if it is inside this device's range.
    ///
    /// # Errors
    /// [`Error::PriorityOutOfRange`] (with the range) otherwise, where CUDA would clamp in silence.
    pub fn check_priority(self, priority: Priority) -> Result<Priority> {
        let range = self.priority_range()?;
        if range.contains(priority) {
            Ok(priority)
        } else {
            Err(Error::PriorityOutOfRange { requested: priority.value(), device: self.ordinal, range })
        }
    }

    fn read_priority_range(self) -> Result<PriorityRange> {
        let _current = self.make_current()?;
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: both out-pointers are valid for the call; the device is current.
        let code = unsafe { sys::cudaDeviceGetStreamPriorityRange(&mut least, &mut greatest) };
        check(code, "cudaDeviceGetStreamPriorityRange")?;
        Ok(PriorityRange::new(least, greatest))
    }

    /// The device's name, e.g. `NVIDIA H200`
    /// ([`cudaGetDeviceProperties`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    ///
    /// # Errors
    /// As [`Device::count`].
    pub fn name(self) -> Result<String> {
        self.properties().map(|properties| properties.name)
    }

    /// An integer attribute of the device
    /// ([`cudaDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)),
    /// e.g. `sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount`.
    ///
    /// # Errors
    /// `cudaErrorInvalidValue` for an attribute this driver does not know.
    pub fn attribute(self, attribute: sys::cudaDeviceAttr) -> Result<i32> {
        refuse_inside_host_fn()?;
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer.
        let code = unsafe { sys::cudaDeviceGetAttribute(&mut value, attribute, self.ordinal) };
        check(code, "cudaDeviceGetAttribute")?;
        Ok(value)
    }

    /// The error for a launch on this device that returned `code`: a missing kernel image
    /// (`cudaErrorNoKernelImageForDevice`) becomes [`Error::NoKernelImage`], which names the
    /// device's architecture and what the kernels were built for (`built_for`, when known);
    /// other codes are [`Error::Cuda`] under `api`.
    #[cold]
    pub(crate) fn launch_error(
        self,
        code: sys::cudaError_t,
        api: &'static str,
        kernel: &'static str,
        built_for: Option<&'static str>,
    ) -> Error {
        if code != sys::cudaError::cudaErrorNoKernelImageForDevice {
            return check(code, api).err().unwrap_or(Error::Cuda { api, code: crate::CudaCode(code.0 as i32) });
        }
        // The runtime's last error, left by the call that failed: cleared, as `check` does.
        let _ = crate::ffi::error::take_last_error();
        let capability = |attribute| self.attribute(attribute).unwrap_or(0);
        Error::NoKernelImage {
            kernel,
            device: self.ordinal,
            major: capability(sys::cudaDeviceAttr::cudaDevAttrComputeCapabilityMajor),
            minor: capability(sys::cudaDeviceAttr::cudaDevAttrComputeCapabilityMinor),
            built_for,
        }
    }

    /// How many hardware work queues (connections) the driver gives each context it creates
    /// in this process: `CUDA_DEVICE_MAX_CONNECTIONS` as NVIDIA documents it, 8 when unset, at
    /// most 32 ([CUDA environment variables](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars)).
    /// Streams map onto these queues; work on a queue runs in order, so with more busy
    /// streams than queues, streams that share one wait for each other (a false dependency):
    /// a stream waiting on an event holds back every stream behind it on its queue.
    ///
    /// Read from this process's environment now, parsed as an integer and clamped to `1..=32`;
    /// unset or unparsable means the default, 8 (how the driver treats malformed values is not
    /// documented). What it cannot know:
    /// * the environment when the driver read it, at context creation: a context created
    ///   before a change, or by a process whose environment differed, has its own count;
    /// * whether the driver allocated what was asked: "the number actually allocated by the
    ///   driver may differ from what is requested based on hardware resource limitations"
    ///   (NVIDIA's MPS documentation; under MPS, a server's clients share one pool);
    /// * which queue a given stream maps to: the driver's choice.
    pub fn hardware_queues() -> usize {
        hardware_queues_of(std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").ok().as_deref())
    }

    /// Whether the device's primary context is active: whether anything in this process has
    /// initialized the device (`cuDevicePrimaryCtxGetState`, through the runtime's driver entry
    /// points). Initializes nothing.
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn has_primary_context(self) -> Result<bool> {
        refuse_inside_host_fn()?;
        driver::primary_context_state(self.ordinal).map(|(_, active)| active)
    }

    /// Makes this device's primary context current on the calling thread until the guard
    /// drops, and returns it. This crate creates, caches and uses handles of primary contexts
    /// only (the contexts the CUDA runtime uses), whatever context another library made
    /// current:
    /// * the primary context is current already: nothing changes (one `cuCtxGetCurrent`);
    /// * another context is current (another device's primary context, or a context of
    ///   cudarc's `new_non_primary`, a raw `cuCtxCreate`): the primary context is pushed on the
    ///   driver's context stack (`cuCtxPushCurrent`) and popped when the guard drops, also when
    ///   unwinding, so the driver's stack, not a saved handle, says what is current after;
    /// * no context is current (a fresh thread): the device is made current as
    ///   `cudaSetDevice` does, and stays current. There is nothing to restore: "restoring"
    ///   no context would make the runtime's next call on this thread create a primary context
    ///   on its default device 0 (PyTorch's `MaybeExchangeDevice` avoids it the same way).
    ///
    /// A guard leaked with `mem::forget` leaves the primary context pushed. The pop takes the
    /// top of the thread's stack: hold no guard across your own unbalanced `cuCtxPushCurrent`.
    /// A context destroyed while it sat under the pushed one is what the driver's stack shows
    /// after the pop (the crate never installs a saved handle itself; such a destroyed context
    /// answers the next runtime call with `cudaErrorInvalidContext`, seen on CUDA 13.0).
    ///
    /// # Errors
    /// The errors of `cuCtxGetCurrent`, `cuDevicePrimaryCtxRetain`, `cuCtxPushCurrent` and
    /// `cudaSetDevice`; [`Error::InsideHostFn`] inside a host function.
    #[inline]
    pub fn make_current(self) -> Result<DeviceGuard> {
        refuse_inside_host_fn()?;
        let current = driver::current_context()?;
        let primary = self.primary_context()?;
        if current == primary {
            return Ok(DeviceGuard { pushed: false, _thread_bound: PhantomData });
        }
        if current.0.is_null() {
            set_current(self.ordinal)?;
            return Ok(DeviceGuard { pushed: false, _thread_bound: PhantomData });
        }
        driver::push_context(primary)?;
        Ok(DeviceGuard { pushed: true, _thread_bound: PhantomData })
    }

    /// Runs `destroy`, the destroy of a handle of this device (a graph, an executable, a memory
    /// pool; called outside any host function, see `call_outside_host_fn`), with this device
    /// current and in the Relaxed capture mode ([`with_thread_mode`](crate::capture::with_thread_mode)):
    /// such a destroy is a "potentially unsafe" call that CUDA otherwise refuses, invalidating
    /// the capture, during this thread's own capture or while another thread holds a Global one
    /// (probed on CUDA 13.0). Nothing of ours is captured by it, so it is safe here. Should the
    /// mode not change, the destroy is made all the same.
    ///
    /// The device is made current first: on a thread with no current context, CUDA's runtime
    /// would otherwise bind device 0's primary context (creating it on a GPU the program may
    /// never use). Should that fail (a sticky error), the handle is leaked, not destroyed from
    /// the wrong context.
    pub(crate) fn destroy_relaxed(self, destroy: impl FnOnce() + Copy) {
        let Ok(_current) = self.make_current() else { return };
        if with_thread_mode(Relaxed, destroy).is_err() {
            destroy();
        }
    }

    /// The device's primary context, retained once per process and device.
    #[inline]
    fn primary_context(self) -> Result<driver::Context> {
        static PRIMARY: PerDevice<driver::Context> = PerDevice::new();
        PRIMARY.get_or_read(self.ordinal, || driver::primary_context(self.ordinal))
    }

    /// [`Error::ForeignContext`] unless `context` (a foreign stream's, or another library's) is
    /// this device's primary context, the only one this crate uses.
    pub(crate) fn require_primary(self, context: driver::Context) -> Result<()> {
        if self.primary_context()? == context { Ok(()) } else { Err(Error::ForeignContext { device: self.ordinal }) }
    }
}

/// A value of each device that never changes, read once per device on first use.
struct PerDevice<T>(OnceLock<Box<[OnceLock<T>]>>);

impl<T: Copy> PerDevice<T> {
    const fn new() -> PerDevice<T> {
        PerDevice(OnceLock::new())
    }

    /// The value of device `ordinal`: the one read before, or `read`'s, kept if it succeeds.
    /// An ordinal beyond the device count is read every time (and fails there).
    fn get_or_read(&self, ordinal: i32, read: impl FnOnce() -> Result<T>) -> Result<T> {
        let slots = self.0.get_or_init(|| (0..Device::count().unwrap_or(0)).map(|_| OnceLock::new()).collect());
        let Some(slot) = usize::try_from(ordinal).ok().and_then(|index| slots.get(index)) else {
            return read();
        };
        if let Some(value) = slot.get() {
            return Ok(*value);
        }
        let value = read()?;
        Ok(*slot.get_or_init(|| value))
    }
}

/// The driver's default number of hardware queues per context, and its maximum.
const DEFAULT_HARDWARE_QUEUES: usize = 8;
const MAX_HARDWARE_QUEUES: usize = 32;

/// [`Device::hardware_queues`] for a value of `CUDA_DEVICE_MAX_CONNECTIONS`.
fn hardware_queues_of(variable: Option<&str>) -> usize {
    match variable.map(str::trim).map(str::parse::<i64>) {
        Some(Ok(requested)) => requested.clamp(1, MAX_HARDWARE_QUEUES as i64) as usize,
        _ => DEFAULT_HARDWARE_QUEUES,
    }
}

fn current_ordinal() -> Result<i32> {
    let mut ordinal: c_int = 0;
    // SAFETY: `ordinal` is a valid out-pointer.
    check(unsafe { sys::cudaGetDevice(&mut ordinal) }, "cudaGetDevice")?;
    Ok(ordinal)
}

fn set_current(ordinal: i32) -> Result<()> {
    // SAFETY: plain value argument; an invalid ordinal is reported as an error.
    check(unsafe { sys::cudaSetDevice(ordinal) }, "cudaSetDevice")
}

/// Keeps a device's primary context current on this thread (see [`Device::make_current`]);
/// pops it on drop when it was pushed. `!Send`: the current context is a property of the thread
/// that made the guard.
#[derive(Debug)]
#[must_use = "the pushed context is popped when the guard drops"]
pub struct DeviceGuard {
    /// Whether the guard pushed the primary context, to pop on drop.
    pushed: bool,
    _thread_bound: PhantomData<*const ()>,
}

impl DeviceGuard {
    /// Whether the guard pushed the primary context (another context was current), and pops
    /// it when it drops.
    pub fn switched(&self) -> bool {
        self.pushed
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if self.pushed {
            // Drop cannot report; the pop fails only if the thread's stack is already empty
            // (someone else popped it), which leaves nothing to restore.
            let _ = driver::pop_context();
        }
    }
}

/// `Ok` when `found` is `expected`, else the [`Error::DeviceMismatch`] saying `what` was being
/// done: the one check behind every device mismatch of this crate.
pub(crate) fn same_device(what: &'static str, expected: Device, found: Device) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(Error::DeviceMismatch { what, expected: expected.ordinal(), found: found.ordinal() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_queues_default_to_8_and_clamp_to_1_through_32() {
        assert_eq!(hardware_queues_of(None), 8);
        assert_eq!(hardware_queues_of(Some("")), 8);
        assert_eq!(hardware_queues_of(Some("many")), 8);
        assert_eq!(hardware_queues_of(Some("32")), 32);
        assert_eq!(hardware_queues_of(Some(" 4\n")), 4);
        assert_eq!(hardware_queues_of(Some("1")), 1);
        assert_eq!(hardware_queues_of(Some("0")), 1);
        assert_eq!(hardware_queues_of(Some("-3")), 1);
        assert_eq!(hardware_queues_of(Some("64")), 32);
        assert_eq!(hardware_queues_of(Some("99999999999999999999")), 8);
    }
}
