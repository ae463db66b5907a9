//! The blocks words are carved from: allocated once, never freed, reused through a free list of
//! the process (see the module docs' "Lifetimes").

use crate::device::Device;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::sys;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// How many blocks of words are in use: held by a [`MappedWords`](super::MappedWords) or [`DeviceWords`](super::DeviceWords), by an
/// operation that may still touch them, or by a graph that replays operations on them. A
/// block returns to the free list (and this count falls) once none of these holds it.
pub fn live_words() -> usize {
    LIVE_BLOCKS.load(Ordering::SeqCst)
}

/// Where a block of words lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// Mapped, portable host memory.
    Host,
    /// Device memory of this device.
    Device(Device),
}

/// The smallest block, and the chunk smaller blocks are carved from.
pub(super) const SMALLEST_BLOCK: usize = 64;
pub(super) const CHUNK: usize = 64 * 1024;

/// Blocks in use (see [`live_words`]).
pub(super) static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);
/// Blocks free for reuse: where, the size class (a power of two), the addresses.
pub(super) static FREE_BLOCKS: Mutex<Vec<(Place, usize, Vec<usize>)>> = Mutex::new(Vec::new());

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A block of memory for words, in use until it drops back into the free list. Never freed:
/// see the module docs.
#[derive(Debug)]
pub(super) struct Block {
    pub(super) address: *mut u8,
    pub(super) place: Place,
    size: usize,
}

// SAFETY: the block is an address of memory the process keeps for good, handed to one owner
// at a time (the free list or this value); the address itself is never dereferenced through
// `&Block` except by the owner's atomic views.
unsafe impl Send for Block {}
// SAFETY: as above: `&Block` gives out the address only.
unsafe impl Sync for Block {}

impl Block {
    /// A block of at least `bytes` at `place`: from the free list, or carved from new memory.
    pub(super) fn take(place: Place, bytes: usize) -> Result<Block> {
        let size = bytes.max(SMALLEST_BLOCK).checked_next_power_of_two().ok_or(Error::Size(OVERFLOW))?;
        let reused = {
            let mut free = lock(&FREE_BLOCKS);
            free.iter_mut().find(|(at, class, _)| (*at, *class) == (place, size)).and_then(|(_, _, list)| list.pop())
        };
        let address = match reused {
            Some(address) => address,
            None => {
                let chunk = size.max(CHUNK);
                let base = allocate(place, chunk)?;
                if chunk > size {
                    let mut free = lock(&FREE_BLOCKS);
                    let index = match free.iter().position(|(at, class, _)| (*at, *class) == (place, size)) {
                        Some(index) => index,
                        None => {
                            free.push((place, size, Vec::new()));
                            free.len() - 1
                        }
                    };
                    free[index].2.extend((1..chunk / size).rev().map(|piece| base + piece * size));
                }
                base
            }
        };
        LIVE_BLOCKS.fetch_add(1, Ordering::SeqCst);
        Ok(Block { address: address as *mut u8, place, size })
    }
}

impl Drop for Block {
    /// Back to the free list: no CUDA call, so also inside a host function or a CUDA user
    /// object's destructor, where the last holder may drop it.
    fn drop(&mut self) {
        let mut free = lock(&FREE_BLOCKS);
        let key = (self.place, self.size);
        match free.iter_mut().find(|(at, class, _)| (*at, *class) == key) {
            Some((_, _, list)) => list.push(self.address as usize),
            None => free.push((self.place, self.size, vec![self.address as usize])),
        }
        LIVE_BLOCKS.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(super) const OVERFLOW: &str = "the byte size of the words overflows";

/// New memory of `bytes` at `place`, kept for the life of the process.
pub(super) fn allocate(place: Place, bytes: usize) -> Result<usize> {
    refuse_inside_host_fn()?;
    // Another thread's Global capture must not forbid the allocation; this thread's capture,
    // or any Global one of this crate, would be invalidated by it: refused.
    let _hold = crate::call::transitions::unsafe_call_hold()?;
    let mut address: *mut c_void = std::ptr::null_mut();
    match place {
        Place::Host => {
            // The runtime would bind device 0's primary context on a thread without one: make
            // it current for the calls, and restore what was there.
            let _current = Device::new(0)?.make_current()?;
            let flags = sys::cudaHostAllocMapped | sys::cudaHostAllocPortable;
            // SAFETY: a valid out-pointer; bytes > 0; valid flags.
            check(unsafe { sys::cudaHostAlloc(&mut address, bytes, flags) }, "cudaHostAlloc")?;
            let mut device: *mut c_void = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; mapped memory just allocated; no flags.
            check(unsafe { sys::cudaHostGetDevicePointer(&mut device, address, 0) }, "cudaHostGetDevicePointer")?;
            if device != address {
                // Without unified addressing the words would need an address per device: the
                // memory is left allocated (freeing it may block, see the module docs).
                return Err(Error::Cuda {
                    api: "cudaHostGetDevicePointer",
                    code: crate::CudaCode(sys::cudaError::cudaErrorNotSupported.0 as i32),
                });
            }
        }
        Place::Device(device) => {
            let _current = device.make_current()?;
            // SAFETY: a valid out-pointer; bytes > 0.
            check(unsafe { sys::cudaMalloc(&mut address, bytes) }, "cudaMalloc")?;
        }
    }
    Ok(address as usize)
}
