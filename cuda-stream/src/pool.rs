//! A pool of streams handed out as exclusive leases. Unlike a round-robin pool (PyTorch's hands
//! its 33rd caller the 1st caller's stream), a stream is never leased to two holders at once.
//!
//! # How `acquire` finds a free stream
//!
//! The free slots are a lock-free stack of slot indices (a Treiber stack): `acquire` pops the
//! top index, the lease's drop pushes it back. Each is one compare-and-swap on the stack's top
//! in the common case, whatever the capacity and however many slots are leased: no scan. Under
//! contention a compare-and-swap fails only because another thread's succeeded (or spuriously,
//! on machines with load-linked/store-conditional), so the pool as a whole always makes progress
//! (lock-free); a failed one backs off briefly (exponentially, to
//! at most 64 spin hints) before it retries, and one call retries about as many times
//! as there are threads racing it, never as many times as there are slots. (The scan this
//! replaces started at the lowest slot: with k slots leased it read k flags first, and under
//! contention it could even miss a slot freed behind it and report exhaustion wrongly.)
//!
//! Why a stack and not, say, a per-thread start hint with a bounded probe: a probe that finds
//! nothing must scan every slot before it may say [`Error::PoolExhausted`] truthfully, so the
//! hint only moves the linear cost to the crowded case. The stack is empty exactly when every
//! slot is leased, so exhaustion is reported only when it is true at one instant. Its one shared
//! cache line is the price: every acquire and release of the pool touches it (as a mutex-guarded
//! free list touches its lock), without ever blocking a thread.
//!
//! Soundness (no stream leased twice):
//! * Every slot index is, at any instant, either on the stack exactly once or held by exactly
//!   one lease: the stack starts with every index once; a successful pop moves its index to the
//!   one caller whose compare-and-swap succeeded; only that lease's drop pushes it back, once.
//! * A pop reads the index under the top (`next[top]`) before its compare-and-swap. That read
//!   is stale only if the top index was popped and pushed again in between (only the holder of
//!   an index writes its `next`), and every successful compare-and-swap adds one to a tag packed
//!   beside the index in the same 64-bit word, so the stale pop's compare-and-swap fails (the
//!   ABA problem). The tag has [`TAG_BITS`] bits: a pop could be fooled only if exactly a
//!   multiple of 2^44 (about 1.8 × 10^13) other pushes and pops completed between two of its
//!   instructions, which at the pool's ~10 ns per operation is more than two days.
//! * Memory order: a push publishes with `Release` and a pop takes with `Acquire`; every write
//!   of the top is a read-modify-write, so the pop synchronizes with the push that put its index
//!   there. Everything the previous holder did with the stream happens before the next holder
//!   gets it, and the pop's read of `next` sees the push's write.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::{Stream, StreamOptions, StreamRef};
use std::ops::Deref;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Streams of one device and one set of [`StreamOptions`], created lazily up to a bound.
///
/// `acquire` is lock-free and O(1): it pops a free slot off a lock-free stack (see the module
/// source for the design and why no stream is ever leased twice), creating the slot's stream
/// the first time. The most recently released stream is leased first, so streams that exist
/// are reused before new ones are created, and [`StreamPool::created`] never exceeds the most
/// leases held at once. When every slot is leased it returns [`Error::PoolExhausted`]; it never
/// waits and never shares.
///
/// A released stream keeps its pending work: the next holder's work is ordered after it. It
/// also keeps a capture its holder leaked (`mem::forget` of the [`Capture`](crate::Capture)
/// guard ends the borrow, not the capture): the next holder's work would then go into that
/// graph. Do not leak captures of leased streams.
#[derive(Debug)]
pub struct StreamPool {
    device: Device,
    options: StreamOptions,
    slots: Box<[Slot]>,
    free: FreeList,
}

#[derive(Debug, Default)]
struct Slot {
    stream: OnceLock<Stream>,
}

impl StreamPool {
    /// The largest capacity a pool can have: slot indices share a 64-bit word with the ABA tag.
    pub const MAX_CAPACITY: usize = FreeList::MAX_LEN as usize;

    /// A pool of at most `capacity` streams of `device` created with `options`. Creates none yet.
    ///
    /// # Errors
    /// [`Error::PriorityOutOfRange`] if `options` has a priority outside the device's range;
    /// [`Error::PoolTooLarge`] above [`StreamPool::MAX_CAPACITY`] (about a million streams).
    pub fn new(device: Device, options: StreamOptions, capacity: usize) -> Result<StreamPool> {
        if capacity > StreamPool::MAX_CAPACITY {
            return Err(Error::PoolTooLarge { capacity, max: StreamPool::MAX_CAPACITY });
        }
        if let Some(priority) = options.priority {
            device.check_priority(priority)?;
        }
        let slots = (0..capacity).map(|_| Slot::default()).collect();
        Ok(StreamPool { device, options, slots, free: FreeList::full(capacity as u32) })
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
        let Some(index) = self.free.pop() else {
            return Err(Error::PoolExhausted { capacity: self.slots.len() });
        };
        // The lease owns the slot from here: its drop returns the slot, also on the error path.
        let lease = StreamLease { pool: self, index };
        let slot = &self.slots[index as usize];
        if slot.stream.get().is_none() {
            // Only the slot's holder gets here, so the set cannot race. After a failure the
            // slot goes back on top without a stream, and the next acquire tries again.
            drop(slot.stream.set(Stream::new(self.device, self.options)?));
        }
        Ok(lease)
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
    pool: &'a StreamPool,
    index: u32,
}

impl Deref for StreamLease<'_> {
    type Target = StreamRef;

    fn deref(&self) -> &StreamRef {
        self.pool.slots[self.index as usize].stream.get().expect("a leased slot always holds its stream")
    }
}

impl Drop for StreamLease<'_> {
    fn drop(&mut self) {
        self.pool.free.push(self.index);
    }
}

/// Bits of the top word that count its changes (the ABA tag); the rest hold the index link.
const TAG_BITS: u32 = 44;
const LINK_BITS: u32 = 64 - TAG_BITS;
const LINK_MASK: u64 = (1 << LINK_BITS) - 1;

/// A lock-free stack of the indices `0..len` (a Treiber stack), for the pool's free slots.
///
/// Indices are stored as links, `index + 1`, with 0 for "none". The top is one 64-bit word:
/// the link of the top index in the low [`LINK_BITS`] bits, a tag in the high [`TAG_BITS`]
/// bits that every successful change increments (see the module docs for why).
#[derive(Debug)]
struct FreeList {
    top: CachePadded<AtomicU64>,
    /// For each index on the stack, the link of the index below it. Written only by the
    /// holder of the index, just before pushing it.
    next: Box<[AtomicU32]>,
}

/// Keeps the stack's top alone on its cache lines, so that the pool's other fields (read on
/// every acquire) are not invalidated by every change of the top. 128 bytes: adjacent-line
/// prefetching pairs 64-byte lines on x86.
#[derive(Debug)]
#[repr(align(128))]
struct CachePadded<T>(T);

impl<T> Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl FreeList {
    /// The most indices a stack holds: links (index + 1) must fit [`LINK_BITS`] bits.
    const MAX_LEN: u32 = (1 << LINK_BITS) - 1;

    /// The stack of every index `0..len`, 0 on top, then 1, 2, ...
    fn full(len: u32) -> FreeList {
        debug_assert!(len <= FreeList::MAX_LEN);
        let next = (0..len).map(|index| AtomicU32::new(if index + 1 < len { index + 2 } else { 0 })).collect();
        FreeList { top: CachePadded(AtomicU64::new(u64::from(len.min(1)))), next }
    }

    /// `top` with `link` on top, and the tag advanced by one.
    fn next_top(top: u64, link: u32) -> u64 {
        ((top >> LINK_BITS).wrapping_add(1) << LINK_BITS) | u64::from(link)
    }

    /// Takes the top index, or `None` when the stack is empty (every index is held).
    #[inline]
    fn pop(&self) -> Option<u32> {
        let (mut top, mut backoff) = (self.top.load(Ordering::Acquire), Backoff::default());
        loop {
            let index = ((top & LINK_MASK) as u32).checked_sub(1)?;
            // Stale only if `index` was popped and pushed since `top` was read; the tag then
            // differs and the exchange below fails.
            let below = self.next[index as usize].load(Ordering::Relaxed);
            match self.top.compare_exchange_weak(
                top,
                FreeList::next_top(top, below),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(index),
                Err(_) => {
                    backoff.spin();
                    top = self.top.load(Ordering::Acquire);
                }
            }
        }
    }

    /// Puts back `index`, which the caller took with [`FreeList::pop`] and holds.
    #[inline]
    fn push(&self, index: u32) {
        let (mut top, mut backoff) = (self.top.load(Ordering::Relaxed), Backoff::default());
        loop {
            self.next[index as usize].store((top & LINK_MASK) as u32, Ordering::Relaxed);
            match self.top.compare_exchange_weak(
                top,
                FreeList::next_top(top, index + 1),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(_) => {
                    backoff.spin();
                    top = self.top.load(Ordering::Relaxed);
                }
            }
        }
    }
}

/// Exponential backoff after a failed compare-and-swap on the top: a failure means another
/// thread just changed it, and retrying at once would pull the cache line away from the threads
/// finishing their operations (the retry storm that makes an unbacked Treiber stack slower under
/// contention). Never reached without contention.
#[derive(Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Spins 2, 4, ... up to 64 hints; the caller then reads the top afresh and retries.
    #[cold]
    fn spin(&mut self) {
        self.failures = (self.failures + 1).min(6);
        for _ in 0..1u32 << self.failures {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FreeList;
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn pops_every_index_once_lowest_first_then_the_last_pushed() {
        let list = FreeList::full(4);
        assert_eq!((0..5).map(|_| list.pop()).collect::<Vec<_>>(), [Some(0), Some(1), Some(2), Some(3), None]);
        list.push(2);
        list.push(0);
        assert_eq!((list.pop(), list.pop(), list.pop()), (Some(0), Some(2), None));
        assert_eq!(FreeList::full(0).pop(), None);
    }

    #[test]
    fn the_tag_wraps_without_touching_the_link() {
        let top = (((1u64 << super::TAG_BITS) - 1) << super::LINK_BITS) | 5;
        assert_eq!(FreeList::next_top(top, 7), 7);
    }

    /// Threads pop and push as fast as they can. Each holder sets its index's flag after the
    /// pop and clears it before the push: a flag found set means two holders at once. With no
    /// more threads than indices, a pop never finds the stack empty: at most `threads - 1`
    /// others hold an index at any instant, so emptiness would be a lie.
    fn hammer(threads: usize, len: u32, rounds: usize) -> usize {
        let list = FreeList::full(len);
        let held: Vec<AtomicBool> = (0..len).map(|_| AtomicBool::new(false)).collect();
        let (empty, barrier) = (AtomicUsize::new(0), Barrier::new(threads));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    barrier.wait();
                    for _ in 0..rounds {
                        let Some(index) = list.pop() else {
                            empty.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        assert!(!held[index as usize].swap(true, Ordering::Relaxed), "index {index} held twice");
                        std::hint::spin_loop();
                        held[index as usize].store(false, Ordering::Relaxed);
                        list.push(index);
                    }
                });
            }
        });
        let mut left: Vec<u32> = std::iter::from_fn(|| list.pop()).collect();
        left.sort_unstable();
        assert_eq!(left, (0..len).collect::<Vec<_>>(), "every index is back exactly once");
        empty.into_inner()
    }

    #[test]
    fn threads_never_share_an_index_nor_see_a_false_empty() {
        assert_eq!(hammer(8, 8, 50_000), 0, "the stack looked empty while an index was free");
        // More threads than indices: the empty path under contention, still never shared.
        hammer(8, 3, 50_000);
    }
}
