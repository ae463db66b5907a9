//! Safe launchers for the kernels in `kernels/`, on cuda-stream's streams, declared with
//! `kernel!` and launched with `Kernel::launch`.

use cuda_stream::{AsStream, DeviceBuffer, Error, LaunchConfig, MappedWords, Result, StreamRef};
use std::sync::atomic::Ordering;
use std::time::Duration;

cuda_stream::kernel! {
    /// `y = a * x + y` over `n` elements.
    static SAXPY = fn kt_saxpy(a: f32, x: *const f32, y: *mut f32, n: u64);
    /// Spins `spin_ns` nanoseconds, then appends `tag` to `log` (`log[0]` counts the tags).
    static APPEND_TAG = fn kt_append_tag(log: *mut u32, tag: u32, spin_ns: u64);
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
    let blocks = n.div_ceil(256).clamp(1, 1024) as u32;
    let home = y.stream();
    x.use_on(&home, |stream, x_ptr| {
        // SAFETY: both addresses hold `n` floats, used on `stream` only: `y`'s home, and `x`
        // through `use_on`, which orders the use with `x`'s home stream.
        unsafe { SAXPY.launch(stream, &LaunchConfig::new(blocks, 256), (a, x_ptr.cast_const(), y_ptr, n)) }
    })?
}

/// A log of tags in mapped host memory that kernels append to: `[count, tags...]`.
#[derive(Debug)]
pub struct TagLog {
    words: MappedWords<u32>,
    capacity: u32,
}

impl TagLog {
    /// An empty log for `capacity` tags.
    ///
    /// # Errors
    /// The allocation's error.
    pub fn new(capacity: u32) -> Result<TagLog> {
        Ok(TagLog { words: MappedWords::new(capacity as usize + 1)?, capacity })
    }

    /// The tags appended so far, in the order the kernels appended them. Synchronize first.
    pub fn tags(&self) -> Vec<u32> {
        let words = self.words.words();
        let count = words[0].load(Ordering::Acquire).min(self.capacity) as usize;
        words[1..=count].iter().map(|tag| tag.load(Ordering::Acquire)).collect()
    }
}

/// Enqueues a kernel on `stream` that spins for `spin`, then appends `tag` to `log`.
///
/// # Errors
/// The launch's own error; the errors of noting the use of the log's memory.
pub fn append_tag(stream: &StreamRef, log: &TagLog, tag: u32, spin: Duration) -> Result<()> {
    let spin_ns = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
    // Through `use_on`: the log's memory is not reused before the kernel has run.
    log.words.use_on(stream, |on, words| {
        // SAFETY: `words` holds 1 + capacity words, kept by `use_on` until the kernel has run;
        // the kernel appends one tag per launch (callers keep within the capacity).
        unsafe { APPEND_TAG.launch(on, &LaunchConfig::new(1, 1), (words, tag, spin_ns)) }
    })?
}
