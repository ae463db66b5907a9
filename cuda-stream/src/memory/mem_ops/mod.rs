//! Stream memory operations
//! ([CUDA_MEMOP](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)): a
//! stream that waits until a 32- or 64-bit word in memory meets a condition
//! (`cuStreamWaitValue32`/`64`), a stream that writes a word (`cuStreamWriteValue32`/`64`),
//! and both, with memory barriers, in one call (`cuStreamBatchMemOp`). The driver's `_v2`
//! entry points, fetched by version 12000.
//!
//! # The words
//! The operations take *words*, never a raw address, in safe code:
//! * [`MappedWords`]: host memory mapped into every device's address space
//!   (`cudaHostAlloc` with `cudaHostAllocMapped | cudaHostAllocPortable`; with unified
//!   addressing the device address is the host address). The host reads and writes them only
//!   through atomics ([`MappedWords::words`]) while streams wait on them and write them: a
//!   stream held until the host writes a value, a flag a stream raises for the host.
//! * [`DeviceWords`]: device memory of one device (`cudaMalloc`): streams and kernels of that
//!   device signal each other through it without a trip to the host; the host reads it with a
//!   copy ([`DeviceWords::to_vec`]).
//!
//! # The race detector does not see them
//! Memory operations tell the [race detector](crate::race) nothing, neither the words they
//! touch nor the order they make. Their words are how streams and the host signal each other:
//! a wait on a value and the write that meets it order work at run time, by which write comes
//! first, not by an event enqueued before, so the detector's model (records, waits,
//! synchronizes) has no edge for them. Told of their accesses, it would report the signalling
//! itself as races (a stream writes a word that another stream waits on, with no event
//! between); not told, work ordered only by a memory operation may be reported as racing. Work
//! whose order rests on memory operations is best checked with the detector off for it
//! ([`race_scope`](crate::race_scope) with [`RaceMode::Off`](crate::RaceMode::Off)).
//!
//! Not a [`DeviceBuffer`](crate::DeviceBuffer): CUDA refuses stream memory operations on
//! memory of the stream-ordered allocator (`cudaMallocAsync`, default and explicit pools:
//! `CUDA_ERROR_INVALID_VALUE`, probed on CUDA 13.0, driver 580), while `cudaMalloc` memory
//! and mapped host memory work. Nor pageable memory (refused the same way).
//!
//! # Lifetimes: the memory outlives every operation, and a drop never waits
//! A word may be waited on by a stream for as long as nobody writes it, so a drop cannot wait
//! for the operations: it would block forever. And the memory cannot go back to CUDA while
//! any stream of the device waits: `cudaFreeHost`, `cudaHostUnregister` and `cudaFree` all
//! block until **every** stream of the device is idle (probed on driver 580: each blocked for
//! as long as an unrelated stream waited for a value, while `cudaHostAlloc`, `cudaMalloc`,
//! stream and event creation returned at once). So:
//! * Words are carved from blocks this crate allocates once and never frees: a dropped
//!   [`MappedWords`] or [`DeviceWords`] returns its block to a free list of the process, from
//!   which a later allocation of the same size class takes it (zeroed). The pinned and device
//!   memory kept is the most the process had in use at once (in blocks of a power of two
//!   bytes, at least 64; small ones carved from 64 KiB). [`live_words`] counts the blocks in
//!   use.
//! * A block goes back to the free list only once no operation may touch it: each operation
//!   (outside a capture) is noted as a use of the block in the ledger device buffers keep, a
//!   use ordered with no other (operations signal each other: a wait for another stream's
//!   operations could wait for the very stream that waits for this one's write), with an
//!   internal event recorded after it (one per stream of certain identity, recorded again;
//!   events recycled as buffers' are); the drop returns the block at once if those events have
//!   completed, and otherwise hands it to a host function on a private stream of each device
//!   involved that waits for them: the block returns when that runs. The drop itself makes a
//!   few asynchronous calls and returns: it never waits for the device, so dropping the words
//!   a stream waits on (while another stream will write them, say) neither blocks nor frees
//!   early. Where even that cannot be arranged (a fault, inside a host function's own CUDA
//!   ban it moves to another thread first), the block is leaked, never reused.
//! * In a capture, an operation becomes a graph node that every launch replays: the graph
//!   itself keeps the block (a CUDA user object holding a reference), for as long as the graph
//!   or an executable made from it exists. A stream that waits on a value nobody writes keeps
//!   its block until the process ends.
//! * Kernels reach the words through [`MappedWords::use_on`] / [`DeviceWords::use_on`], which
//!   note the use like an operation; the raw address ([`MappedWords::as_ptr`]) is for the
//!   rest, under the launch's own `unsafe` contract.
//!
//! # Bounds, alignment, support
//! Indices are checked before CUDA sees them ([`Error::WordOutOfRange`](crate::Error::WordOutOfRange)); words are aligned to
//! their size by construction, and the raw entry points ([`StreamRef::wait_value_raw`](crate::StreamRef::wait_value_raw),
//! [`StreamRef::write_value_raw`](crate::StreamRef::write_value_raw)) refuse a null or misaligned address
//! ([`Error::MisalignedWord`](crate::Error::MisalignedWord)). A batch holds at most 255 operations (CUDA: "less than 256";
//! [`Error::Size`](crate::Error::Size) beyond). What a device supports is in [`MemOpSupport`]: 64-bit
//! operations, [`Condition::Nor`], and [`WaitValue::with_flush`] (remote-write flushes; not on
//! an H100 or H200, where CUDA returns `cudaErrorNotSupported`); CUDA's own error is returned
//! for what the device lacks.
//!
//! # Writes and barriers
//! A write is preceded by a memory fence, scoped to the stream, with the semantics of
//! `__threadfence_system()`: the `_v2` calls have no other mode (they refuse the v1 flag
//! `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER` with `cudaErrorInvalidValue`). An explicit
//! barrier, of system or device scope, is a batch operation: [`MemOp::Barrier`].
//!
//! # What CUDA does not see
//! NVIDIA: "Synchronization ordering established through these APIs is not visible to CUDA":
//! a stream waiting for a word that a later kernel of the *same* stream writes waits forever,
//! and work ordered only through words should also be ordered through events where CUDA's
//! scheduler must know it. Operations on words are not ordered with each other across streams
//! (that is their purpose): order them as you order kernels.

mod blocks;
mod operation;
mod raw;
#[cfg(test)]
mod tests;
mod tracked;
mod word;
mod words;

pub use self::blocks::live_words;
pub use self::operation::{BarrierScope, Condition, MemOp, MemOpSupport, WaitValue};
pub use self::word::Word;
pub use self::words::{DeviceWords, MappedWords};
