//! Device memory whose lifetime follows its streams: stream-ordered buffers, memory pools and
//! pinned host memory.
//!
//! * A [`DeviceBuffer`] is allocated on a stream, its *home*
//!   ([`cudaMallocAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html),
//!   or `cudaMallocFromPoolAsync` from a [`MemPool`]), and freed on it when dropped
//!   (`cudaFreeAsync`): on one stream, the two raw calls and nothing else. It holds its home
//!   stream (a `&Stream`, an `Arc<Stream>`, anything [`AsStream`](crate::AsStream)), so the
//!   stream outlives it.
//! * Work on another stream goes through the buffer, which orders it byte range by byte range,
//!   reads apart from writes: a write waits for every earlier use of its bytes, a read for the
//!   earlier writes of its bytes, whatever their streams, and an event recorded after the use
//!   makes later uses, and the free, wait for it (PyTorch's `record_stream`, cudarc's read and
//!   write events, kept per range). Two reads, or uses of disjoint views, on different streams
//!   run at once. A stream waits for a given use once; events are recycled, never created per
//!   use once the buffer is warm; the home stream's uses cost nothing while no other stream
//!   has used the buffer. The buffer's copies and fills do it themselves; your own kernels
//!   get it through [`DeviceBuffer::use_on`] (a write) and the views' `use_on`. Launching a
//!   kernel stays `unsafe`: a raw pointer escapes every safe wrapper.
//! * Copies from and to Rust slices (pageable memory, as far as CUDA knows) **block** until
//!   the copy has completed: CUDA copies pageable memory through a staging buffer, and a
//!   slice may be page-locked after all, so returning earlier could let it be written or
//!   freed under the copy. Copies from and to a [`PinnedBuffer`] are asynchronous: the pinned
//!   buffer remembers the copies in flight as the device buffer does its uses (copies out of
//!   it run at once, a copy into it waits for them), and its host access and its drop wait for
//!   them. Memory the program already has is page-locked for a closure by [`register_host`]
//!   (`cudaHostRegister`, unregistered at its end after its copies); a [`PinnedPool`] keeps
//!   pinned blocks for reuse; a kernel uses a pinned buffer in place (zero-copy) through
//!   [`PinnedBuffer::use_on`].
//! * Views ([`DeviceBuffer::slice`], [`slice_mut`](DeviceBuffer::slice_mut),
//!   [`chunks_mut`](DeviceBuffer::chunks_mut), [`DeviceSliceMut::split_at_mut`]) copy and use a
//!   range of a buffer: one element read back, a pipeline's chunks. They borrow the buffer; a
//!   shared view's use is a read of its range, an exclusive view's a write.
//! * Elements are [`DeviceCopy`]: plain old data that any bit pattern, and a GPU, may write.
//! * During a stream capture, a [`DeviceBuffer`]'s allocation, copies and fills are refused
//!   ([`Error::CaptureMisuse`]): a graph replaying them would outlive the buffer. The
//!   capture's own copies, fills and `use_on` take shared buffers, which the graph then holds
//!   (see [Graphs](#graphs)). A buffer
//!   whose home stream is being captured when it drops is leaked, not freed into the graph.
//!   Memory a graph owns comes from [`Capture::alloc`](crate::Capture::alloc) (a
//!   [`CaptureBuffer`], freed by [`Capture::free`](crate::Capture::free)) and
//!   [`Capture::scratch`](crate::Capture::scratch): allocated and freed inside the capture, as
//!   the graph's own memory nodes (see [Graphs](#graphs)). Graphs built node by node
//!   copy and fill buffers they hold (see [Graphs](#graphs)).
//! * Sizes are checked before CUDA sees them: a zero length, a byte size that overflows, and
//!   copies between sides of different lengths are [`Error::Size`]; running
//!   out of memory is CUDA's `cudaErrorMemoryAllocation`, after which the pool still serves.
//!
//! * Stream memory operations (a stream that waits until a word meets a condition, a stream
//!   that writes a word: [`mem_ops`]) take words of their own, [`MappedWords`] (host memory
//!   the host reads and writes with atomics) and [`DeviceWords`]: CUDA refuses them on a
//!   [`DeviceBuffer`]'s stream-ordered memory. Their memory is never freed while an operation
//!   may touch it, and their drop never waits.
//!
//! # Graphs
//! A graph copies and fills memory it holds. Built node by node
//! ([`Graph::builder`](crate::Graph::builder)):
//! [`GraphBuilder::add_copy`](crate::GraphBuilder::add_copy),
//! [`add_fill_bytes`](crate::GraphBuilder::add_fill_bytes),
//! [`add_copy_from_pinned`](crate::GraphBuilder::add_copy_from_pinned) and
//! [`add_copy_to_pinned`](crate::GraphBuilder::add_copy_to_pinned); by capture:
//! [`Capture::copy`](crate::Capture::copy), [`fill_bytes`](crate::Capture::fill_bytes),
//! [`copy_from_pinned`](crate::Capture::copy_from_pinned),
//! [`copy_to_pinned`](crate::Capture::copy_to_pinned), and
//! [`use_on`](crate::Capture::use_on) for a captured kernel. They take device buffers as a
//! [`GraphBuffer`]: borrowed, `&DeviceBuffer<T, S>` whatever its home stream, or shared as
//! `Arc<DeviceBuffer<T, S>>` (with `S: 'static`, an `Arc<Stream>` say); and page-locked memory
//! as `Arc<`[`SharedPinned`]`<T>>`. In a capture of this crate, a buffer's own
//! [`copy_from`](DeviceBuffer::copy_from) (and a view's), [`fill_bytes`](DeviceBuffer::fill_bytes)
//! and a typed [`Kernel::launch`](crate::Kernel::launch) with buffers or views as arguments, on
//! any stream of the capture, are captured the same way: the graph holds the buffers (see
//! [the capture docs](crate::capture#what-a-captures-graph-holds-of-device-buffers)). Copies
//! from and to host memory and a buffer's `use_on` stay refused there.
//! * The graph, its clones and every executable made from it each keep the memory: a clone of
//!   a shared buffer's `Arc`, and of a borrowed buffer's memory apart from the buffer, whose
//!   owner may go first (its home stream with it). No launch is enqueued once the memory is
//!   gone, whichever value drops first. A borrowed buffer's owner, dropped while a graph holds
//!   its memory, frees nothing: the last graph or executable that holds it frees it, on a
//!   private stream after the home stream's work up to the owner's drop and after every use
//!   since. A launch never reaches a borrowed buffer's home stream: once a graph holds the
//!   memory, the home stream's uses are marked like any other stream's (an event record per
//!   use there), and a buffer whose address was handed out for home work it does not see
//!   ([`DeviceBuffer::as_ptr`]) is refused, when a graph would hold it and at each launch
//!   ([`Error::GraphMisuse`]: order such work through `use_on` or a typed launch). A buffer
//!   whose home is the captured stream itself, with uses there not yet marked (a fresh buffer
//!   of that stream), is marked once the capture has ended, before `end` hands out the graph;
//!   one whose home is another stream being captured, with uses not yet marked, is refused
//!   ([`Error::CaptureMisuse`]): use it on another stream first. Holding a borrowed buffer's memory, a graph launches on any thread:
//!   `&mut` on the buffer no longer keeps other work off it. Two uses of conflicting bytes
//!   made at the same moment on two threads (two launches, a launch and the owner's use) are
//!   ordered all the same: a use waits for one whose checks are done and whose enqueue is in
//!   progress on another stream (microseconds: the crate's own call), and a launch is refused
//!   ([`Error::GraphMisuse`]) where that use may wait for anything (another thread's `use_on`
//!   closure, a copy through pageable memory, which CUDA makes wait for the stream) or is this
//!   thread's own (a launch inside a `use_on` closure, on another stream than the closure's).
//!   A capture
//!   holds them until `end` hands them to its graph; one dropped before `end` lets them go
//!   with the graph it discards, and one whose end fails, or that another library ended,
//!   leaks them (that library may keep a graph that uses them): such a buffer, and the home
//!   stream `S` holds, stay alive for good. A body's capture
//!   ([`GraphBuilder::capture`](crate::GraphBuilder::capture)) offers none of these calls:
//!   fill a body's memory with the builder's nodes.
//! * Each launch of an executable is one use of that memory, ordered as a copy is: the stream
//!   waits for the earlier uses its nodes conflict with, and later uses, the buffers' frees
//!   and the host's access to the page-locked memory wait for the launch. A shared buffer
//!   whose last `Arc` an executable drops is freed on its home stream after the launches that
//!   used it.
//! * The host reaches the page-locked memory between launches through
//!   [`SharedPinned::lock`]: its guard's `as_mut_slice` waits for the launches' copies, and no
//!   guard reaches the buffer itself, so the memory a node copies stays where it is until the
//!   last `Arc` goes (CUDA reads a memcpy node's host memory when it instantiates the graph, and
//!   crashed, on an H100, when it had been freed). A launch takes the lock with a try while it
//!   orders and enqueues: while a guard is alive, on any thread, the launch is refused
//!   ([`Error::GraphMisuse`]) rather than wait; another launch that copies the same memory and
//!   is being enqueued on another thread holds it too.
//! * **A host function must not lock that memory**, nor wait for anything the host does while
//!   it holds the guard: the host's `as_slice` waits, under the lock, for the launch, whose
//!   last work may be that host function (a deadlock); and a launch holds the lock while CUDA
//!   takes it, which can wait for room in CUDA's queue, behind an earlier launch's host
//!   function.
//! * An executable points a memcpy or memset node the builder added at other memory of the
//!   same kind, from its next launch on ([`GraphExec::set_copy`](crate::GraphExec::set_copy),
//!   [`set_fill_bytes`](crate::GraphExec::set_fill_bytes), and the page-locked ones); it then
//!   holds the new memory too. [`GraphExec::update`](crate::GraphExec::update) takes the
//!   memory of the graph it updates from.
//! * Memory the graph allocates itself during a capture, a [`CaptureBuffer`]
//!   ([`Capture::alloc`](crate::Capture::alloc)), goes wherever a shared buffer goes in the
//!   capture's calls above. Its uses are ordered in the graph: each waits for the allocation,
//!   whichever stream of the capture it is on, and [`Capture::free`](crate::Capture::free)
//!   waits for every use, so the graph's allocator hands the block to a later allocation only
//!   after the reads on forked streams (PyTorch's `record_stream` in a capture).
//! * A capture buffer given to [`Capture::keep`](crate::Capture::keep) outlives each launch
//!   (CUDA's graph memory freed outside the graph): after a launch,
//!   [`GraphOutput::take`] hands it over as a [`DeviceBuffer`] whose drop frees it; the next
//!   launch waits for that free and is refused until it is made, and an executable
//!   instantiated with `auto_free_on_launch` frees its outputs itself and never hands them
//!   out: [`GraphOutput::to_vec`] and [`GraphOutput::copy_to_slice`] read an output after a
//!   launch without taking it, borrowing the executable meanwhile. One neither freed nor kept
//!   is never freed (see [`CaptureBuffer`]).
//! * A graph holds at most 12 device buffers (one launch orders at most 12, as one kernel
//!   launch does), and one that holds any is not instantiated for device launch, whose launches
//!   the host would not see.
//!
//! What a drop cannot do safely it does not do: inside a host function, on a thread where the
//! home stream is another stream (the per-thread default stream), after a fault or during a
//! capture, a buffer is leaked rather than freed while the driver may still use it.

// Layer 10 of docs/architecture.md, memory. May use: ffi, call, device, event, stream, graph.

mod buffer;
mod buffer_core;
mod capture_buffer;
mod graph_nodes;
mod graph_outputs;
mod launch_args;
mod ledger;
pub(crate) mod lent;
pub mod mem_ops;
mod output_slot;
mod page_locked;
mod pinned;
mod pinned_pool;
mod pool;
mod registered;
mod shared_pinned;
mod uses;
mod view;

pub use buffer::DeviceBuffer;
pub use capture_buffer::CaptureBuffer;
pub use graph_nodes::{CaptureMemory, CaptureUses, GraphBuffer};
pub use graph_outputs::GraphOutput;
pub use launch_args::ArgUse;
pub(crate) use launch_args::ordered_launch;
pub use mem_ops::{
    BarrierScope, Condition, DeviceWords, MappedWords, MemOp, MemOpSupport, WaitValue, Word, live_words,
};
pub use page_locked::{PageLocked, PageLockedMemory, PinnedSliceMut};
pub use pinned::PinnedBuffer;
pub use pinned_pool::{PinnedPool, PinnedPoolStats};
pub use pool::{MemPool, MemPoolStats, PoolAccess, ReusePolicy};
pub use registered::{RegisteredSlice, register_host};
pub use shared_pinned::{PinnedGuard, SharedPinned};
pub use view::{ChunksMut, DeviceSlice, DeviceSliceMut};

use crate::event::Event;
use crate::ffi::error::{Error, Result};
use crate::stream::StreamRef;
use std::ops::{Bound, Range, RangeBounds};

/// Plain old data that can live in device memory and be copied byte for byte between host and
/// device: every bit pattern is a valid value, there is no padding a copy could expose, and it
/// owns nothing (no pointers to host memory, no `Drop`).
///
/// # Safety
/// Implement it only for types with those properties (`#[repr(C)]` structs of such fields with
/// no padding, or `#[repr(transparent)]` wrappers); the crate copies their bytes to and from
/// the GPU and reads back whatever bytes a kernel wrote.
pub unsafe trait DeviceCopy: Copy + Send + Sync + 'static {}

macro_rules! device_copy {
    ($($ty:ty),*) => {$(
        // SAFETY: a primitive number: every bit pattern is a value, no padding, owns nothing.
        unsafe impl DeviceCopy for $ty {}
    )*};
}

device_copy!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

// SAFETY: an array of plain old data is plain old data (arrays have no padding between
// elements).
unsafe impl<T: DeviceCopy, const N: usize> DeviceCopy for [T; N] {}

/// The byte size of `len` elements of `T`: [`Error::Size`] for zero and for an overflow.
fn byte_size<T>(len: usize) -> Result<usize> {
    if len == 0 {
        return Err(Error::Size("a buffer of zero elements (CUDA has no empty allocation)"));
    }
    if size_of::<T>() == 0 {
        return Err(Error::Size("a buffer of zero-sized elements (CUDA has no empty allocation)"));
    }
    len.checked_mul(size_of::<T>())
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or(Error::Size("the byte size of the buffer overflows"))
}

/// The wait after a blocking copy to or from host memory that the caller lends only for the
/// call, once the copy was `enqueued`: through `done` if it was `recorded` after the copy, else
/// through `stream` (a record fails only when the context is broken, and then no copy runs).
/// `None` when nothing was enqueued (nothing to wait for).
fn wait_for_blocking_copy(stream: &StreamRef, done: &Event, enqueued: bool, recorded: bool) -> Option<Result<()>> {
    enqueued.then(|| if recorded { done.synchronize_checked_earlier() } else { stream.synchronize_checked_earlier() })
}

/// [`Error::Size`] unless the two sides of a copy have the same length.
fn same_length(destination: usize, source: usize) -> Result<()> {
    if destination == source { Ok(()) } else { Err(Error::Size("the two sides of a copy have different lengths")) }
}

/// `range` within `0..len`, non-empty.
fn checked_range(range: &impl RangeBounds<usize>, len: usize) -> Result<Range<usize>> {
    let start = match range.start_bound() {
        Bound::Included(&start) => start,
        Bound::Excluded(&start) => start.checked_add(1).ok_or(Error::Size("a view's range overflows"))?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&end) => end.checked_add(1).ok_or(Error::Size("a view's range overflows"))?,
        Bound::Excluded(&end) => end,
        Bound::Unbounded => len,
    };
    if end > len || start > end {
        return Err(Error::Size("a view's range lies outside the buffer"));
    }
    if start == end {
        return Err(Error::Size("a view has at least one element"));
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::checked_range;

    #[test]
    fn ranges_are_checked_against_the_buffer() {
        assert_eq!(checked_range(&(2..5), 8).unwrap(), 2..5);
        assert_eq!(checked_range(&(..), 8).unwrap(), 0..8);
        assert_eq!(checked_range(&(3..), 8).unwrap(), 3..8);
        assert_eq!(checked_range(&(..=7), 8).unwrap(), 0..8);
        assert!(checked_range(&(..=8), 8).is_err(), "past the end");
        assert!(checked_range(&(4..4), 8).is_err(), "empty");
        assert!(checked_range(&(6..9), 8).is_err(), "past the end");
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..2;
        assert!(checked_range(&reversed, 8).is_err(), "reversed");
        assert!(checked_range(&(..=usize::MAX), 8).is_err(), "overflow");
    }
}
