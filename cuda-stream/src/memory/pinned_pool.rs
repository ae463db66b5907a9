//! [`PinnedPool`]: page-locked host memory kept for reuse. `cudaHostAlloc` and `cudaFreeHost`
//! cost tens of microseconds to milliseconds (they page-lock and unlock, and `cudaFreeHost`
//! synchronizes the device); a pipeline that makes a pinned buffer per batch pays that each
//! time. A [`PinnedBuffer`](super::PinnedBuffer) from the pool gives its memory back to the
//! pool when it drops (after its copies, as any pinned buffer), and the next buffer of the
//! same size class takes it again (PyTorch's `CachingHostAllocator`).

use super::page_locked::host_memory_call;
use crate::ffi::error::{Error, Result};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The smallest block the pool hands out (a page).
const SMALLEST: usize = 4096;

/// A cache of page-locked host memory for [`PinnedBuffer::zeroed_in`](super::PinnedBuffer::zeroed_in)
/// and [`PinnedBuffer::from_slice_in`](super::PinnedBuffer::from_slice_in). Blocks are sizes of
/// a power of two from 4 KiB; a buffer takes a cached block of its size class, or allocates one
/// (`cudaHostAlloc`, portable), and gives it back when it drops. Cached blocks are freed by
/// [`PinnedPool::trim`] and when the pool and every buffer from it have dropped. Cheap to
/// clone (shared).
#[derive(Clone, Default)]
pub struct PinnedPool {
    blocks: Arc<Blocks>,
}

/// The pool's state: cached blocks by size class, and what is out.
#[derive(Default)]
pub(super) struct Blocks {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    cached: BTreeMap<usize, Vec<Block>>,
    cached_bytes: usize,
    in_use_bytes: usize,
}

/// A block of page-locked memory of `bytes` (a size class) at `ptr`.
pub(super) struct Block {
    pub(super) ptr: NonNull<c_void>,
    pub(super) bytes: usize,
}

// SAFETY: host memory the pool owns; any thread may hand it out or free it.
unsafe impl Send for Block {}

/// What a pool holds, for [`PinnedPool::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedPoolStats {
    /// Bytes cached for reuse (no buffer uses them).
    pub cached_bytes: usize,
    /// Bytes of the blocks buffers from the pool hold now.
    pub in_use_bytes: usize,
}

impl PinnedPool {
    /// An empty pool: its first buffers allocate.
    pub fn new() -> PinnedPool {
        PinnedPool::default()
    }

    /// The bytes cached and in use.
    pub fn stats(&self) -> PinnedPoolStats {
        let state = self.blocks.state();
        PinnedPoolStats { cached_bytes: state.cached_bytes, in_use_bytes: state.in_use_bytes }
    }

    /// Frees every cached block (`cudaFreeHost`); buffers in use keep theirs.
    ///
    /// # Errors
    /// Refused inside a host function; the first error of `cudaFreeHost` (the other blocks are
    /// still freed; a block CUDA refused to free is forgotten, never handed out again).
    pub fn trim(&self) -> Result<()> {
        refuse_inside_host_fn()?;
        let blocks: Vec<Block> = {
            let mut state = self.blocks.state();
            state.cached_bytes = 0;
            std::mem::take(&mut state.cached).into_values().flatten().collect()
        };
        blocks.into_iter().map(free).fold(Ok(()), Result::and)
    }

    /// A block of at least `bytes`: a cached one of its size class, or a new one.
    pub(super) fn take(&self, bytes: usize) -> Result<(Block, Arc<Blocks>)> {
        let class = bytes
            .checked_next_power_of_two()
            .ok_or(Error::Size("the byte size of the buffer overflows"))?
            .max(SMALLEST);
        let cached = {
            let mut state = self.blocks.state();
            let block = state.cached.get_mut(&class).and_then(Vec::pop);
            if block.is_some() {
                state.cached_bytes -= class;
            }
            state.in_use_bytes += class;
            block
        };
        let block = match cached {
            Some(block) => block,
            None => allocate(class).inspect_err(|_| self.blocks.state().in_use_bytes -= class)?,
        };
        Ok((block, Arc::clone(&self.blocks)))
    }
}

impl Blocks {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes back a block no copy uses any more.
    pub(super) fn give_back(&self, block: Block) {
        let mut state = self.state();
        state.in_use_bytes -= block.bytes;
        state.cached_bytes += block.bytes;
        state.cached.entry(block.bytes).or_default().push(block);
    }
}

impl Drop for Blocks {
    /// Frees the cached blocks (the last buffer from the pool, or the pool, has dropped).
    fn drop(&mut self) {
        if refuse_inside_host_fn().is_err() {
            return;
        }
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for block in std::mem::take(&mut state.cached).into_values().flatten() {
            let _ = free(block);
        }
    }
}

/// `bytes` of page-locked memory, portable to every device.
pub(super) fn allocate(bytes: usize) -> Result<Block> {
    refuse_inside_host_fn()?;
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; bytes > 0; a valid flag.
    host_memory_call("cudaHostAlloc", || unsafe { sys::cudaHostAlloc(&mut ptr, bytes, sys::cudaHostAllocPortable) })?;
    let ptr = NonNull::new(ptr).ok_or(Error::Size("CUDA returned no address"))?;
    Ok(Block { ptr, bytes })
}

/// Frees a block (`cudaFreeHost`) no copy uses any more.
pub(super) fn free(block: Block) -> Result<()> {
    // SAFETY: memory `allocate` made, which nothing uses any more (the caller's promise).
    host_memory_call("cudaFreeHost", || unsafe { sys::cudaFreeHost(block.ptr.as_ptr()) })
}

impl std::fmt::Debug for PinnedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedPool").field("stats", &self.stats()).finish()
    }
}
