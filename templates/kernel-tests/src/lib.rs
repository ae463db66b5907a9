//! Safe launchers for the kernels in `kernels/`, on cuda-stream's streams.

use cuda_stream::{AsStream, DeviceBuffer, Error, Result, StreamRef, check, sys};
use std::time::Duration;

unsafe extern "C" {
    fn kt_append_tag(stream: sys::cudaStream_t, log: *mut u32, tag: u32, spin_ns: u64) -> sys::cudaError_t;
    fn kt_saxpy(stream: sys::cudaStream_t, a: f32, x: *const f32, y: *mut f32, n: u64) -> sys::cudaError_t;
}

/// `y = a * x + y` on `y`'s home stream (where `y` is allocated and will be freed); `x` is
/// used there through [`DeviceBuffer::use_on`], which orders the use with `x`'s own stream.
///
/// # Errors
/// [`Error::Size`] unless `x` and `y` have the same length; the launch's own error.
pub fn saxpy<S: AsStream, T: AsStream>(
    a: f32,
    x: &mut DeviceBuffer<f32, S>,
    y: &mut DeviceBuffer<f32, T>,
) -> Result<()> {
    if x.len() != y.len() {
        return Err(Error::Size("saxpy needs x and y of one length"));
    }
    let (n, y_ptr) = (y.len() as u64, y.as_mut_ptr());
    let home = y.stream();
    x.use_on(&home, |stream, x_ptr| {
        // SAFETY: both addresses hold `n` floats, used on `stream` only: `y`'s home, and `x`
        // through `use_on`, which orders the use with `x`'s home stream.
        stream.launch("kt_saxpy", |raw| unsafe { kt_saxpy(raw, a, x_ptr, y_ptr, n) })
    })?
}

/// A log of tags in mapped, pinned host memory that kernels append to: `[count, tags...]`.
#[derive(Debug)]
pub struct TagLog {
    memory: *mut u32,
    capacity: u32,
}

impl TagLog {
    /// An empty log for `capacity` tags.
    ///
    /// # Errors
    /// The allocation's error.
    pub fn new(capacity: u32) -> Result<TagLog> {
        let mut memory: *mut std::ffi::c_void = std::ptr::null_mut();
        let bytes = (capacity as usize + 1) * size_of::<u32>();
        // SAFETY: a valid out-pointer; mapped memory is addressable from the device (UVA).
        check(unsafe { sys::cudaHostAlloc(&mut memory, bytes, sys::cudaHostAllocMapped) }, "cudaHostAlloc")?;
        // SAFETY: `bytes` were just allocated.
        unsafe { std::ptr::write_bytes(memory.cast::<u8>(), 0, bytes) };
        Ok(TagLog { memory: memory.cast(), capacity })
    }

    /// The tags appended so far, in the order the kernels appended them. Synchronize first.
    pub fn tags(&self) -> Vec<u32> {
        // SAFETY: the allocation holds 1 + capacity u32s; kernels write it, so read volatile.
        let count = unsafe { self.memory.read_volatile() }.min(self.capacity);
        // SAFETY: as above, `count` is within the capacity.
        (0..count as usize).map(|i| unsafe { self.memory.add(1 + i).read_volatile() }).collect()
    }
}

impl Drop for TagLog {
    fn drop(&mut self) {
        // Kernels may still write the log: wait for the device before freeing it. Errors are
        // ignored (a drop cannot report them); after a failed synchronize the memory leaks.
        // SAFETY: no arguments; then the allocation of `new`, freed once.
        unsafe {
            if sys::cudaDeviceSynchronize() == sys::cudaError::cudaSuccess {
                let _ = sys::cudaFreeHost(self.memory.cast());
            }
        }
    }
}

/// Enqueues a kernel on `stream` that spins for `spin`, then appends `tag` to `log`.
///
/// # Errors
/// The launch's own error.
pub fn append_tag(stream: &StreamRef, log: &TagLog, tag: u32, spin: Duration) -> Result<()> {
    let spin_ns = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: the log outlives every kernel writing it (its drop waits for the device), and
    // the kernel appends at most one tag per launch (callers keep within the capacity).
    stream.launch("kt_append_tag", |raw| unsafe { kt_append_tag(raw, log.memory, tag, spin_ns) })
}
