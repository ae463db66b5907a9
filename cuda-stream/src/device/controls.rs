//! What a program sets and reads about a device as a whole: the flags its primary context is
//! created with (how threads wait for it), its memory (and its graph allocator's), and its
//! properties.

use super::Device;
use crate::call::capture_mode::uncapturable_call;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::ffi::{CStr, c_uint};

/// How a thread that waits for the device in a stream or device synchronize waits
/// (`cudaDeviceSchedule*`, set with [`Device::set_flags`]). An event's wait follows the event's
/// own flag instead ([`EventFlags::blocking_sync`](crate::EventFlags::blocking_sync)).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// CUDA's default: spin while the process has fewer active contexts than the machine has
    /// logical processors, else yield (`cudaDeviceScheduleAuto`).
    #[default]
    Auto,
    /// Busy-wait: the lowest latency, a core held (`cudaDeviceScheduleSpin`).
    Spin,
    /// Yield the thread between polls (`cudaDeviceScheduleYield`).
    Yield,
    /// Block on a synchronization primitive until the device signals: little CPU, some latency
    /// (`cudaDeviceScheduleBlockingSync`).
    BlockingSync,
}

impl Schedule {
    fn raw(self) -> c_uint {
        match self {
            Schedule::Auto => sys::cudaDeviceScheduleAuto,
            Schedule::Spin => sys::cudaDeviceScheduleSpin,
            Schedule::Yield => sys::cudaDeviceScheduleYield,
            Schedule::BlockingSync => sys::cudaDeviceScheduleBlockingSync,
        }
    }

    fn from_raw(flags: c_uint) -> Schedule {
        match flags & sys::cudaDeviceScheduleMask {
            sys::cudaDeviceScheduleSpin => Schedule::Spin,
            sys::cudaDeviceScheduleYield => Schedule::Yield,
            sys::cudaDeviceScheduleBlockingSync => Schedule::BlockingSync,
            _ => Schedule::Auto,
        }
    }
}

/// The flags a device's primary context is created with
/// ([`cudaSetDeviceFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)):
/// how threads wait for it. The context's other flags are kept as they are when these are set.
/// `cudaDeviceMapHost` is not a flag here: the runtime makes it implicit (NVIDIA's
/// `cudaSetDeviceFlags` docs), and `cuDevicePrimaryCtxSetFlags` refuses it
/// (`cudaErrorInvalidValue`, CUDA 13.0 on an H200); nor is `cudaDeviceLmemResizeToMax`, whose
/// behaviour is CUDA's default and cannot be turned off (deprecated in CUDA 13's headers).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DeviceFlags {
    /// How threads wait in stream and device synchronizes.
    pub schedule: Schedule,
}

impl DeviceFlags {
    /// Flags with `schedule`.
    pub fn schedule(schedule: Schedule) -> DeviceFlags {
        DeviceFlags { schedule }
    }

    /// The context's flags `current` with these set in place of theirs.
    fn applied_to(self, current: c_uint) -> c_uint {
        let replaced = sys::cudaDeviceScheduleMask | sys::cudaDeviceMapHost | sys::cudaDeviceLmemResizeToMax;
        current & !replaced | self.schedule.raw()
    }

    fn from_raw(flags: c_uint) -> DeviceFlags {
        DeviceFlags { schedule: Schedule::from_raw(flags) }
    }
}

/// A device's memory, as CUDA counts it now ([`Device::memory_info`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemoryInfo {
    /// Bytes free on the device, for every process: other processes and contexts move it.
    pub free: usize,
    /// Bytes of memory the device has.
    pub total: usize,
}

/// The memory CUDA's graph allocator holds on a device, for the graphs' own allocations (memory
/// nodes: [`Capture::alloc`](crate::Capture::alloc), [`Capture::scratch`](crate::Capture::scratch),
/// and allocations captured into graphs) ([`Device::graph_memory`],
/// `cudaDeviceGetGraphMemAttribute`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct GraphMemoryStats {
    /// Bytes of graph allocations alive now, in every graph's launches (`cudaGraphMemAttrUsedMemCurrent`).
    pub used_current: u64,
    /// The most ever alive since the last reset (`cudaGraphMemAttrUsedMemHigh`).
    pub used_high: u64,
    /// Bytes the allocator holds from the device now, in use or cached
    /// (`cudaGraphMemAttrReservedMemCurrent`).
    pub reserved_current: u64,
    /// The most ever held since the last reset (`cudaGraphMemAttrReservedMemHigh`).
    pub reserved_high: u64,
}

/// What a device is ([`Device::properties`]): the fields CUDA programs ask for most, typed;
/// every other field of `cudaDeviceProp` through [`DeviceProperties::raw`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeviceProperties {
    /// The device's name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability: (major, minor), e.g. (9, 0) for sm_90.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// Bytes of global memory.
    pub total_memory: usize,
    /// Bytes of L2 cache.
    pub l2_cache_bytes: usize,
    /// Threads per warp.
    pub warp_size: i32,
    /// The most threads in one block.
    pub max_threads_per_block: i32,
    /// The most threads resident on one multiprocessor.
    pub max_threads_per_multiprocessor: i32,
    /// The most threads in each dimension of a block.
    pub max_block_dims: [i32; 3],
    /// The most blocks in each dimension of a grid.
    pub max_grid_dims: [i32; 3],
    /// Bytes of shared memory a block gets without opting in (48 KiB on every GPU CUDA 13
    /// supports).
    pub shared_memory_per_block: usize,
    /// Bytes of shared memory a block can have once its kernel opts in
    /// ([`Kernel::set_max_dynamic_shared_memory`](crate::Kernel::set_max_dynamic_shared_memory)).
    pub shared_memory_per_block_optin: usize,
    /// Bytes of shared memory on one multiprocessor.
    pub shared_memory_per_multiprocessor: usize,
    /// 32-bit registers available to a block.
    pub registers_per_block: i32,
    /// How many copies the device can run at once beside kernels (its copy engines).
    pub async_engines: i32,
    /// Whether kernels of one context can run at the same time.
    pub concurrent_kernels: bool,
    /// PCI domain, bus and device of the GPU.
    pub pci: (i32, i32, i32),
    /// The GPU's UUID, 16 bytes (`nvidia-smi -L` shows them in hex after `GPU-`).
    pub uuid: [u8; 16],
    raw: sys::cudaDeviceProp,
}

impl DeviceProperties {
    /// Every field of CUDA's `cudaDeviceProp`.
    pub fn raw(&self) -> &sys::cudaDeviceProp {
        &self.raw
    }
}

impl Device {
    /// Sets the flags this device's primary context will be created with
    /// ([`cudaSetDeviceFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html),
    /// through `cuDevicePrimaryCtxSetFlags`, which needs no current device), before anything in
    /// the process creates that context: the first stream, allocation or launch on the device
    /// does. Creates nothing itself. The context's flags that [`DeviceFlags`] does not name are
    /// kept.
    ///
    /// Once the context exists this crate refuses, where CUDA would overwrite the live
    /// context's flags (NVIDIA's docs): work and waits already made under the old schedule
    /// would not see the change coherently. The refusal is checked before the set: a context
    /// that another thread creates in between takes the new flags, as CUDA's own call would.
    /// Set flags at start-up, before other threads use the device.
    ///
    /// # Errors
    /// [`Error::ContextActive`] once the primary context exists; CUDA's errors.
    pub fn set_flags(self, flags: DeviceFlags) -> Result<()> {
        refuse_inside_host_fn()?;
        let (current, active) = driver::primary_context_state(self.ordinal())?;
        if active {
            return Err(Error::ContextActive { device: self.ordinal() });
        }
        driver::primary_context_set_flags(self.ordinal(), flags.applied_to(current))
    }

    /// The flags this device's primary context has, or will be created with
    /// (`cuDevicePrimaryCtxGetState`; C++'s `cudaGetDeviceFlags` of the current device).
    /// Creates nothing.
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn flags(self) -> Result<DeviceFlags> {
        refuse_inside_host_fn()?;
        driver::primary_context_state(self.ordinal()).map(|(flags, _)| DeviceFlags::from_raw(flags))
    }

    /// The device's free and total memory now
    /// ([`cudaMemGetInfo`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)),
    /// in its primary context (created if it does not exist yet).
    ///
    /// # Errors
    /// The errors of [`Device::make_current`]; CUDA's errors.
    pub fn memory_info(self) -> Result<MemoryInfo> {
        let _current = self.make_current()?;
        let (mut free, mut total) = (0, 0);
        // SAFETY: valid out-pointers; the device's primary context is current.
        check(unsafe { sys::cudaMemGetInfo(&mut free, &mut total) }, "cudaMemGetInfo")?;
        Ok(MemoryInfo { free, total })
    }

    /// What CUDA's graph allocator holds on the device now
    /// ([`cudaDeviceGetGraphMemAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)):
    /// the memory of graphs' own allocations, in use and cached.
    ///
    /// # Errors
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn graph_memory(self) -> Result<GraphMemoryStats> {
        use sys::cudaGraphMemAttributeType as A;
        refuse_inside_host_fn()?;
        let get = |attribute: A| -> Result<u64> {
            let mut value: u64 = 0;
            // SAFETY: a valid ordinal; the four attributes read are 64-bit values (NVIDIA's
            // docs), written to a u64 that lives for the call.
            let code =
                unsafe { sys::cudaDeviceGetGraphMemAttribute(self.ordinal(), attribute, (&raw mut value).cast()) };
            check(code, "cudaDeviceGetGraphMemAttribute")?;
            Ok(value)
        };
        // It touches no stream: no capture in progress may refuse it.
        uncapturable_call(|| {
            Ok(GraphMemoryStats {
                used_current: get(A::cudaGraphMemAttrUsedMemCurrent)?,
                used_high: get(A::cudaGraphMemAttrUsedMemHigh)?,
                reserved_current: get(A::cudaGraphMemAttrReservedMemCurrent)?,
                reserved_high: get(A::cudaGraphMemAttrReservedMemHigh)?,
            })
        })
    }

    /// Resets the two high watermarks of [`Device::graph_memory`]
    /// (`cudaDeviceSetGraphMemAttribute` with zero, the only value CUDA takes for them): each
    /// starts again from what is in use or reserved now, not necessarily zero.
    ///
    /// # Errors
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn reset_graph_memory_peaks(self) -> Result<()> {
        use sys::cudaGraphMemAttributeType as A;
        refuse_inside_host_fn()?;
        for attribute in [A::cudaGraphMemAttrUsedMemHigh, A::cudaGraphMemAttrReservedMemHigh] {
            let mut zero: u64 = 0;
            // SAFETY: a valid ordinal; a 64-bit zero, as the attribute takes, alive for the call.
            let code =
                unsafe { sys::cudaDeviceSetGraphMemAttribute(self.ordinal(), attribute, (&raw mut zero).cast()) };
            check(code, "cudaDeviceSetGraphMemAttribute")?;
        }
        Ok(())
    }

    /// Gives the device's memory that the graph allocator caches and no graph launch uses
    /// (running or enqueued) back to the system
    /// ([`cudaDeviceGraphMemTrim`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html)).
    /// Memory a launch still uses stays, so it is safe at any time; it touches no stream, so no
    /// capture in progress refuses it.
    ///
    /// # Errors
    /// [`Error::InsideHostFn`]; CUDA's errors.
    pub fn trim_graph_memory(self) -> Result<()> {
        refuse_inside_host_fn()?;
        // SAFETY: a valid ordinal.
        uncapturable_call(|| check(unsafe { sys::cudaDeviceGraphMemTrim(self.ordinal()) }, "cudaDeviceGraphMemTrim"))
    }

    /// What the device is
    /// ([`cudaGetDeviceProperties`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    /// Creates no context.
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn properties(self) -> Result<DeviceProperties> {
        refuse_inside_host_fn()?;
        let mut raw = sys::cudaDeviceProp::default();
        // SAFETY: `raw` is a valid, writable cudaDeviceProp.
        check(unsafe { sys::cudaGetDeviceProperties(&mut raw, self.ordinal()) }, "cudaGetDeviceProperties")?;
        // SAFETY: the runtime writes a NUL-terminated name into the fixed-size array.
        let name = unsafe { CStr::from_ptr(raw.name.as_ptr()) }.to_string_lossy().into_owned();
        Ok(DeviceProperties {
            name,
            compute_capability: (raw.major, raw.minor),
            multiprocessors: raw.multiProcessorCount,
            total_memory: raw.totalGlobalMem,
            l2_cache_bytes: usize::try_from(raw.l2CacheSize).unwrap_or(0),
            warp_size: raw.warpSize,
            max_threads_per_block: raw.maxThreadsPerBlock,
            max_threads_per_multiprocessor: raw.maxThreadsPerMultiProcessor,
            max_block_dims: raw.maxThreadsDim,
            max_grid_dims: raw.maxGridSize,
            shared_memory_per_block: raw.sharedMemPerBlock,
            shared_memory_per_block_optin: raw.sharedMemPerBlockOptin,
            shared_memory_per_multiprocessor: raw.sharedMemPerMultiprocessor,
            registers_per_block: raw.regsPerBlock,
            async_engines: raw.asyncEngineCount,
            concurrent_kernels: raw.concurrentKernels != 0,
            pci: (raw.pciDomainID, raw.pciBusID, raw.pciDeviceID),
            uuid: raw.uuid.bytes.map(|byte| byte as u8),
            raw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_through_cudas_bits() {
        for schedule in [Schedule::Auto, Schedule::Spin, Schedule::Yield, Schedule::BlockingSync] {
            let flags = DeviceFlags::schedule(schedule);
            assert_eq!(DeviceFlags::from_raw(flags.applied_to(0)), flags);
        }
        assert_eq!(DeviceFlags::schedule(Schedule::BlockingSync).applied_to(0), sys::cudaDeviceScheduleBlockingSync);
        // The context's other flags are kept (sync memops, 0x80); map host and the deprecated
        // local-memory flag are never written back (the driver refuses map host).
        let current = sys::cudaDeviceScheduleSpin | sys::cudaDeviceMapHost | sys::cudaDeviceLmemResizeToMax | 0x80;
        assert_eq!(DeviceFlags::schedule(Schedule::Yield).applied_to(current), sys::cudaDeviceScheduleYield | 0x80);
        assert_eq!(DeviceFlags::from_raw(current), DeviceFlags::schedule(Schedule::Spin));
    }
}
