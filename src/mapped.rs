//! Mapped pinned host memory (`cudaHostAlloc` with `cudaHostAllocMapped | cudaHostAllocPortable`,
//! so kernels of every device can use it) that kernels write and the host reads: the tag log and
//! the host-written flag.

use crate::ffi::cs_tag_log;
use crate::{null, volatile_read};
use cuda_stream::{Result, check, sys};
use std::ffi::c_void;

/// One entry of the tag log: which kernel, and when it ran on the GPU (`%globaltimer` ns).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TagEntry {
    /// The tag the kernel was launched with.
    pub tag: u32,
    /// Padding, as in C.
    pub reserved: u32,
    /// When the kernel started.
    pub start_ns: u64,
    /// When it finished its spin and appended the tag.
    pub end_ns: u64,
}

/// A pinned, mapped allocation, freed on drop after the device has finished with it.
#[derive(Debug)]
struct Mapped {
    host: *mut c_void,
    device: *mut c_void,
}

impl Mapped {
    fn new(bytes: usize) -> Result<Mapped> {
        let mut host = null();
        let flags = sys::cudaHostAllocMapped | sys::cudaHostAllocPortable;
        // SAFETY: `host` is a valid out-pointer.
        check(unsafe { sys::cudaHostAlloc(&mut host, bytes, flags) }, "cudaHostAlloc")?;
        // SAFETY: `host` points to `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut device = null();
        // SAFETY: `host` came from cudaHostAlloc with the mapped flag.
        let code = unsafe { sys::cudaHostGetDevicePointer(&mut device, host, 0) };
        let mapped = Mapped { host, device };
        check(code, "cudaHostGetDevicePointer")?;
        Ok(mapped)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // Kernels may still write here: wait for the device before freeing. Errors are those of
        // earlier work, which the test has seen or will see elsewhere.
        // SAFETY: plain calls; `host` came from cudaHostAlloc and is freed once.
        unsafe {
            let _ = sys::cudaDeviceSynchronize();
            let _ = sys::cudaFreeHost(self.host);
        }
    }
}

/// The device-side log the tag kernel appends to: the order of its entries is the order in
/// which the GPU ran the kernels.
#[derive(Debug)]
pub struct TagLog {
    memory: Mapped,
    capacity: u32,
}

// SAFETY: the memory is a plain allocation that any thread may read; the device writes it.
unsafe impl Send for TagLog {}
// SAFETY: reads are volatile copies; the only writers are kernels.
unsafe impl Sync for TagLog {}

impl TagLog {
    /// A log with room for `capacity` entries.
    ///
    /// # Errors
    /// The allocation's error.
    pub fn new(capacity: u32) -> Result<TagLog> {
        let bytes = size_of::<cs_tag_log>() + capacity as usize * size_of::<TagEntry>();
        let memory = Mapped::new(bytes)?;
        let log = TagLog { memory, capacity };
        // SAFETY: the allocation holds a cs_tag_log header.
        unsafe { (*log.host()).capacity = capacity };
        Ok(log)
    }

    fn host(&self) -> *mut cs_tag_log {
        self.memory.host.cast()
    }

    /// The pointer kernels write through.
    pub fn device_ptr(&self) -> *mut cs_tag_log {
        self.memory.device.cast()
    }

    /// The entries written so far, in the order the GPU appended them. Synchronize first.
    pub fn entries(&self) -> Vec<TagEntry> {
        // SAFETY: the header is inside the allocation.
        let count = volatile_read(unsafe { &raw const (*self.host()).count }).min(self.capacity);
        // SAFETY: entries follow the header, `capacity` of them.
        let first = unsafe { (&raw const (*self.host()).entries).cast::<TagEntry>() };
        // SAFETY: `i < count <= capacity`.
        (0..count as usize).map(|i| volatile_read(unsafe { first.add(i) })).collect()
    }

    /// The tags written so far, in order.
    pub fn tags(&self) -> Vec<u32> {
        self.entries().iter().map(|entry| entry.tag).collect()
    }

    /// How many tags kernels tried to write (more than `capacity` means some were dropped).
    pub fn count(&self) -> u32 {
        // SAFETY: the header is inside the allocation.
        volatile_read(unsafe { &raw const (*self.host()).count })
    }

    /// Empties the log. Only while no kernel writes to it.
    pub fn clear(&self) {
        // SAFETY: the header is inside the allocation.
        unsafe { std::ptr::write_volatile(&raw mut (*self.host()).count, 0) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// A flag the host sets and a kernel waits for, with the kernel's outcome.
#[derive(Debug)]
pub struct MappedFlag {
    memory: Mapped,
}

// SAFETY: as for TagLog.
unsafe impl Send for MappedFlag {}
// SAFETY: as for TagLog.
unsafe impl Sync for MappedFlag {}

/// What the wait-flag kernel saw.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FlagOutcome {
    /// The kernel has not finished.
    Pending,
    /// The kernel saw the flag set.
    Seen,
    /// The kernel gave up waiting.
    TimedOut,
}

impl MappedFlag {
    /// A cleared flag.
    ///
    /// # Errors
    /// The allocation's error.
    pub fn new() -> Result<MappedFlag> {
        Ok(MappedFlag { memory: Mapped::new(2 * size_of::<u32>())? })
    }

    pub(crate) fn device_ptrs(&self) -> (*const u32, *mut u32) {
        let flag = self.memory.device.cast::<u32>();
        // SAFETY: the allocation holds two u32s.
        (flag, unsafe { flag.add(1) })
    }

    /// Sets the flag: a waiting kernel sees it and finishes.
    pub fn set(&self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: the first u32 of the allocation.
        unsafe { std::ptr::write_volatile(self.memory.host.cast::<u32>(), 1) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// What the kernel reported.
    pub fn outcome(&self) -> FlagOutcome {
        // SAFETY: the second u32 of the allocation.
        match volatile_read(unsafe { self.memory.host.cast::<u32>().add(1) }) {
            1 => FlagOutcome::Seen,
            2 => FlagOutcome::TimedOut,
            _ => FlagOutcome::Pending,
        }
    }
}
