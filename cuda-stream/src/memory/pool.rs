//! [`MemPool`]: a pool of device memory that stream-ordered allocations draw from, with its
//! release threshold, reuse policy, trimming and usage figures.

use crate::call::capture_mode::uncapturable_call;
use crate::device::Device;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::call_outside_host_fn;
use crate::sys;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A CUDA memory pool of one device
/// ([memory pools](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)):
/// one this crate created ([`MemPool::new`], destroyed when the last clone drops), or the
/// device's default pool ([`MemPool::device_default`], never destroyed). Clones share the pool.
/// [`DeviceBuffer::new_in`](crate::DeviceBuffer::new_in) allocates from it on any stream of
/// its device.
#[derive(Clone, Debug)]
pub struct MemPool {
    inner: Arc<Pool>,
}

#[derive(Debug)]
struct Pool {
    raw: sys::cudaMemPool_t,
    device: Device,
    owned: bool,
}

// SAFETY: CUDA's memory-pool calls are thread-safe; the handle is only passed to them.
unsafe impl Send for Pool {}
// SAFETY: as above: shared use only passes the handle to thread-safe calls.
unsafe impl Sync for Pool {}

/// How a device may access a pool's memory ([`MemPool::set_access`]; `cudaMemAccessFlags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PoolAccess {
    /// Not at all (`cudaMemAccessFlagsProtNone`).
    None,
    /// Reads only (`cudaMemAccessFlagsProtRead`).
    Read,
    /// Reads and writes (`cudaMemAccessFlagsProtReadWrite`).
    ReadWrite,
}

impl PoolAccess {
    fn raw(self) -> sys::cudaMemAccessFlags {
        match self {
            PoolAccess::None => sys::cudaMemAccessFlags::cudaMemAccessFlagsProtNone,
            PoolAccess::Read => sys::cudaMemAccessFlags::cudaMemAccessFlagsProtRead,
            PoolAccess::ReadWrite => sys::cudaMemAccessFlags::cudaMemAccessFlagsProtReadWrite,
        }
    }

    fn from_raw(flags: sys::cudaMemAccessFlags) -> PoolAccess {
        match flags {
            sys::cudaMemAccessFlags::cudaMemAccessFlagsProtReadWrite => PoolAccess::ReadWrite,
            sys::cudaMemAccessFlags::cudaMemAccessFlagsProtRead => PoolAccess::Read,
            _ => PoolAccess::None,
        }
    }
}

/// Device `device` as a memory location.
fn device_location(device: Device) -> sys::cudaMemLocation {
    sys::cudaMemLocation { type_: sys::cudaMemLocationType::cudaMemLocationTypeDevice, id: device.ordinal() }
}

/// When freed memory may be reused before the stream that freed it has passed the free
/// (`cudaMemPoolReuse*`; all three are on by default).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReusePolicy {
    /// Reuse across streams whose ordering with the free is known through events
    /// (`cudaMemPoolReuseFollowEventDependencies`).
    pub follow_event_dependencies: bool,
    /// Reuse memory whose free is already known to have completed
    /// (`cudaMemPoolReuseAllowOpportunistic`).
    pub allow_opportunistic: bool,
    /// Let CUDA insert dependencies of its own to reuse memory
    /// (`cudaMemPoolReuseAllowInternalDependencies`).
    pub allow_internal_dependencies: bool,
}

/// How much memory a pool holds and hands out, in bytes (PyTorch's `memory_stats`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemPoolStats {
    /// Reserved from the device now (`cudaMemPoolAttrReservedMemCurrent`).
    pub reserved_current: u64,
    /// The most ever reserved since the last reset (`cudaMemPoolAttrReservedMemHigh`).
    pub reserved_high: u64,
    /// In allocations not yet freed (`cudaMemPoolAttrUsedMemCurrent`).
    pub used_current: u64,
    /// The most ever in allocations since the last reset (`cudaMemPoolAttrUsedMemHigh`).
    pub used_high: u64,
}

impl MemPool {
    /// Creates a pool of pinned device memory on `device`
    /// ([`cudaMemPoolCreate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)).
    ///
    /// # Errors
    /// Refused inside a host function; CUDA's errors (`cudaErrorNotSupported` on a device
    /// without memory pools).
    pub fn new(device: Device) -> Result<MemPool> {
        let _current = device.make_current()?;
        // SAFETY: all-zero is a valid `cudaMemPoolProps` (null pointers, zero sizes, CUDA's
        // zero enum values); the fields that matter are set below.
        let mut props: sys::cudaMemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::cudaMemAllocationType::cudaMemAllocationTypePinned;
        props.handleTypes = sys::cudaMemAllocationHandleType::cudaMemHandleTypeNone;
        props.location =
            sys::cudaMemLocation { type_: sys::cudaMemLocationType::cudaMemLocationTypeDevice, id: device.ordinal() };
        let mut raw: sys::cudaMemPool_t = std::ptr::null_mut();
        // No capture in progress (this thread's own included) forbids it, or is invalidated.
        // SAFETY: a valid out-pointer and properties.
        uncapturable_call(|| check(unsafe { sys::cudaMemPoolCreate(&mut raw, &props) }, "cudaMemPoolCreate"))?;
        Ok(MemPool { inner: Arc::new(Pool { raw, device, owned: true }) })
    }

    /// The device's default pool, which `cudaMallocAsync` draws from unless another was set
    /// ([`cudaDeviceGetDefaultMemPool`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
    /// Never destroyed.
    ///
    /// # Errors
    /// As [`MemPool::new`].
    pub fn device_default(device: Device) -> Result<MemPool> {
        let _current = device.make_current()?;
        let mut raw: sys::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; a valid ordinal.
        check(unsafe { sys::cudaDeviceGetDefaultMemPool(&mut raw, device.ordinal()) }, "cudaDeviceGetDefaultMemPool")?;
        Ok(MemPool { inner: Arc::new(Pool { raw, device, owned: false }) })
    }

    /// The pool's device.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// The raw handle, valid while this pool (or a clone) lives.
    pub fn as_raw(&self) -> sys::cudaMemPool_t {
        self.inner.raw
    }

    /// How many bytes of freed memory the pool keeps reserved when a stream synchronizes
    /// (`cudaMemPoolAttrReleaseThreshold`; 0 by default: everything goes back).
    ///
    /// # Errors
    /// Refused inside a host function; CUDA's errors.
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.set_u64(sys::cudaMemPoolAttr::cudaMemPoolAttrReleaseThreshold, bytes)
    }

    /// The release threshold (see [`MemPool::set_release_threshold`]).
    ///
    /// # Errors
    /// As [`MemPool::set_release_threshold`].
    pub fn release_threshold(&self) -> Result<u64> {
        self.get_u64(sys::cudaMemPoolAttr::cudaMemPoolAttrReleaseThreshold)
    }

    /// Sets the reuse policy ([`ReusePolicy`]).
    ///
    /// # Errors
    /// As [`MemPool::set_release_threshold`].
    pub fn set_reuse(&self, policy: ReusePolicy) -> Result<()> {
        for (attribute, on) in reuse_attributes(policy) {
            let mut value = c_int::from(on);
            self.set(attribute, (&raw mut value).cast())?;
        }
        Ok(())
    }

    /// The reuse policy.
    ///
    /// # Errors
    /// As [`MemPool::set_release_threshold`].
    pub fn reuse(&self) -> Result<ReusePolicy> {
        let mut policy = ReusePolicy {
            follow_event_dependencies: false,
            allow_opportunistic: false,
            allow_internal_dependencies: false,
        };
        let fields = [
            (sys::cudaMemPoolAttr::cudaMemPoolReuseFollowEventDependencies, &mut policy.follow_event_dependencies),
            (sys::cudaMemPoolAttr::cudaMemPoolReuseAllowOpportunistic, &mut policy.allow_opportunistic),
            (sys::cudaMemPoolAttr::cudaMemPoolReuseAllowInternalDependencies, &mut policy.allow_internal_dependencies),
        ];
        for (attribute, field) in fields {
            let mut value: c_int = 0;
            self.get(attribute, (&raw mut value).cast())?;
            *field = value != 0;
        }
        Ok(policy)
    }

    /// Releases reserved memory the pool does not use, keeping at least `keep_bytes`
    /// ([`cudaMemPoolTrimTo`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)).
    /// Memory whose free a stream has not yet passed is not released.
    ///
    /// # Errors
    /// As [`MemPool::set_release_threshold`].
    pub fn trim_to(&self, keep_bytes: usize) -> Result<()> {
        let _current = self.inner.device.make_current()?;
        // No capture in progress (this thread's own included) forbids it, or is invalidated.
        // SAFETY: a live pool.
        uncapturable_call(|| check(unsafe { sys::cudaMemPoolTrimTo(self.inner.raw, keep_bytes) }, "cudaMemPoolTrimTo"))
    }

    /// The pool's usage figures ([`MemPoolStats`]).
    ///
    /// # Errors
    /// As [`MemPool::set_release_threshold`].
    pub fn stats(&self) -> Result<MemPoolStats> {
        use sys::cudaMemPoolAttr as A;
        Ok(MemPoolStats {
            reserved_current: self.get_u64(A::cudaMemPoolAttrReservedMemCurrent)?,
            reserved_high: self.get_u64(A::cudaMemPoolAttrReservedMemHigh)?,
            used_current: self.get_u64(A::cudaMemPoolAttrUsedMemCurrent)?,
            used_high: self.get_u64(A::cudaMemPoolAttrUsedMemHigh)?,
        })
    }

    /// Lets kernels and copies on `device` access memory allocated from this pool, as `access`
    /// says ([`cudaMemPoolSetAccess`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)):
    /// a pool's memory is its own device's only until then. Applies to the pool's allocations
    /// made before and after the call. `device` must be able to reach the pool's device
    /// ([`Device::can_access_peer`]). Taking access away while work on `device` that reads the
    /// pool's memory through a raw address still runs faults that work (a sticky error of its
    /// context): narrow access only once such kernels have completed.
    ///
    /// # Errors
    /// [`Error::SameDevice`] for the pool's own device (it always reads and writes its
    /// memory); as [`MemPool::set_release_threshold`]; CUDA's errors for a device without peer
    /// access to the pool's.
    pub fn set_access(&self, device: Device, access: PoolAccess) -> Result<()> {
        if device == self.inner.device {
            return Err(Error::SameDevice {
                what: "a pool's own device always reads and writes its memory",
                device: device.ordinal(),
            });
        }
        let descriptor = sys::cudaMemAccessDesc { location: device_location(device), flags: access.raw() };
        let _current = self.inner.device.make_current()?;
        uncapturable_call(|| {
            // SAFETY: a live pool; one valid descriptor.
            let code = unsafe { sys::cudaMemPoolSetAccess(self.inner.raw, &descriptor, 1) };
            check(code, "cudaMemPoolSetAccess")
        })
    }

    /// How kernels and copies on `device` may access this pool's memory
    /// ([`cudaMemPoolGetAccess`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html)).
    ///
    /// # Errors
    /// As [`MemPool::set_release_threshold`].
    pub fn access(&self, device: Device) -> Result<PoolAccess> {
        let mut location = device_location(device);
        let mut flags = sys::cudaMemAccessFlags::cudaMemAccessFlagsProtNone;
        let _current = self.inner.device.make_current()?;
        uncapturable_call(|| {
            // SAFETY: a live pool; valid out- and in-pointers.
            let code = unsafe { sys::cudaMemPoolGetAccess(&mut flags, self.inner.raw, &mut location) };
            check(code, "cudaMemPoolGetAccess")
        })?;
        Ok(PoolAccess::from_raw(flags))
    }

    /// Resets both high-water marks to the current figures (CUDA accepts only zero for them).
    ///
    /// # Errors
    /// As [`MemPool::set_release_threshold`].
    pub fn reset_peaks(&self) -> Result<()> {
        self.set_u64(sys::cudaMemPoolAttr::cudaMemPoolAttrReservedMemHigh, 0)?;
        self.set_u64(sys::cudaMemPoolAttr::cudaMemPoolAttrUsedMemHigh, 0)
    }

    fn set_u64(&self, attribute: sys::cudaMemPoolAttr, value: u64) -> Result<()> {
        let mut value = value;
        self.set(attribute, (&raw mut value).cast())
    }

    fn get_u64(&self, attribute: sys::cudaMemPoolAttr) -> Result<u64> {
        let mut value: u64 = 0;
        self.get(attribute, (&raw mut value).cast())?;
        Ok(value)
    }

    /// `cudaMemPoolSetAttribute`; `value` points to the attribute's type (`int` or `cuuint64_t`).
    fn set(&self, attribute: sys::cudaMemPoolAttr, value: *mut c_void) -> Result<()> {
        let _current = self.inner.device.make_current()?;
        // Relaxed: CUDA refuses it during the calling thread's own Global or ThreadLocal capture
        // (cudaErrorStreamCaptureUnsupported), although it touches no stream.
        let set = || {
            // SAFETY: a live pool; the callers pass a pointer to the attribute's type.
            check(unsafe { sys::cudaMemPoolSetAttribute(self.inner.raw, attribute, value) }, "cudaMemPoolSetAttribute")
        };
        uncapturable_call(set)
    }

    /// `cudaMemPoolGetAttribute`; `value` points to the attribute's type.
    fn get(&self, attribute: sys::cudaMemPoolAttr, value: *mut c_void) -> Result<()> {
        let _current = self.inner.device.make_current()?;
        // Relaxed, as in `set`.
        let get = || {
            // SAFETY: as in `set`.
            check(unsafe { sys::cudaMemPoolGetAttribute(self.inner.raw, attribute, value) }, "cudaMemPoolGetAttribute")
        };
        uncapturable_call(get)
    }
}

fn reuse_attributes(policy: ReusePolicy) -> [(sys::cudaMemPoolAttr, bool); 3] {
    use sys::cudaMemPoolAttr as A;
    [
        (A::cudaMemPoolReuseFollowEventDependencies, policy.follow_event_dependencies),
        (A::cudaMemPoolReuseAllowOpportunistic, policy.allow_opportunistic),
        (A::cudaMemPoolReuseAllowInternalDependencies, policy.allow_internal_dependencies),
    ]
}

impl Drop for Pool {
    /// Destroys a pool this crate created. CUDA keeps it until its outstanding allocations are
    /// freed, so buffers still drawn from it stay valid.
    fn drop(&mut self) {
        if self.owned {
            let (raw, device) = (self.raw as usize, self.device);
            call_outside_host_fn(move || {
                device.destroy_relaxed(move || {
                    // SAFETY: a pool we created and nothing else destroys; its outstanding
                    // allocations keep it alive in CUDA.
                    let _ = check(unsafe { sys::cudaMemPoolDestroy(raw as sys::cudaMemPool_t) }, "cudaMemPoolDestroy");
                });
            });
        }
    }
}
