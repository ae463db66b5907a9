//! A pool of streams handed out as exclusive leases. Unlike a round-robin pool (PyTorch's hands
//! its 33rd caller the 1st caller's stream), a stream is never leased to two holders at once.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::{Stream, StreamOptions, StreamRef};
use std::ops::Deref;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Streams of one device and one set of [`StreamOptions`], created lazily up to a bound.
///
/// `acquire` is lock-free: it claims a free slot with one compare-and-swap (creating the slot's
/// stream the first time). When every slot is leased it returns [`Error::PoolExhausted`]; it
/// never waits and never shares.
///
/// A released stream keeps its pending work: the next holder's work is ordered after it.
#[derive(Debug)]
pub struct StreamPool {
    device: Device,
    options: StreamOptions,
    slots: Box<[Slot]>,
}

#[derive(Debug, Default)]
struct Slot {
    leased: AtomicBool,
    stream: OnceLock<Stream>,
}

impl StreamPool {
    /// A pool of at most `capacity` streams of `device` created with `options`. Creates none yet.
    ///
    /// # Errors
    /// [`Error::PriorityOutOfRange`] if `options` has a priority outside the device's range.
    pub fn new(device: Device, options: StreamOptions, capacity: usize) -> Result<StreamPool> {
        if let Some(priority) = options.priority {
            device.check_priority(priority)?;
        }
        let slots = (0..capacity).map(|_| Slot::default()).collect();
        Ok(StreamPool { device, options, slots })
    }

    /// A pool with one stream per hardware queue ([`Device::hardware_queues`]): as many
    /// leases as the driver has queues, so busy leases need not share a queue, where a stream
    /// waiting on an event would hold back another lease's work (a false dependency). Which
    /// queue a stream maps to is the driver's choice, and every other stream of the process
    /// maps onto the same queues: this bounds the sharing, it cannot forbid it.
    ///
    /// # Errors
    /// As [`StreamPool::new`].
    pub fn with_hardware_queues(device: Device, options: StreamOptions) -> Result<StreamPool> {
        StreamPool::new(device, options, Device::hardware_queues())
    }

    /// Leases a stream no one else holds; it returns to the pool when the lease drops.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when all `capacity` streams are leased; the errors of
    /// [`Stream::new`] when a new stream must be created.
    #[inline]
    pub fn acquire(&self) -> Result<StreamLease<'_>> {
        // Lowest slot first: streams that exist are reused before new ones are created.
        for slot in self.slots.iter() {
            if slot.leased.load(Ordering::Relaxed) {
                continue;
            }
            if slot.leased.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                continue;
            }
            if slot.stream.get().is_none() {
                match Stream::new(self.device, self.options) {
                    // Only the slot's holder gets here, so the set cannot race.
                    Ok(stream) => drop(slot.stream.set(stream)),
                    Err(error) => {
                        slot.leased.store(false, Ordering::Release);
                        return Err(error);
                    }
                }
            }
            return Ok(StreamLease { slot });
        }
        Err(Error::PoolExhausted { capacity: self.slots.len() })
    }

    /// How many streams exist (leased or free).
    pub fn created(&self) -> usize {
        self.slots.iter().filter(|slot| slot.stream.get().is_some()).count()
    }

    /// The bound.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The device of the pool's streams.
    pub fn device(&self) -> Device {
        self.device
    }
}

/// An exclusive lease on a pooled stream; derefs to it, and returns it on drop. It borrows the
/// pool, so it cannot outlive it.
#[derive(Debug)]
pub struct StreamLease<'a> {
    slot: &'a Slot,
}

impl Deref for StreamLease<'_> {
    type Target = StreamRef;

    fn deref(&self) -> &StreamRef {
        self.slot.stream.get().expect("a leased slot always holds its stream")
    }
}

impl Drop for StreamLease<'_> {
    fn drop(&mut self) {
        self.slot.leased.store(false, Ordering::Release);
    }
}
