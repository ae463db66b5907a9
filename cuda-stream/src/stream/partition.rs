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
//!   process, as the raw handle may still be used. A graph that captured work of a partition's
//!   stream (a capture begun on it, or one it joined through
//!   [`wait_stream`](StreamRef::wait_stream) or [`wait_event`](StreamRef::wait_event)) keeps
//!   the partition alive too, with every executable and clone of it: its kernel nodes run on
//!   the green context.
//! * **Refusals:** a split the device cannot make (more partitions of that size than its SMs
//!   allow) is [`Error::SmSplit`], with what it could make; zero SMs or partitions too.
//!   Partition streams are non-blocking (CUDA's rule for green-context streams).
//! * A stream of a green context made outside this crate (borrowed through
//!   [`BorrowedStream::borrow_raw`](crate::BorrowedStream::borrow_raw)) is still
//!   [`Error::ForeignContext`]: this crate does not know how long its context lives.

use crate::call::live;
use crate::device::Device;
use crate::device::keep_alive::keep_alive;
use crate::ffi::driver::{self, DevResource};
use crate::ffi::error::{Error, Result};
use crate::ffi::inside_host_fn::{call_outside_host_fn, refuse_inside_host_fn};
use crate::ffi::priority::Priority;
use crate::stream::{Ownership, Stream, StreamRef};
use crate::sys;
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

/// A stream's reference to its partition's green context, in [`StreamRef`] (which every view
/// copies): the address of the `Arc`'s context, null for a stream of no partition. The
/// [`Stream`] holds one strong count of it (taken by [`PartitionRef::owned_by_stream`], given
/// back by [`PartitionRef::release`]); a view only looks, for as long as it borrows the stream.
#[derive(Copy, Clone, Debug)]
pub(crate) struct PartitionRef(*const GreenContext);

impl PartitionRef {
    /// A stream of no partition.
    pub(crate) const NONE: PartitionRef = PartitionRef(std::ptr::null());

    /// The reference a partition's new stream owns.
    fn owned_by_stream(partition: SmPartition) -> PartitionRef {
        PartitionRef(Arc::into_raw(partition.green))
    }

    /// Whether the stream belongs to a partition (no reference taken).
    pub(crate) fn is_some(self) -> bool {
        !self.0.is_null()
    }

    /// The partition, as a clone that keeps its green context alive on its own (for a graph
    /// that captured work of the stream); `None` for a stream of no partition.
    pub(crate) fn get(self) -> Option<SmPartition> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: the stream that owns a strong count of this context is alive: `self` was
        // copied out of a `StreamRef` borrowed from it (a view never outlives its stream).
        unsafe { Arc::increment_strong_count(self.0) };
        // SAFETY: the count just taken is the one this `Arc` owns.
        Some(SmPartition { green: unsafe { Arc::from_raw(self.0) } })
    }

    /// Gives back the stream's own count, as an `SmPartition` to drop once the stream is
    /// destroyed.
    ///
    /// # Safety
    /// Called once per stream, by its owner, with no view of it used afterwards.
    pub(crate) unsafe fn release(&mut self) -> Option<SmPartition> {
        let raw = std::mem::replace(&mut self.0, std::ptr::null());
        // SAFETY: the caller's contract: the count `owned_by_stream` took, given back once.
        (!raw.is_null()).then(|| SmPartition { green: unsafe { Arc::from_raw(raw) } })
    }
}

impl StreamRef {
    /// Gives `graph`, the graph of a capture this stream is part of, a reference of the
    /// stream's partition (a CUDA user object): the graph's kernel nodes run on the partition's
    /// green context, which then lives as long as the graph and every executable and clone of
    /// it, whichever the stream and the partition's own handles are dropped first. Nothing
    /// for a stream of no partition.
    ///
    /// # Errors
    /// CUDA's errors creating or handing over the user object.
    pub(crate) fn keep_partition_in(&self, graph: sys::cudaGraph_t) -> Result<()> {
        match self.partition.get() {
            None => Ok(()),
            Some(partition) => keep_alive(graph, self.device(), Box::new(partition)).map(drop),
        }
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
        let mut stream = Stream { stream: StreamRef::new(raw, device, Ownership::Owned) };
        stream.stream.partition = PartitionRef::owned_by_stream(self.clone());
        // Nobody else has the handle yet: reading its id is safe now (see `Stream::new`).
        stream.stream.id = Some(stream.read_id()?);
        stream.stream.non_blocking = Some(true);
        stream.stream.priority = Some(driver::stream_priority(raw)?);
        Ok(stream)
    }
}
