//! Peer access: kernels and copies of one device reaching another device's memory directly
//! (over NVLink or PCIe), once enabled for the pair.

use super::Device;
use crate::call::capture_mode::uncapturable_call;
use crate::ffi::error::{Error, Result, check, take_last_error};
use crate::sys;
use std::ffi::c_int;

impl Device {
    /// Whether this device can access `peer`'s memory once [`enable_peer_access`](Device::enable_peer_access)
    /// is called ([`cudaDeviceCanAccessPeer`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PEER.html)).
    /// A device and itself: `false` (CUDA's answer; its own memory needs no peer access).
    /// Creates no context.
    ///
    /// # Errors
    /// CUDA's errors (`cudaErrorInvalidDevice` for an ordinal the process does not see).
    pub fn can_access_peer(self, peer: Device) -> Result<bool> {
        crate::ffi::inside_host_fn::refuse_inside_host_fn()?;
        let mut can: c_int = 0;
        // SAFETY: a valid out-pointer; ordinals are checked by CUDA.
        let code = unsafe { sys::cudaDeviceCanAccessPeer(&mut can, self.ordinal(), peer.ordinal()) };
        check(code, "cudaDeviceCanAccessPeer")?;
        Ok(can != 0)
    }

    /// Lets kernels and copies on this device access `peer`'s memory directly, in this device's
    /// primary context, for the rest of the process or until
    /// [`disable_peer_access`](Device::disable_peer_access)
    /// ([`cudaDeviceEnablePeerAccess`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PEER.html)).
    /// One direction only: `peer` reaching this device's memory needs its own call. Enabling it
    /// again is not an error. It covers memory of `cudaMalloc` (raw code, other libraries),
    /// not memory of stream-ordered pools, every [`DeviceBuffer`](crate::DeviceBuffer)'s
    /// included: for those, [`MemPool::set_access`](crate::MemPool::set_access) instead.
    ///
    /// # Errors
    /// [`Error::SameDevice`] for this device itself; CUDA's errors where
    /// [`Device::can_access_peer`] says no (`cudaErrorInvalidDevice` from the runtime,
    /// `cudaErrorPeerAccessUnsupported` from some drivers).
    pub fn enable_peer_access(self, peer: Device) -> Result<()> {
        refuse_same_device(self, peer)?;
        let _current = self.make_current()?;
        // A context-wide setting: no capture in progress forbids it or is invalidated.
        uncapturable_call(|| {
            // SAFETY: an ordinal and CUDA's only flag value, 0; this device is current.
            let code = unsafe { sys::cudaDeviceEnablePeerAccess(peer.ordinal(), 0) };
            if code == sys::cudaError::cudaErrorPeerAccessAlreadyEnabled {
                let _ = take_last_error();
                return Ok(());
            }
            check(code, "cudaDeviceEnablePeerAccess")
        })
    }

    /// Takes back [`enable_peer_access`](Device::enable_peer_access): work on this device no
    /// longer reaches `peer`'s memory directly (the crate's own copies between devices go
    /// through `cudaMemcpyPeerAsync`, which needs no peer access). Work still running that
    /// reads `peer`'s memory through a raw address faults (a sticky error of the context):
    /// disable only once such kernels have completed. Disabling access that is not enabled is
    /// not an error
    /// ([`cudaDeviceDisablePeerAccess`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PEER.html)).
    ///
    /// # Errors
    /// [`Error::SameDevice`] for this device itself; CUDA's errors.
    pub fn disable_peer_access(self, peer: Device) -> Result<()> {
        refuse_same_device(self, peer)?;
        let _current = self.make_current()?;
        uncapturable_call(|| {
            // SAFETY: an ordinal; this device is current.
            let code = unsafe { sys::cudaDeviceDisablePeerAccess(peer.ordinal()) };
            if code == sys::cudaError::cudaErrorPeerAccessNotEnabled {
                let _ = take_last_error();
                return Ok(());
            }
            check(code, "cudaDeviceDisablePeerAccess")
        })
    }
}

/// [`Error::SameDevice`] for a device and itself: its own memory needs no peer access.
fn refuse_same_device(device: Device, peer: Device) -> Result<()> {
    if device == peer {
        return Err(Error::SameDevice { what: "peer access is between two devices", device: device.ordinal() });
    }
    Ok(())
}
