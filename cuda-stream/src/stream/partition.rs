//! Streams on a partition of a device's SMs: CUDA's green contexts
//! ([Green Contexts](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
//! through the driver API: the runtime API has them from CUDA 13.1 only).
//!
//! [`Device::split_sms`] splits the device's SMs into disjoint partitions; each
//! [`SmPartition`] is a green context, and [`SmPartition::stream`] creates owned streams whose
//! kernels run on that partition's SMs only, while other work uses the rest of the device.
//! Every stream operation works on them as on any owned stream (they are real handles of the
//! device: records and waits with the device's events, launches, stream-ordered memory,
//! captures, host functions, completions; probed on CUDA 13.0).
//!
//! * **Lifetime:** a partition is kept alive by its streams (and by its `SmPartition` clones):
//!   the green context is destroyed after the last of them, outside any host function.
//!   [`Stream::into_raw`] of a partition's stream keeps the partition alive for the rest of the
//!   process, as the raw handle may still be used.
//! * **Refusals:** a split the device cannot make (more partitions of that size than its SMs
//!   allow) is [`Error::SmSplit`], with what it could make; zero SMs or partitions too.
//!   Partition streams are non-blocking (CUDA's rule for green-context streams).
//! * A stream of a green context made outside this crate (borrowed through
//!   [`BorrowedStream::borrow_raw`](crate::BorrowedStream::borrow_raw)) is still
//!   [`Error::ForeignContext`]: this crate does not know how long its context lives.

use crate::call::live;
use crate::device::Device;
use crate::ffi::driver::{self, DevResource};
use crate::ffi::error::{Error, Result};
use crate::ffi::inside_host_fn::{call_outside_host_fn, refuse_inside_host_fn};
use crate::ffi::priority::Priority;
use crate::stream::{Ownership, Stream, StreamRef};
use std::fmt;
use std::sync::Arc;

/// A partition of a device's SMs, a green context ([`Device::split_sms`]). Clones share it.
#[derive(Clone)]
pub struct SmPartition {
    green: Arc<GreenContext>,
}

/// The green context behind a partition, destroyed when the last clone and stream let go.
struct GreenContext {
    /// The `CUgreenCtx`, as an address.
    raw: usize,
    device: Device,
    sm_count: u32,
}

impl Drop for GreenContext {
    fn drop(&mut self) {
        let raw = self.raw;
        call_outside_host_fn(move || {
            // SAFETY: the last holder of the context let go: its streams, which each hold
            // it, are destroyed (a stream's drop destroys the stream before it lets go).
            let _ = unsafe { driver::green_context_destroy(raw as *mut std::ffi::c_void) };
        });
    }
}

impl fmt::Debug for SmPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmPartition")
            .field("device", &self.green.device)
            .field("sm_count", &self.green.sm_count)
            .finish()
    }
}

impl PartialEq for SmPartition {
    fn eq(&self, other: &SmPartition) -> bool {
        Arc::ptr_eq(&self.green, &other.green)
    }
}

impl Eq for SmPartition {}

impl std::hash::Hash for SmPartition {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.green).hash(state);
    }
}

impl Device {
    /// Splits this device's SMs into `count` disjoint partitions of at least `min_sms` SMs
    /// each ([`cuDevSmResourceSplitByCount`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// then a green context per partition). CUDA rounds a partition up to its granularity
    /// ([`SmPartition::sm_count`] says what each got: 8 SMs at least, in steps of 8, on an
    /// H100); the SMs left over belong to no partition and still run ordinary streams' work.
    ///
    /// # Errors
    /// [`Error::SmSplit`] when the device cannot make `count` partitions of that size, or
    /// either number is zero; `cudaErrorNotSupported` (as `cuGreenCtxCreate`) on a driver
    /// older than CUDA 12.4; CUDA's errors.
    pub fn split_sms(self, min_sms: u32, count: u32) -> Result<Vec<SmPartition>> {
        refuse_inside_host_fn()?;
        let _current = self.make_current()?;
        let all = driver::device_sm_resource(self.ordinal())?;
        // More SMs than the device has: CUDA answers cudaErrorInvalidResourceConfiguration
        // rather than no groups (CUDA 13.0).
        let possible = if min_sms == 0 || count == 0 || min_sms > all.sm[0] {
            0
        } else {
            driver::sm_groups_possible(&all, min_sms)?
        };
        if min_sms == 0 || count == 0 || possible < count {
            return Err(Error::SmSplit { device: self.ordinal(), min_sms, count, possible, sm_count: all.sm[0] });
        }
        driver::split_sms(&all, min_sms, count)?
            .iter()
            .map(|group: &DevResource| {
                let raw = driver::green_context_create(self.ordinal(), group)? as usize;
                Ok(SmPartition { green: Arc::new(GreenContext { raw, device: self, sm_count: group.sm[0] }) })
            })
            .collect()
    }
}

impl SmPartition {
    /// How many SMs the partition has.
    pub fn sm_count(&self) -> u32 {
        self.green.sm_count
    }

    /// The device it partitions.
    pub fn device(&self) -> Device {
        self.green.device
    }

    /// Creates a non-blocking stream whose kernels run on this partition's SMs
    /// ([`cuGreenCtxStreamCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)),
    /// at `priority` (CUDA's default, 0, for `None`). The stream keeps the partition alive.
    ///
    /// # Errors
    /// [`Error::PriorityOutOfRange`] outside the device's range; [`Error::InsideHostFn`];
    /// CUDA's errors.
    pub fn stream(&self, priority: Option<Priority>) -> Result<Stream> {
        refuse_inside_host_fn()?;
        let device = self.green.device;
        let priority = match priority {
            None => 0,
            Some(priority) => device.check_priority(priority)?.value(),
        };
        // SAFETY: a live green context: `self` holds it.
        let raw = unsafe { driver::green_stream_create(self.green.raw as *mut std::ffi::c_void, priority)? };
        live::stream_created();
        let mut stream =
            Stream { stream: StreamRef::new(raw, device, Ownership::Owned), partition: Some(self.clone()) };
        // Nobody else has the handle yet: reading its id is safe now (see `Stream::new`).
        stream.stream.id = Some(stream.read_id()?);
        stream.stream.non_blocking = Some(true);
        stream.stream.priority = Some(driver::stream_priority(raw)?);
        Ok(stream)
    }
}
