//! Stream attributes
//! ([`cudaStreamSetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html),
//! `cudaStreamGetAttribute`): how a host thread waits for the stream ([`SyncPolicy`]), and the
//! L2 access-policy window of its kernels ([`AccessPolicyWindow`]). A new value applies to work
//! submitted afterwards, never to work already enqueued (CUDA's rule).
//!
//! Values CUDA reads back are integers first: a value this crate's header did not name becomes
//! an `Other` variant, never undefined behaviour.
//!
//! # During stream capture
//! NVIDIA documents neither call as legal on a capturing stream, and other queries that enqueue
//! nothing (`cudaStreamGetId`) invalidate a capture. So both are refused on a capturing stream
//! with [`Error::CaptureMisuse`], after a check through `cudaStreamIsCapturing`, the query CUDA
//! allows during capture (it leaves the capture intact). Captures begun by this crate cannot
//! start between the check and the call; a foreign capture begun by another thread in between
//! can, as for [`StreamRef::id`].

use crate::ffi::error::{Error, Result, check};
use crate::stream::StreamRef;
use crate::sys;
use std::ffi::c_void;

/// How a host thread waits in [`StreamRef::synchronize`] for this stream's work
/// (`cudaSynchronizationPolicy`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SyncPolicy {
    /// `cudaSyncPolicyAuto`: CUDA chooses (as `cudaDeviceScheduleAuto` does for a context:
    /// spin while there are fewer active contexts than logical processors, else yield).
    Auto,
    /// `cudaSyncPolicySpin`: busy-wait: the lowest latency, a whole CPU core while waiting.
    Spin,
    /// `cudaSyncPolicyYield`: busy-wait, yielding the core to other threads between checks.
    Yield,
    /// `cudaSyncPolicyBlockingSync`: sleep on a synchronization primitive until the work is
    /// done: almost no CPU, a little more latency.
    BlockingSync,
    /// A value this crate's header does not name, as CUDA returned it (a driver has been seen
    /// to report -1 for a stream whose policy was never set). Setting it passes the value on
    /// for CUDA to judge.
    Other(i32),
}

impl SyncPolicy {
    fn raw(self) -> sys::cudaSynchronizationPolicy {
        type P = sys::cudaSynchronizationPolicy;
        match self {
            SyncPolicy::Auto => P::cudaSyncPolicyAuto,
            SyncPolicy::Spin => P::cudaSyncPolicySpin,
            SyncPolicy::Yield => P::cudaSyncPolicyYield,
            SyncPolicy::BlockingSync => P::cudaSyncPolicyBlockingSync,
            SyncPolicy::Other(value) => sys::cudaSynchronizationPolicy(value as u32),
        }
    }

    fn of(raw: sys::cudaSynchronizationPolicy) -> SyncPolicy {
        type P = sys::cudaSynchronizationPolicy;
        match raw {
            P::cudaSyncPolicyAuto => SyncPolicy::Auto,
            P::cudaSyncPolicySpin => SyncPolicy::Spin,
            P::cudaSyncPolicyYield => SyncPolicy::Yield,
            P::cudaSyncPolicyBlockingSync => SyncPolicy::BlockingSync,
            other => SyncPolicy::Other(other.0 as i32),
        }
    }
}

/// How the L2 cache treats accesses inside an access-policy window (`cudaAccessProperty`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AccessProperty {
    /// `cudaAccessPropertyNormal`: ordinary caching.
    Normal,
    /// `cudaAccessPropertyStreaming`: the lines are likely to be evicted first.
    Streaming,
    /// `cudaAccessPropertyPersisting`: the lines are kept preferentially, in the part of L2
    /// set aside for persisting accesses (`cudaLimitPersistingL2CacheSize`).
    Persisting,
    /// A value this crate's header does not name, as CUDA returned it. Setting it passes the
    /// value on for CUDA to judge.
    Other(i32),
}

impl AccessProperty {
    fn raw(self) -> sys::cudaAccessProperty {
        type A = sys::cudaAccessProperty;
        match self {
            AccessProperty::Normal => A::cudaAccessPropertyNormal,
            AccessProperty::Streaming => A::cudaAccessPropertyStreaming,
            AccessProperty::Persisting => A::cudaAccessPropertyPersisting,
            AccessProperty::Other(value) => sys::cudaAccessProperty(value as u32),
        }
    }

    fn of(raw: sys::cudaAccessProperty) -> AccessProperty {
        type A = sys::cudaAccessProperty;
        match raw {
            A::cudaAccessPropertyNormal => AccessProperty::Normal,
            A::cudaAccessPropertyStreaming => AccessProperty::Streaming,
            A::cudaAccessPropertyPersisting => AccessProperty::Persisting,
            other => AccessProperty::Other(other.0 as i32),
        }
    }
}

/// An L2 access-policy window (`cudaAccessPolicyWindow`): of the kernels' accesses to
/// `base_ptr .. base_ptr + num_bytes`, about `hit_ratio` get `hit_prop`, the rest `miss_prop`.
/// A cache hint: no address in it is ever dereferenced on the host, and CUDA "may align"
/// `base_ptr` and "restrict the maximum size and alignment" of `num_bytes` (NVIDIA's words).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct AccessPolicyWindow {
    /// The window's first device address.
    pub base_ptr: *mut c_void,
    /// The window's size; at most the device's `cudaDevAttrMaxAccessPolicyWindowSize`.
    pub num_bytes: usize,
    /// The fraction of the window's accesses that get `hit_prop`, in `0.0..=1.0`.
    pub hit_ratio: f32,
    /// The property of the hit fraction.
    pub hit_prop: AccessProperty,
    /// The property of the rest: [`AccessProperty::Normal`] or [`AccessProperty::Streaming`]
    /// (CUDA's rule).
    pub miss_prop: AccessProperty,
}

impl AccessPolicyWindow {
    /// The rules CUDA documents for a window, checked on the host.
    fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.hit_ratio) {
            return Err(Error::InvalidAccessPolicyWindow("the hit ratio must be within 0.0..=1.0"));
        }
        if self.miss_prop == AccessProperty::Persisting {
            return Err(Error::InvalidAccessPolicyWindow("the miss property must be Normal or Streaming"));
        }
        Ok(())
    }

    fn raw(&self) -> sys::cudaAccessPolicyWindow {
        sys::cudaAccessPolicyWindow {
            base_ptr: self.base_ptr,
            num_bytes: self.num_bytes,
            hitRatio: self.hit_ratio,
            hitProp: self.hit_prop.raw(),
            missProp: self.miss_prop.raw(),
        }
    }

    fn of(raw: &sys::cudaAccessPolicyWindow) -> AccessPolicyWindow {
        AccessPolicyWindow {
            base_ptr: raw.base_ptr,
            num_bytes: raw.num_bytes,
            hit_ratio: raw.hitRatio,
            hit_prop: AccessProperty::of(raw.hitProp),
            miss_prop: AccessProperty::of(raw.missProp),
        }
    }
}

impl StreamRef {
    /// Sets how a host thread waits for this stream's work submitted from now on
    /// ([`cudaStreamSetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// with `cudaLaunchAttributeSynchronizationPolicy`).
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] on a capturing stream (see the [module docs](crate::attributes));
    /// CUDA's errors (`cudaErrorInvalidValue` for a value it does not accept).
    pub fn set_sync_policy(&self, policy: SyncPolicy) -> Result<()> {
        let mut value = sys::cudaLaunchAttributeValue::default();
        value.syncPolicy = policy.raw();
        self.set_attribute(sys::cudaLaunchAttributeID::cudaLaunchAttributeSynchronizationPolicy, &value, || Ok(()))
    }

    /// How a host thread waits for this stream's work
    /// ([`cudaStreamGetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// with `cudaLaunchAttributeSynchronizationPolicy`). A stream whose policy was never set
    /// may read back a value the header does not name: [`SyncPolicy::Other`].
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] on a capturing stream; CUDA's errors.
    pub fn sync_policy(&self) -> Result<SyncPolicy> {
        let value = self.attribute(sys::cudaLaunchAttributeID::cudaLaunchAttributeSynchronizationPolicy)?;
        // SAFETY: `value` started zeroed and CUDA wrote the syncPolicy member; any bit pattern
        // is a valid `cudaSynchronizationPolicy` (an integer newtype).
        Ok(SyncPolicy::of(unsafe { value.syncPolicy }))
    }

    /// Sets the L2 access-policy window of kernels submitted to this stream from now on
    /// ([`cudaStreamSetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// with `cudaLaunchAttributeAccessPolicyWindow`; see the CUDA programming guide's "L2
    /// cache access policy"). The window is checked before CUDA sees it; a refused window
    /// leaves the stream's window as it was.
    ///
    /// # Errors
    /// [`Error::InvalidAccessPolicyWindow`] for a hit ratio outside `0.0..=1.0` (or NaN) or a
    /// persisting miss property; [`Error::AccessPolicyWindowTooLarge`] when `num_bytes` exceeds
    /// the device's `cudaDevAttrMaxAccessPolicyWindowSize` (0 on GPUs without L2 persistence,
    /// before compute capability 8.0); [`Error::CaptureMisuse`] on a capturing stream; CUDA's
    /// errors.
    pub fn set_access_policy_window(&self, window: AccessPolicyWindow) -> Result<()> {
        window.validate()?;
        let within_the_device_maximum = || {
            let device = self.device();
            let max = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMaxAccessPolicyWindowSize)?;
            let max = usize::try_from(max).unwrap_or(0);
            if window.num_bytes > max {
                return Err(Error::AccessPolicyWindowTooLarge {
                    num_bytes: window.num_bytes,
                    max,
                    device: device.ordinal(),
                });
            }
            Ok(())
        };
        let mut value = sys::cudaLaunchAttributeValue::default();
        value.accessPolicyWindow = window.raw();
        let id = sys::cudaLaunchAttributeID::cudaLaunchAttributeAccessPolicyWindow;
        self.set_attribute(id, &value, within_the_device_maximum)
    }

    /// The L2 access-policy window of this stream's kernels
    /// ([`cudaStreamGetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// with `cudaLaunchAttributeAccessPolicyWindow`), as CUDA holds it (possibly aligned).
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] on a capturing stream; CUDA's errors.
    pub fn access_policy_window(&self) -> Result<AccessPolicyWindow> {
        let value = self.attribute(sys::cudaLaunchAttributeID::cudaLaunchAttributeAccessPolicyWindow)?;
        // SAFETY: `value` started zeroed and CUDA wrote the accessPolicyWindow member; every
        // bit pattern is valid for its fields (a raw pointer, integers, an f32, integer
        // newtypes).
        Ok(AccessPolicyWindow::of(unsafe { &value.accessPolicyWindow }))
    }

    /// Sets attribute `id` to `value` once the stream is known not to be capturing and the
    /// check `valid` passes (so that a capturing stream sees no call but the capture check).
    fn set_attribute(
        &self,
        id: sys::cudaLaunchAttributeID,
        value: &sys::cudaLaunchAttributeValue,
        valid: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let _current = self.enter_runtime()?;
        let _transitions = crate::call::transitions::no_capture_transitions();
        self.refuse_capturing("a stream attribute is not set during capture (CUDA may invalidate it)")?;
        valid()?;
        // SAFETY: `raw` is live (or a special handle of the current device); `value` is a
        // valid attribute value whose member `id` names was written.
        check(unsafe { sys::cudaStreamSetAttribute(self.as_raw(), id, value) }, "cudaStreamSetAttribute")
    }

    fn attribute(&self, id: sys::cudaLaunchAttributeID) -> Result<sys::cudaLaunchAttributeValue> {
        let _current = self.enter_runtime()?;
        let _transitions = crate::call::transitions::no_capture_transitions();
        self.refuse_capturing("a stream attribute is not read during capture (CUDA may invalidate it)")?;
        let mut value = sys::cudaLaunchAttributeValue::default();
        // SAFETY: `raw` is live (or a special handle of the current device); `value` is a
        // valid out-pointer.
        check(unsafe { sys::cudaStreamGetAttribute(self.as_raw(), id, &mut value) }, "cudaStreamGetAttribute")?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(hit_ratio: f32, miss_prop: AccessProperty) -> AccessPolicyWindow {
        AccessPolicyWindow {
            base_ptr: std::ptr::null_mut(),
            num_bytes: 0,
            hit_ratio,
            hit_prop: AccessProperty::Persisting,
            miss_prop,
        }
    }

    #[test]
    fn policies_and_properties_round_trip_and_unknown_values_are_kept() {
        for policy in [SyncPolicy::Auto, SyncPolicy::Spin, SyncPolicy::Yield, SyncPolicy::BlockingSync] {
            assert_eq!(SyncPolicy::of(policy.raw()), policy);
        }
        assert_eq!(SyncPolicy::of(sys::cudaSynchronizationPolicy(u32::MAX)), SyncPolicy::Other(-1));
        assert_eq!(SyncPolicy::of(sys::cudaSynchronizationPolicy(0)), SyncPolicy::Other(0));
        for property in [AccessProperty::Normal, AccessProperty::Streaming, AccessProperty::Persisting] {
            assert_eq!(AccessProperty::of(property.raw()), property);
        }
        assert_eq!(AccessProperty::of(sys::cudaAccessProperty(77)), AccessProperty::Other(77));
        let raw = window(0.25, AccessProperty::Streaming).raw();
        assert_eq!(AccessPolicyWindow::of(&raw), window(0.25, AccessProperty::Streaming));
    }

    #[test]
    fn windows_cuda_rules_out_are_refused_on_the_host() {
        assert_eq!(window(0.0, AccessProperty::Normal).validate(), Ok(()));
        assert_eq!(window(1.0, AccessProperty::Streaming).validate(), Ok(()));
        for ratio in [-0.1, 1.01, f32::NAN, f32::INFINITY] {
            let refused = window(ratio, AccessProperty::Normal).validate();
            assert!(matches!(refused, Err(Error::InvalidAccessPolicyWindow(_))), "{ratio}: {refused:?}");
        }
        let persisting_miss = window(0.5, AccessProperty::Persisting).validate();
        assert!(matches!(persisting_miss, Err(Error::InvalidAccessPolicyWindow(_))));
    }
}
