//! The current stream: per thread and per device, the null stream unless a
//! [`CurrentStreamGuard`] from [`Stream::make_current`] says otherwise. Guards nest, restore the
//! previous current stream when they drop (also when unwinding), and are `!Send`.

use crate::device::Device;
use crate::error::Result;
use crate::stream::Stream;
use std::cell::RefCell;
use std::marker::PhantomData;

thread_local! {
    /// Per device ordinal, the stack of streams made current on this thread (borrowed views).
    static CURRENT: RefCell<Vec<Vec<Stream>>> = const { RefCell::new(Vec::new()) };
}

/// Keeps a stream current on this thread for its device until dropped. Created by
/// [`Stream::make_current`]; borrows the stream, so the stream outlives it.
///
/// Leaking a guard (`std::mem::forget`) leaves its stream current after the borrow ends; if the
/// stream is then destroyed, calls through [`Stream::with_current`] get CUDA's error for a
/// destroyed handle. Drop guards; do not forget them.
#[derive(Debug)]
#[must_use = "the stream is current only while the guard lives"]
pub struct CurrentStreamGuard<'a> {
    device: usize,
    depth: usize,
    _stream: PhantomData<&'a Stream>,
    _thread_bound: PhantomData<*const ()>,
}

impl Stream {
    /// Makes this stream the current stream of its device on this thread until the guard drops.
    pub fn make_current(&self) -> CurrentStreamGuard<'_> {
        let device = self.device().ordinal() as usize;
        let depth = CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            if current.len() <= device {
                current.resize_with(device + 1, Vec::new);
            }
            let stack = &mut current[device];
            stack.push(self.borrow_view());
            stack.len() - 1
        });
        CurrentStreamGuard { device, depth, _stream: PhantomData, _thread_bound: PhantomData }
    }

    /// Runs `f` with `device`'s current stream on this thread: the innermost live
    /// [`Stream::make_current`], else the device's null stream.
    ///
    /// # Errors
    /// Creating the null stream's view fails only when the device is unusable.
    pub fn with_current<R>(device: Device, f: impl FnOnce(&Stream) -> R) -> Result<R> {
        let innermost = CURRENT.with(|current| {
            let current = current.borrow();
            current.get(device.ordinal() as usize).and_then(|stack| stack.last()).map(Stream::borrow_view)
        });
        match innermost {
            Some(stream) => Ok(f(&stream)),
            None => Ok(f(&Stream::null(device)?)),
        }
    }
}

impl Drop for CurrentStreamGuard<'_> {
    fn drop(&mut self) {
        // Truncating (not popping) keeps the stack right even when guards drop out of order:
        // an outer guard's drop also ends the inner ones.
        let _ = CURRENT.try_with(|current| {
            if let Ok(mut current) = current.try_borrow_mut() {
                current[self.device].truncate(self.depth);
            }
        });
    }
}
