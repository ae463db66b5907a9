//! A pool of streams handed out as exclusive leases. Unlike a round-robin pool (PyTorch's hands
//! its 33rd caller the 1st caller's stream), a stream is never leased to two holders at once.
//!
//! # How `acquire` finds a free stream
//!
//! The free slots are lock-free stacks of slot indices (Treiber stacks), each top word alone on
//! its cache lines:
//! * **shards**, holding slots whose stream exists: one per hardware thread up to 64 (a power
//!   of two, at most the capacity). Every thread has a home shard (threads are numbered in the
//!   order they first touch a pool, and the number picks the shard). A lease's drop pushes its
//!   slot onto the releasing thread's home shard, and `acquire` pops from the home shard first,
//!   then from the others in turn. A thread that takes and returns streams thus works on its
//!   own cache line: threads sharing a pool do not contend for one word (a single shared stack
//!   lost to a C++ mutex free list from 8 threads on: every operation of every thread retried
//!   on the same line).
//! * **fresh**, holding the slots that have no stream yet (all of them at first, and a slot
//!   whose creation failed): taken only when every shard was found empty. Streams that exist are
//!   reused before new ones are created: without concurrent acquires and releases,
//!   [`StreamPool::created`] never exceeds the most leases held at once (a release onto a shard
//!   an acquire has already passed can send that acquire to a fresh slot).
//!
//! Each push and pop is one compare-and-swap on a top word in the common case, whatever the
//! capacity and however many slots are leased: no scan of the slots. A failed compare-and-swap
//! means another thread's succeeded (or a spurious failure, on machines with
//! load-linked/store-conditional), so the pool as a whole always makes progress (lock-free); it
//! backs off briefly (exponentially, to at most 64 spin hints) before it retries.
//!
//! Exhaustion is reported only when it is true at one instant. Finding every stack empty in
//! turn is not enough (a slot may have been pushed onto a stack already passed), so `acquire`
//! then reads every top word twice: every change of a top word changes its tag, so if each
//! word read the same twice, each stack was empty over the whole interval between its two
//! reads, and all those intervals contain the instant between the two rounds of reads. That
//! instant is a point of the single total order of sequentially consistent operations: every
//! successful compare-and-swap of a top and every read of the double collect is `SeqCst`, and
//! a `SeqCst` read sees the last `SeqCst` write of its word before it in that order. With
//! `Acquire` reads alone, the language (and Miri's weak-memory emulation, which found it)
//! lets one word be read as it was before a slot moved onto it and another as it is after the
//! slot left it: every slot looks held at once when none is. On x86 the `SeqCst` forms are the
//! same instructions (`lock cmpxchg`, `mov`); on ARMv8 they are the acquire-release ones. If
//! any word changed, another thread's operation succeeded meanwhile, and `acquire` looks
//! again, at every stack, its home shard included. While every slot is leased and their holders keep
//! taking and returning them, an acquire can thus look again many times before it returns
//! [`Error::PoolExhausted`]: it never blocks, but it is not bounded either.
//!
//! Soundness (no stream leased twice):
//! * Every slot index is, at any instant, either on exactly one stack exactly once or held by
//!   exactly one lease: the fresh stack starts with every index once; a successful pop moves
//!   its index to the one caller whose compare-and-swap succeeded; only that lease's drop
//!   pushes it back, once, onto one stack.
//! * A pop reads the index under the top (`next[top]`) before its compare-and-swap. That read
//!   is stale only if the top index was popped since `top` was read (only the holder of an
//!   index writes its `next`, just before pushing it, onto any stack), and every successful
//!   compare-and-swap adds one to a tag packed beside the index in the same 64-bit word, so the
//!   stale pop's compare-and-swap fails (the ABA problem). The tag has [`TAG_BITS`] bits: a
//!   pop could be fooled only if exactly a multiple of 2^44 (about 1.8 × 10^13) other pushes
//!   and pops of its stack completed between two of its instructions, which at the pool's
//!   ~10 ns per operation is more than two days.
//! * Memory order: a push publishes with a `SeqCst` (hence release) compare-and-swap and a pop
//!   takes with a `SeqCst` (hence acquire) one; every write of a top is a read-modify-write, so
//!   the pop synchronizes with the push that put its index there. Everything the previous holder did with the stream happens before the next holder
//!   gets it, and the pop's read of `next` sees the push's write.

use crate::device::Device;
use crate::ffi::error::{Error, Result};
use crate::stream::{Stream, StreamOptions, StreamRef};
use std::ops::Deref;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread::available_parallelism;

/// Streams of one device and one set of [`StreamOptions`], created lazily up to a bound.
///
/// `acquire` is lock-free and does not scan the slots: it pops a free slot off lock-free stacks,
/// up to one per hardware thread, so that threads sharing a pool seldom contend (see the module
/// source for the design and why no stream is ever leased twice), creating the slot's stream
/// the first time. Streams that exist are reused before new ones are created, those on this
/// thread's own stack first (the one released there last first): without concurrent acquires
/// and releases, [`StreamPool::created`] never exceeds the most leases held at once. When every slot is leased it returns
/// [`Error::PoolExhausted`]; it never waits and never shares.
///
/// A released stream keeps its pending work: the next holder's work is ordered after it. A
/// stream that comes back still capturing (its holder leaked the [`Capture`](crate::Capture)
/// guard with `mem::forget`, which ends the borrow, not the capture; or it joined a capture
/// that has not ended) is never handed on: the next holder's work would go into that graph.
/// Its slot is quarantined for the pool's life, and [`StreamPool::quarantined`] counts it. The
/// check reads the stream's capture status only while some stream of the process may be
/// capturing; otherwise a release costs what it did.
#[derive(Debug)]
pub struct StreamPool {
    device: Device,
    options: StreamOptions,
    slots: Box<[Slot]>,
    free: FreeSlots,
    /// The name given by `nvtx_name`, for streams created after it.
    #[cfg(feature = "nvtx")]
    nvtx_name: std::sync::Mutex<Option<Box<str>>>,
}

#[derive(Debug, Default)]
struct Slot {
    stream: OnceLock<Stream>,
    /// Set when the stream came back capturing: the slot is never handed out again.
    quarantined: std::sync::atomic::AtomicBool,
}

impl StreamPool {
    /// The largest capacity a pool can have: slot indices share a 64-bit word with the ABA tag.
    pub const MAX_CAPACITY: usize = FreeSlots::MAX_LEN as usize;

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
        let parallelism = available_parallelism().map_or(1, std::num::NonZero::get);
        Ok(StreamPool {
            device,
            options,
            slots,
            free: FreeSlots::new(capacity as u32, parallelism),
            #[cfg(feature = "nvtx")]
            nvtx_name: std::sync::Mutex::new(None),
        })
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
        let Some(index) = self.free.pop(home()) else {
            return Err(Error::PoolExhausted { capacity: self.slots.len() });
        };
        // The lease owns the slot from here: its drop returns the slot, also on the error path.
        let lease = StreamLease { pool: self, index };
        let slot = &self.slots[index as usize];
        if slot.stream.get().is_none() {
            // Only the slot's holder gets here, so the set cannot race. After a failure the
            // slot goes back to the fresh stack, and a later acquire tries again.
            drop(slot.stream.set(Stream::new(self.device, self.options)?));
            #[cfg(feature = "nvtx")]
            self.name_for_nvtx(index as usize);
        }
        Ok(lease)
    }

    /// Shows each stream of the pool in NVIDIA's tools as `name` and its slot's number
    /// (`"decode 0"`, `"decode 1"`, ...), those created later too (`nvtxNameCudaStreamA`, see
    /// [`StreamRef::nvtx_name`]). Feature `nvtx`; nothing without a tool attached. Naming
    /// again renames them.
    #[cfg(feature = "nvtx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
    pub fn nvtx_name(&self, name: &str) {
        *self.nvtx_name.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(name.into());
        for index in 0..self.slots.len() {
            self.name_for_nvtx(index);
        }
    }

    /// Names slot `index`'s stream, if it exists, after the pool's name, if it has one.
    #[cfg(feature = "nvtx")]
    fn name_for_nvtx(&self, index: usize) {
        let name = self.nvtx_name.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(name), Some(stream)) = (name.as_deref(), self.slots[index].stream.get()) {
            stream.nvtx_name(&format!("{name} {index}"));
        }
    }

    /// How many streams exist (leased or free).
    pub fn created(&self) -> usize {
        self.slots.iter().filter(|slot| slot.stream.get().is_some()).count()
    }

    /// How many slots were quarantined because their stream came back from a lease still
    /// capturing: they count against the capacity and are never leased again.
    pub fn quarantined(&self) -> usize {
        self.slots.iter().filter(|slot| slot.quarantined.load(Ordering::Relaxed)).count()
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
        let slot = &self.pool.slots[self.index as usize];
        let created = slot.stream.get();
        if crate::call::live_captures::may_capture() && created.is_some_and(|stream| !is_idle_of_captures(stream)) {
            slot.quarantined.store(true, Ordering::Relaxed);
            return;
        }
        self.pool.free.push(home(), self.index, created.is_some());
    }
}

/// Whether a returned stream is outside any capture; `false` when that cannot be read (inside a
/// host function, say): a stream that may be capturing is never handed on.
#[cold]
#[inline(never)]
fn is_idle_of_captures(stream: &StreamRef) -> bool {
    stream.may_be_capturing() == Ok(false)
}

/// The calling thread's number, which picks its home shard in every pool: threads are numbered
/// in the order they first take or return a pooled stream, and numbers are not reused, so
/// threads that come and go can share a home shard (correct, a little slower). `try_with`
/// cannot fail for a `u32` (it has no destructor), but `Drop` must not panic whatever Rust's
/// thread-locals do.
#[inline]
fn home() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static HOME: u32 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HOME.try_with(|home| *home).unwrap_or(0)
}

/// Bits of the top word that count its changes (the ABA tag); the rest hold the index link.
const TAG_BITS: u32 = 44;
const LINK_BITS: u32 = 64 - TAG_BITS;
const LINK_MASK: u64 = (1 << LINK_BITS) - 1;

/// The free slot indices `0..len`, in lock-free stacks (Treiber stacks): per-thread shards for
/// slots whose stream exists, and the fresh stack for those without (see the module docs).
///
/// Indices are stored as links, `index + 1`, with 0 for "none". Each stack is its top word:
/// the link of the top index in the low [`LINK_BITS`] bits, a tag in the high [`TAG_BITS`]
/// bits that every successful change increments (see the module docs for why).
#[derive(Debug)]
struct FreeSlots {
    /// A power of two of stacks; a thread's home shard is its number modulo their count.
    shards: Box<[CachePadded<AtomicU64>]>,
    fresh: CachePadded<AtomicU64>,
    /// For each index on a stack, the link of the index below it. Written only by the holder of
    /// the index, just before pushing it.
    next: Box<[AtomicU32]>,
}

/// Keeps a top word alone on its cache lines, so that changes of one do not invalidate another
/// or the pool's other fields (read on every acquire). 128 bytes: adjacent-line prefetching
/// pairs 64-byte lines on x86.
#[derive(Debug, Default)]
#[repr(align(128))]
struct CachePadded<T>(T);

impl<T> Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl FreeSlots {
    /// The most indices the stacks hold: links (index + 1) must fit [`LINK_BITS`] bits.
    const MAX_LEN: u32 = (1 << LINK_BITS) - 1;
    /// The most shards: enough for the hardware threads of a large host, few enough that a
    /// scan of the shards stays short.
    const MAX_SHARDS: usize = 64;

    /// Every index `0..len` on the fresh stack (0 on top, then 1, 2, ...), and empty shards,
    /// one per hardware thread (`parallelism`) rounded down to a power of two, at most
    /// [`FreeSlots::MAX_SHARDS`] and at most `len` (at least one).
    fn new(len: u32, parallelism: usize) -> FreeSlots {
        debug_assert!(len <= FreeSlots::MAX_LEN);
        let wanted = parallelism.min(len as usize).clamp(1, FreeSlots::MAX_SHARDS);
        let shards = (0..1usize << wanted.ilog2()).map(|_| CachePadded::default()).collect();
        let next = (0..len).map(|index| AtomicU32::new(if index + 1 < len { index + 2 } else { 0 })).collect();
        FreeSlots { shards, fresh: CachePadded(AtomicU64::new(u64::from(len.min(1)))), next }
    }

    /// The shard of the thread numbered `thread`.
    fn shard(&self, thread: u32) -> usize {
        thread as usize & (self.shards.len() - 1)
    }

    /// Takes a free index for the thread numbered `thread`: from its home shard, else from
    /// the other shards in turn, else from the fresh stack. `None` only when every index was
    /// held at one instant (see the module docs).
    #[inline]
    fn pop(&self, thread: u32) -> Option<u32> {
        let home = self.shard(thread);
        if let Some(index) = self.pop_from(&self.shards[home]) {
            return Some(index);
        }
        self.pop_elsewhere(home)
    }

    /// [`FreeSlots::pop`] once the home shard was found empty.
    #[cold]
    fn pop_elsewhere(&self, home: usize) -> Option<u32> {
        let count = self.shards.len();
        // `pop` just tried the home shard; every later round tries it again, first: a slot
        // released onto it meanwhile (by a thread sharing it) must be found, not spun over.
        let mut start = 1;
        loop {
            let shards = (start..count).map(|offset| &self.shards[(home + offset) % count]);
            if let Some(index) = shards.chain([&self.fresh]).find_map(|stack| self.pop_from(stack)) {
                return Some(index);
            }
            start = 0;
            // Every stack looked empty, one after the other: true at one instant only if
            // every top word, read twice, was empty and unchanged.
            // `SeqCst`, as every successful exchange of a top: see the module docs.
            let tops = || self.shards.iter().chain([&self.fresh]).map(|top| top.load(Ordering::SeqCst));
            let mut first = [0u64; FreeSlots::MAX_SHARDS + 1];
            let mut empty = true;
            for (slot, top) in first.iter_mut().zip(tops()) {
                *slot = top;
                empty &= top & LINK_MASK == 0;
            }
            if empty && tops().eq(first[..=count].iter().copied()) {
                return None;
            }
        }
    }

    /// Puts back `index`, which the caller took with [`FreeSlots::pop`] and holds: onto the
    /// home shard of the thread numbered `thread` if its stream was `created`, else onto the
    /// fresh stack.
    #[inline]
    fn push(&self, thread: u32, index: u32, created: bool) {
        let stack = if created { &self.shards[self.shard(thread)] } else { &self.fresh };
        self.push_onto(stack, index);
    }
}

/// `top` with `link` on top, and the tag advanced by one.
fn next_top(top: u64, link: u32) -> u64 {
    ((top >> LINK_BITS).wrapping_add(1) << LINK_BITS) | u64::from(link)
}

impl FreeSlots {
    /// Pops the top index of the stack whose top word is `stack`, or `None` when it is empty.
    #[inline]
    fn pop_from(&self, stack: &AtomicU64) -> Option<u32> {
        let (mut top, mut backoff) = (stack.load(Ordering::Acquire), Backoff::default());
        loop {
            let index = ((top & LINK_MASK) as u32).checked_sub(1)?;
            // Stale only if `index` was popped since `top` was read; the tag then differs and
            // the exchange below fails.
            let below = self.next[index as usize].load(Ordering::Relaxed);
            match stack.compare_exchange_weak(top, next_top(top, below), Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return Some(index),
                Err(_) => {
                    backoff.spin();
                    top = stack.load(Ordering::Acquire);
                }
            }
        }
    }

    /// Pushes `index`, which the caller holds, onto the stack whose top word is `stack`.
    #[inline]
    fn push_onto(&self, stack: &AtomicU64, index: u32) {
        let (mut top, mut backoff) = (stack.load(Ordering::Relaxed), Backoff::default());
        let next = &self.next[index as usize];
        loop {
            // Stored only when it changes: the links of many indices share a cache line, and a
            // thread that takes and returns one stream on its own shard finds it unchanged (the
            // shard empty below it), so it writes nothing other threads read.
            let below = (top & LINK_MASK) as u32;
            if next.load(Ordering::Relaxed) != below {
                next.store(below, Ordering::Relaxed);
            }
            match stack.compare_exchange_weak(top, next_top(top, index + 1), Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return,
                Err(_) => {
                    backoff.spin();
                    top = stack.load(Ordering::Relaxed);
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
    use super::{FreeSlots, next_top};
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn fresh_indices_lowest_first_released_ones_before_fresh_and_empty_when_all_held() {
        let slots = FreeSlots::new(4, 4);
        assert_eq!(slots.pop(0), Some(0));
        slots.push(0, 0, true);
        // Thread 1's home shard is empty: it takes thread 0's released index, not a fresh one.
        assert_eq!(slots.pop(1), Some(0));
        assert_eq!((1..5).map(|_| slots.pop(0)).collect::<Vec<_>>(), [Some(1), Some(2), Some(3), None]);
        slots.push(5, 2, false);
        slots.push(6, 3, true);
        slots.push(6, 1, true);
        assert_eq!((slots.pop(2), slots.pop(2), slots.pop(2), slots.pop(2)), (Some(1), Some(3), Some(2), None));
        assert_eq!(FreeSlots::new(0, 8).pop(0), None);
    }

    #[test]
    fn one_shard_per_hardware_thread_a_power_of_two_at_most_the_capacity() {
        let shards = |len, parallelism| FreeSlots::new(len, parallelism).shards.len();
        assert_eq!((shards(16, 16), shards(16, 12), shards(2, 16), shards(0, 16)), (16, 8, 2, 1));
        assert_eq!((shards(4096, 1), shards(4096, 1000)), (1, FreeSlots::MAX_SHARDS));
    }

    #[test]
    fn the_tag_wraps_without_touching_the_link() {
        let top = (((1u64 << super::TAG_BITS) - 1) << super::LINK_BITS) | 5;
        assert_eq!(next_top(top, 7), 7);
    }

    /// Threads (numbered 0, 1, ...: each its own home shard, or sharing with `shards` fewer
    /// than threads) pop and push as fast as they can, odd indices back to the fresh stack.
    /// Each holder sets its index's flag after the pop and clears it before the push: a flag
    /// found set means two holders at once. With no more threads than indices, a pop never
    /// finds every index held: at most `threads - 1` others hold one at any instant, so
    /// emptiness would be a lie.
    fn hammer(threads: u32, len: u32, shards: usize, rounds: usize) -> usize {
        let slots = FreeSlots::new(len, shards);
        let held: Vec<AtomicBool> = (0..len).map(|_| AtomicBool::new(false)).collect();
        let (empty, barrier) = (AtomicUsize::new(0), Barrier::new(threads as usize));
        std::thread::scope(|scope| {
            for thread in 0..threads {
                let (slots, held, empty, barrier) = (&slots, &held, &empty, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    for _ in 0..rounds {
                        let Some(index) = slots.pop(thread) else {
                            empty.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        assert!(!held[index as usize].swap(true, Ordering::Relaxed), "index {index} held twice");
                        std::hint::spin_loop();
                        held[index as usize].store(false, Ordering::Relaxed);
                        slots.push(thread, index, index % 2 == 0);
                    }
                });
            }
        });
        let mut left: Vec<u32> = std::iter::from_fn(|| slots.pop(0)).collect();
        left.sort_unstable();
        assert_eq!(left, (0..len).collect::<Vec<_>>(), "every index is back exactly once");
        empty.into_inner()
    }

    /// Runs `f` on a thread; `None` if it has not returned within `limit` (the thread is left
    /// spinning: a hang becomes a failure, not a stuck test run).
    fn within<T: Send + 'static>(limit: std::time::Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || drop(send.send(f())));
        receive.recv_timeout(limit).ok()
    }

    /// The race `pop` must not lose: thread 0 finds its home shard empty, then a thread with
    /// the same home shard (here the only shard) releases the only slot onto it. Were the home
    /// shard not looked at again, the double collect would see its top non-empty, and the pop
    /// would neither return the free slot nor report exhaustion: it would spin until another
    /// thread took the slot, forever if none did.
    #[test]
    fn a_slot_released_onto_the_home_shard_during_the_scan_is_found() {
        let slots: &'static FreeSlots = Box::leak(Box::new(FreeSlots::new(1, 1)));
        let index = slots.pop(1).unwrap();
        // Thread 0 is in `pop` between its home-shard attempt and `pop_elsewhere`: thread 1
        // releases the slot onto shard 0 (thread 1's home too: one shard).
        slots.push(1, index, true);
        let found = within(std::time::Duration::from_secs(2), move || slots.pop_elsewhere(slots.shard(0)));
        assert_eq!(found, Some(Some(index)), "the free slot on the home shard was never found (livelock)");
    }

    /// The same through `pop` only: two threads with one shard and one slot, where one
    /// thread's last push can land while the other is inside `pop_elsewhere`.
    #[test]
    fn two_threads_one_shard_one_slot_both_finish() {
        // Miri (`./dev test`) interprets every step: fewer rounds keep it to seconds.
        let (runs, rounds) = if cfg!(miri) { (2, 200) } else { (20, 20_000) };
        for _ in 0..runs {
            // Miri's clock (under isolation) advances with the steps it interprets, not with time.
            let limit = std::time::Duration::from_secs(if cfg!(miri) { 600 } else { 5 });
            let finished = within(limit, move || hammer(2, 1, 1, rounds));
            assert!(finished.is_some(), "a thread of the hammer never returned from pop (livelock)");
        }
    }

    #[test]
    fn threads_never_share_an_index_nor_see_a_false_empty() {
        // Miri (`./dev test`) interprets every step: fewer rounds keep it to seconds.
        let rounds = if cfg!(miri) { 100 } else { 50_000 };
        assert_eq!(hammer(8, 8, 8, rounds), 0, "every index looked held while one was free");
        assert_eq!(hammer(8, 8, 2, rounds), 0, "every index looked held while one was free (shared shards)");
        // More threads than indices: the empty path under contention, still never shared.
        hammer(8, 3, 8, rounds);
    }
}
