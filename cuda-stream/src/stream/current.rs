//! The current stream: per thread and per device, the null stream unless a closure passed to
//! [`StreamRef::as_current`] is running.
//!
//! The current stream is scoped by a closure, not by a guard: a guard can be leaked
//! (`std::mem::forget` is safe), and a leaked guard would leave a stream "current" after it was
//! destroyed, where CUDA may already have handed its handle value to an unrelated stream. A
//! closure cannot be leaked: the stream is current exactly while the closure runs, which is
//! while the borrow that made it current lasts, and it stops being current when the closure
//! returns or unwinds.
//!
//! The current stream can also be read as a value, [`CurrentStream`], which stays sound the
//! same way: it names one `as_current` scope (by a number never reused on its thread, not by
//! the handle), it cannot leave the thread, and every use checks that its scope is still
//! running, or returns [`Error::NotCurrent`].

use crate::device::Device;
use crate::ffi::error::{Error, Result};
use crate::stream::{BuiltinStream, StreamRef};
use std::cell::RefCell;
use std::marker::PhantomData;

/// One `as_current` scope: its number on this thread, and the stream it made current.
struct Scope {
    number: u64,
    stream: StreamRef,
}

/// A thread's `as_current` scopes.
struct Scopes {
    /// The number of the last scope begun on this thread (0: none yet).
    last: u64,
    /// Per device ordinal, the streams made current on this thread, innermost last. Each entry
    /// lives exactly as long as the `as_current` call that pushed it, which borrows the stream.
    by_device: Vec<Vec<Scope>>,
}

impl Scopes {
    /// `device`'s scopes, innermost last (none if it has never had one).
    fn of(&self, device: usize) -> &[Scope] {
        self.by_device.get(device).map_or(&[], Vec::as_slice)
    }
}

thread_local! {
    /// One thread-local for both, so that a scope's begin and end each look it up once.
    static CURRENT: RefCell<Scopes> = const { RefCell::new(Scopes { last: 0, by_device: Vec::new() }) };
}

/// Pops what `as_current` pushed, when the closure returns or unwinds.
struct Pop {
    device: usize,
    number: u64,
}

impl Drop for Pop {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|current| {
            let stack = &mut current.borrow_mut().by_device[self.device];
            // Scopes end innermost first, so this is the last entry; `retain` keeps that true
            // even if it were not.
            if stack.last().is_some_and(|scope| scope.number == self.number) {
                stack.pop();
            } else {
                stack.retain(|scope| scope.number != self.number);
            }
        });
    }
}

impl StreamRef {
    /// Runs `f` with this stream as the current stream of its device on this thread
    /// ([`StreamRef::with_current`] and [`StreamRef::current`] return it), then makes the
    /// previous one current again, also when `f` panics. Nests. The CUDA device stays as it
    /// is: [`StreamRef::as_current_with_device`] also makes the stream's device current.
    pub fn as_current<R>(&self, f: impl FnOnce() -> R) -> R {
        let device = self.device().ordinal() as usize;
        let pushed = CURRENT.try_with(|current| {
            let mut current = current.borrow_mut();
            current.last += 1;
            let number = current.last;
            if current.by_device.len() <= device {
                current.by_device.resize_with(device + 1, Vec::new);
            }
            current.by_device[device].push(Scope { number, stream: self.view() });
            number
        });
        // During thread exit there is no current-stream stack left: run `f` as it is.
        let _pop = pushed.ok().map(|number| Pop { device, number });
        f()
    }

    /// PyTorch's `with torch.cuda.stream(s):` in one call: makes this stream's device the
    /// current CUDA device *and* this stream the current stream of that device, runs `f`, then
    /// restores both (the previous context and the previous current stream), also when `f`
    /// panics.
    ///
    /// # Errors
    /// The errors of [`Device::make_current`]; `f` has not run then.
    pub fn as_current_with_device<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
        let _device = self.device().make_current()?;
        Ok(self.as_current(f))
    }

    /// Runs `f` with `device`'s current stream on this thread: the innermost
    /// [`StreamRef::as_current`] still running, else the device's null stream. Makes no CUDA
    /// call.
    pub fn with_current<R>(device: Device, f: impl FnOnce(&StreamRef) -> R) -> R {
        // The innermost scope is running while this call lasts, so `view` finds it.
        let view = StreamRef::current(device).view().unwrap_or_else(|_| BuiltinStream::null(device).view());
        // The copy is handed out only by reference, for the duration of `f`, which runs inside
        // the `as_current` call that keeps the stream borrowed.
        f(&view)
    }

    /// `device`'s current stream on this thread, as a value: the innermost
    /// [`StreamRef::as_current`] running now, else the device's null stream. Makes no CUDA
    /// call. The value keeps naming that scope's stream: [`CurrentStream::with`] lends it while
    /// the scope runs, and returns [`Error::NotCurrent`] once it has ended.
    pub fn current(device: Device) -> CurrentStream {
        let number = CURRENT
            .try_with(|current| current.borrow().of(device.ordinal() as usize).last().map(|scope| scope.number))
            .ok()
            .flatten();
        CurrentStream { device, scope: number, _thread_bound: PhantomData }
    }
}

/// The stream that was current on this thread when [`StreamRef::current`] was called: an
/// `as_current` scope's stream, or the device's null stream (which is always there).
///
/// `!Send` and `!Sync`: a current stream is a property of the thread. It refers to its scope
/// by a number never reused on the thread, so a stream created later at the same handle value
/// is never mistaken for it.
#[derive(Debug)]
pub struct CurrentStream {
    device: Device,
    /// The `as_current` scope, or `None` for the device's null stream.
    scope: Option<u64>,
    _thread_bound: PhantomData<*const ()>,
}

impl CurrentStream {
    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Whether the scope that made this stream current is still running (always true for the
    /// null stream).
    pub fn is_current(&self) -> bool {
        self.with(|_| ()).is_ok()
    }

    /// Runs `f` with the stream, if its scope is still running. The stream is lent to `f`
    /// alone, not to the caller: the scope cannot end while `f` runs (it ends when its own
    /// closure returns, on this thread), but a loan kept past `f` could outlive it.
    ///
    /// # Errors
    /// [`Error::NotCurrent`] once the `as_current` scope that made the stream current has
    /// ended: the stream may have been destroyed since, and its handle value reused.
    pub fn with<R>(&self, f: impl FnOnce(&StreamRef) -> R) -> Result<R> {
        let view = self.view()?;
        // The copy is handed out only by reference, for the duration of `f`, which runs inside
        // the `as_current` call that keeps the stream borrowed.
        Ok(f(&view))
    }

    /// A copy of the stream's view while its scope runs (see [`StreamRef::view`]).
    fn view(&self) -> Result<StreamRef> {
        let Some(number) = self.scope else {
            return Ok(BuiltinStream::null(self.device).view());
        };
        CURRENT
            .try_with(|current| {
                let current = current.borrow();
                let stack = current.of(self.device.ordinal() as usize);
                stack.iter().rev().find(|scope| scope.number == number).map(|scope| scope.stream.view())
            })
            .ok()
            .flatten()
            .ok_or(Error::NotCurrent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host-only: scopes of built-in streams (no CUDA call is made) nest, end innermost first
    /// and also out of order, and a `CurrentStream` of an ended scope is refused.
    #[test]
    fn scopes_nest_end_and_are_checked_without_cuda() {
        let (zero, one) = (Device::from_ordinal(0), Device::from_ordinal(1));
        let (outer, inner) = (BuiltinStream::per_thread(zero), BuiltinStream::legacy(zero));
        let null = BuiltinStream::null(zero).as_raw();
        assert_eq!(StreamRef::with_current(zero, StreamRef::as_raw), null);
        let ended = outer.as_current(|| {
            let outer_current = StreamRef::current(zero);
            inner.as_current(|| {
                assert_eq!(StreamRef::with_current(zero, StreamRef::as_raw), inner.as_raw());
                assert_eq!(StreamRef::with_current(one, StreamRef::as_raw), BuiltinStream::null(one).as_raw());
                assert_eq!(outer_current.with(StreamRef::as_raw), Ok(outer.as_raw()), "an outer scope still runs");
            });
            assert_eq!(StreamRef::with_current(zero, StreamRef::as_raw), outer.as_raw());
            StreamRef::current(zero)
        });
        assert_eq!(ended.with(StreamRef::as_raw), Err(Error::NotCurrent));
        assert_eq!(StreamRef::with_current(zero, StreamRef::as_raw), null);
        // A scope that ends out of order (no safe code does this) leaves the others intact.
        CURRENT.with(|current| assert!(current.borrow().of(0).is_empty()));
        CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            current.by_device[0].push(Scope { number: u64::MAX - 1, stream: outer.view() });
            current.by_device[0].push(Scope { number: u64::MAX, stream: inner.view() });
        });
        drop(Pop { device: 0, number: u64::MAX - 1 });
        CURRENT.with(|current| {
            let numbers: Vec<u64> = current.borrow().of(0).iter().map(|scope| scope.number).collect();
            assert_eq!(numbers, [u64::MAX]);
        });
        drop(Pop { device: 0, number: u64::MAX });
        CURRENT.with(|current| assert!(current.borrow().of(0).is_empty()));
    }
}
