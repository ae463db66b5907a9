//! The current stream: per thread and per device, the null stream unless a closure passed to
//! [`StreamRef::as_current`] is running.
//!
//! The current stream is scoped by a closure, not by a guard: a guard can be leaked
//! (`std::mem::forget` is safe), and a leaked guard would leave a stream "current" after it was
//! destroyed, where CUDA may already have handed its handle value to an unrelated stream. A
//! closure cannot be leaked: the stream is current exactly while the closure runs, which is
//! while the borrow that made it current lasts, and it stops being current when the closure
//! returns or unwinds.

use crate::device::Device;
use crate::stream::{BuiltinStream, StreamRef};
use std::cell::RefCell;

thread_local! {
    /// Per device ordinal, the streams made current on this thread, innermost last. Each entry
    /// lives exactly as long as the `as_current` call that pushed it, which borrows the stream.
    static CURRENT: RefCell<Vec<Vec<StreamRef>>> = const { RefCell::new(Vec::new()) };
}

/// Pops what `as_current` pushed, when the closure returns or unwinds.
struct Pop {
    device: usize,
}

impl Drop for Pop {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|current| current.borrow_mut()[self.device].pop());
    }
}

impl StreamRef {
    /// Runs `f` with this stream as the current stream of its device on this thread
    /// ([`StreamRef::with_current`] returns it), then makes the previous one current again,
    /// also when `f` panics. Nests.
    pub fn as_current<R>(&self, f: impl FnOnce() -> R) -> R {
        let device = self.device().ordinal() as usize;
        let pushed = CURRENT.try_with(|current| {
            let mut current = current.borrow_mut();
            if current.len() <= device {
                current.resize_with(device + 1, Vec::new);
            }
            current[device].push(self.view());
        });
        // During thread exit there is no current-stream stack left: run `f` as it is.
        let _pop = pushed.is_ok().then_some(Pop { device });
        f()
    }

    /// Runs `f` with `device`'s current stream on this thread: the innermost
    /// [`StreamRef::as_current`] still running, else the device's null stream. Makes no CUDA
    /// call.
    pub fn with_current<R>(device: Device, f: impl FnOnce(&StreamRef) -> R) -> R {
        let innermost = CURRENT
            .try_with(|current| {
                let current = current.borrow();
                current.get(device.ordinal() as usize).and_then(|stack| stack.last()).map(StreamRef::view)
            })
            .ok()
            .flatten();
        // The copy is handed out only by reference, for the duration of `f`, which runs inside
        // the `as_current` call that keeps the stream borrowed.
        match innermost {
            Some(stream) => f(&stream),
            None => f(&BuiltinStream::null(device)),
        }
    }
}
