//! Streams, with their ownership tracked: [`Ownership::Owned`] (created here, destroyed on
//! drop), [`Ownership::Borrowed`] (a foreign handle, never destroyed) and
//! [`Ownership::Builtin`] (the null, legacy and per-thread default streams, never destroyed).

use crate::device::{Device, DeviceGuard};
use crate::error::{Error, Result, check, check_ready};
use crate::event::{Event, EventFlags};
use crate::host_fn::refuse_inside_host_fn;
use crate::live;
use crate::priority::Priority;
use crate::sys;
use std::cell::RefCell;
use std::ffi::{c_int, c_uint, c_ulonglong};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;

/// Who owns a stream handle, and so whether dropping the [`Stream`] destroys it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// Created by this crate (or handed over with [`Stream::from_raw_owned`]): destroyed when
    /// the `Stream` drops.
    Owned,
    /// Someone else's handle ([`Stream::from_raw`], [`Stream::borrow`]): never destroyed here.
    Borrowed,
    /// One of CUDA's own default streams: never destroyed.
    Builtin(Builtin),
}

/// CUDA's built-in streams. Each means the stream of the device current when it is used, so a
/// [`Stream`] of this kind makes its device current around every call.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// Handle 0: the legacy stream, or with the `per-thread-default-stream` feature the calling
    /// thread's per-thread stream (see [`crate::NULL_STREAM_IS_PER_THREAD`]).
    Null,
    /// Handle `cudaStreamLegacy` (0x1): the device's legacy default stream, which
    /// synchronizes with every blocking stream of the device.
    Legacy,
    /// Handle `cudaStreamPerThread` (0x2): the calling thread's own default stream.
    PerThread,
}

impl Builtin {
    fn handle(self) -> sys::cudaStream_t {
        match self {
            Builtin::Null => std::ptr::null_mut(),
            Builtin::Legacy => sys::cudaStreamLegacy,
            Builtin::PerThread => sys::cudaStreamPerThread,
        }
    }

    fn of_handle(handle: sys::cudaStream_t) -> Option<Builtin> {
        match handle as usize {
            0 => Some(Builtin::Null),
            sys::LEGACY_STREAM_HANDLE => Some(Builtin::Legacy),
            sys::PER_THREAD_STREAM_HANDLE => Some(Builtin::PerThread),
            _ => None,
        }
    }

    /// Whether this handle means a different stream on each host thread.
    fn is_thread_bound(self) -> bool {
        match self {
            Builtin::Null => crate::NULL_STREAM_IS_PER_THREAD,
            Builtin::Legacy => false,
            Builtin::PerThread => true,
        }
    }
}

/// How to create a stream: blocking or not, and at what priority.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StreamOptions {
    /// `cudaStreamNonBlocking`: the stream does not synchronize with the legacy stream.
    pub non_blocking: bool,
    /// The priority; `None` is CUDA's default (0). Outside the device's range it is an error.
    pub priority: Option<Priority>,
}

impl StreamOptions {
    /// A non-blocking stream at the default priority.
    pub fn non_blocking() -> StreamOptions {
        StreamOptions { non_blocking: true, priority: None }
    }

    /// The same options with this priority.
    pub fn with_priority(self, priority: Priority) -> StreamOptions {
        StreamOptions { priority: Some(priority), ..self }
    }
}

/// A CUDA stream on a known device, with its [`Ownership`].
///
/// * `Eq` and `Hash` compare CUDA's stream id (`cudaStreamGetId`, unique for the life of the
///   context), not the handle: a handle value reused after a destroy is a different stream.
///   Two wrappers of the same stream are equal, and `Stream::null` equals `Stream::legacy` in
///   a legacy-default build, because they are one stream.
/// * `Send + Sync`: CUDA's stream calls are thread-safe. The one exception is a stream that
///   means something different on each thread (the per-thread default stream): such a `Stream`
///   remembers its thread and every call from another thread returns [`Error::WrongThread`]
///   instead of silently using that thread's own stream. (A `!Send` type would leak the same
///   way through `&Stream` and scoped threads; the check costs one comparison, on that kind only.)
pub struct Stream {
    raw: sys::cudaStream_t,
    device: Device,
    ownership: Ownership,
    id: u64,
    thread: Option<usize>,
}

// SAFETY: a cudaStream_t is a handle the CUDA runtime lets any thread use; the thread-bound
// per-thread stream checks the calling thread on every use (see the type's docs).
unsafe impl Send for Stream {}
// SAFETY: every method takes `&self` and makes only thread-safe runtime calls.
unsafe impl Sync for Stream {}

thread_local! {
    /// Its address identifies the calling thread, cheaper than `thread::current().id()`.
    static THREAD_TOKEN: u8 = const { 0 };
    /// One marker event per device for `wait_stream`, so that no event is created or destroyed
    /// per call. Thread-local: the record and the wait that use it happen on this thread, in
    /// order, so no other call can re-record it in between.
    static MARKERS: RefCell<Vec<Option<Event>>> = const { RefCell::new(Vec::new()) };
}

fn thread_token() -> usize {
    THREAD_TOKEN.with(|token| token as *const u8 as usize)
}

impl Stream {
    /// Creates a stream on `device`
    /// ([`cudaStreamCreateWithPriority`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// [`Error::PriorityOutOfRange`] for a priority outside the device's range (CUDA would clamp
    /// it); CUDA's errors (no device, out of resources).
    pub fn new(device: Device, options: StreamOptions) -> Result<Stream> {
        let _current = device.make_current()?;
        let priority = match options.priority {
            None => 0,
            Some(priority) => device.check_priority(priority)?.value(),
        };
        let flags = if options.non_blocking { sys::cudaStreamNonBlocking } else { sys::cudaStreamDefault };
        let mut raw: sys::cudaStream_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; flags and priority are plain values.
        let code = unsafe { sys::cudaStreamCreateWithPriority(&mut raw, flags as c_uint, priority) };
        check(code, "cudaStreamCreateWithPriority")?;
        live::stream_created();
        // If reading the id fails, the new owned stream drops and is destroyed: nothing leaks.
        Stream::identified(raw, device, Ownership::Owned, None)
    }

    /// The device's null stream, handle 0: the legacy stream, or the calling thread's
    /// per-thread stream in a `per-thread-default-stream` build.
    ///
    /// # Errors
    /// CUDA's errors when the device is unusable.
    pub fn null(device: Device) -> Result<Stream> {
        Stream::builtin(device, Builtin::Null)
    }

    /// The device's legacy default stream (`cudaStreamLegacy`): it waits for all earlier work
    /// on the device's blocking streams, and they wait for it.
    ///
    /// # Errors
    /// CUDA's errors when the device is unusable.
    pub fn legacy(device: Device) -> Result<Stream> {
        Stream::builtin(device, Builtin::Legacy)
    }

    /// The calling thread's per-thread default stream (`cudaStreamPerThread`). Usable only on
    /// this thread: from another, every call returns [`Error::WrongThread`].
    ///
    /// # Errors
    /// CUDA's errors when the device is unusable.
    pub fn per_thread(device: Device) -> Result<Stream> {
        Stream::builtin(device, Builtin::PerThread)
    }

    fn builtin(device: Device, builtin: Builtin) -> Result<Stream> {
        let thread = builtin.is_thread_bound().then(thread_token);
        Stream::identified(builtin.handle(), device, Ownership::Builtin(builtin), thread)
    }

    /// A `Stream` of `raw` with CUDA's id read (`cudaStreamGetId`).
    fn identified(
        raw: sys::cudaStream_t,
        device: Device,
        ownership: Ownership,
        thread: Option<usize>,
    ) -> Result<Stream> {
        let mut stream = Stream { raw, device, ownership, id: 0, thread };
        stream.id = stream.read_id()?;
        Ok(stream)
    }

    /// Wraps a stream handle that someone else owns; dropping the `Stream` never destroys it.
    /// The special handles (0, `cudaStreamLegacy`, `cudaStreamPerThread`) give the matching
    /// [`Ownership::Builtin`] stream: **the null handle means the device's null stream**, not
    /// "no stream".
    ///
    /// # Safety
    /// `handle` must be a valid stream of `device` (or a special handle), and its owner must
    /// not destroy it while this `Stream` or anything derived from it is in use.
    ///
    /// # Errors
    /// CUDA's error if `cudaStreamGetId` rejects the handle.
    pub unsafe fn from_raw(handle: sys::cudaStream_t, device: Device) -> Result<Stream> {
        if let Some(builtin) = Builtin::of_handle(handle) {
            return Stream::builtin(device, builtin);
        }
        Stream::identified(handle, device, Ownership::Borrowed, None)
    }

    /// Takes ownership of a stream handle: dropping the `Stream` destroys it.
    ///
    /// # Safety
    /// `handle` must be a valid stream of `device` that nobody else will destroy or use after
    /// this `Stream` destroys it (for example one from [`Stream::into_raw`]).
    ///
    /// # Errors
    /// [`Error::BuiltinNotOwnable`] for the special handles; CUDA's error if `cudaStreamGetId`
    /// rejects the handle (the handle is then left alone).
    pub unsafe fn from_raw_owned(handle: sys::cudaStream_t, device: Device) -> Result<Stream> {
        if Builtin::of_handle(handle).is_some() {
            return Err(Error::BuiltinNotOwnable { handle: handle as usize });
        }
        // Read the id while borrowed, so a rejected handle is not destroyed by our drop.
        // SAFETY: the caller guarantees `handle` is a valid stream of `device`.
        let borrowed = unsafe { Stream::from_raw(handle, device) }?;
        live::stream_created();
        Ok(Stream { ownership: Ownership::Owned, ..borrowed })
    }

    /// Gives up ownership: returns the handle without destroying it. The caller now owns an
    /// owned stream (for others, this just returns the handle).
    pub fn into_raw(self) -> sys::cudaStream_t {
        if self.ownership == Ownership::Owned {
            live::stream_released();
        }
        ManuallyDrop::new(self).raw
    }

    /// A borrowed view of this stream whose lifetime the compiler ties to `self`.
    pub fn borrow(&self) -> StreamRef<'_> {
        StreamRef { stream: self.borrow_view(), _lifetime: PhantomData }
    }

    /// A non-owning copy (built-in streams stay built-in); the caller ties its lifetime.
    pub(crate) fn borrow_view(&self) -> Stream {
        let ownership = match self.ownership {
            Ownership::Owned => Ownership::Borrowed,
            other => other,
        };
        Stream { ownership, ..*self }
    }

    /// The raw handle, for FFI. It stays owned by this `Stream`.
    pub fn as_raw(&self) -> sys::cudaStream_t {
        self.raw
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Who owns the handle.
    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    /// CUDA's id for this stream (`cudaStreamGetId`), unique for the life of the context; for
    /// the per-thread stream, the id of the creating thread's.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Prepares one call on this stream. The built-in handles (0, 0x1, 0x2) mean "the stream of
    /// the current device (and thread)", so for them the device is made current (a no-op when
    /// it already is) and the per-thread stream is refused on other threads. Every other
    /// handle carries its own context: the runtime's stream and event calls work on it whatever
    /// device is current, so nothing is queried or switched (the multi-GPU tests prove it).
    #[inline(always)]
    pub(crate) fn enter(&self) -> Result<Option<DeviceGuard>> {
        if let Ownership::Builtin(_) = self.ownership {
            self.enter_builtin().map(Some)
        } else {
            refuse_inside_host_fn().map(|()| None)
        }
    }

    #[inline(never)]
    fn enter_builtin(&self) -> Result<DeviceGuard> {
        if self.thread.is_some_and(|thread| thread != thread_token()) {
            return Err(Error::WrongThread);
        }
        self.device.make_current()
    }

    fn read_id(&self) -> Result<u64> {
        let _current = self.enter()?;
        let mut id: c_ulonglong = 0;
        // SAFETY: `raw` is a valid stream (or special handle) of the current device.
        check(unsafe { sys::cudaStreamGetId(self.raw, &mut id) }, "cudaStreamGetId")?;
        Ok(id)
    }

    /// Whether all work enqueued so far has completed
    /// ([`cudaStreamQuery`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// `cudaErrorNotReady` is `Ok(false)`.
    ///
    /// # Errors
    /// Errors of earlier asynchronous work; `cudaErrorStreamCaptureUnsupported` while capturing.
    #[inline]
    pub fn query(&self) -> Result<bool> {
        let _current = self.enter()?;
        // SAFETY: `raw` is a live stream of the current device.
        check_ready(unsafe { sys::cudaStreamQuery(self.raw) }, "cudaStreamQuery")
    }

    /// Blocks until all work enqueued so far has completed
    /// ([`cudaStreamSynchronize`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// Errors of earlier asynchronous work; `cudaErrorStreamCaptureUnsupported` while capturing.
    #[inline]
    pub fn synchronize(&self) -> Result<()> {
        let _current = self.enter()?;
        // SAFETY: `raw` is a live stream of the current device.
        check(unsafe { sys::cudaStreamSynchronize(self.raw) }, "cudaStreamSynchronize")
    }

    /// Records `event` here: it completes when the work enqueued so far has
    /// ([`cudaEventRecord`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] if the event belongs to another device; CUDA's errors.
    #[inline]
    pub fn record(&self, event: &Event) -> Result<()> {
        if event.device() != self.device {
            return Err(mismatch("an event is recorded on a stream of its own device", self.device, event.device()));
        }
        self.record_raw(event.as_raw())?;
        event.mark_recorded();
        Ok(())
    }

    #[inline(always)]
    fn record_raw(&self, event: sys::cudaEvent_t) -> Result<()> {
        let _current = self.enter()?;
        // SAFETY: `event` and `raw` are live handles of the same device.
        check(unsafe { sys::cudaEventRecord(event, self.raw) }, "cudaEventRecord")
    }

    /// Records a new event (default [`EventFlags`]: no timing) and returns it.
    ///
    /// # Errors
    /// CUDA's errors creating or recording the event.
    pub fn record_event(&self) -> Result<Event> {
        let event = Event::new(self.device, EventFlags::default())?;
        self.record(&event)?;
        Ok(event)
    }

    /// Makes later work on this stream wait until `event` completes; the host does not block
    /// ([`cudaStreamWaitEvent`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// The event may belong to another device.
    ///
    /// # Errors
    /// CUDA's errors.
    #[inline]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.wait_raw(event.as_raw())
    }

    #[inline(always)]
    fn wait_raw(&self, event: sys::cudaEvent_t) -> Result<()> {
        let _current = self.enter()?;
        // SAFETY: `event` and `raw` are live handles.
        check(unsafe { sys::cudaStreamWaitEvent(self.raw, event, 0) }, "cudaStreamWaitEvent")
    }

    /// Makes later work on this stream wait for the work enqueued on `other` so far. Costs one
    /// record and one wait: the marker event is created once per thread and device, never per
    /// call.
    ///
    /// # Errors
    /// CUDA's errors.
    #[inline]
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        MARKERS.with(|markers| {
            let mut markers = markers.borrow_mut();
            let slot = other.device.ordinal() as usize;
            if markers.len() <= slot {
                markers.resize_with(slot + 1, || None);
            }
            let marker = match &markers[slot] {
                Some(marker) => marker.as_raw(),
                None => {
                    let created = Event::new(other.device, EventFlags::default())?;
                    markers[slot].insert(created).as_raw()
                }
            };
            other.record_raw(marker)?;
            self.wait_raw(marker)
        })
    }

    /// A new non-blocking stream on the same device, at this stream's priority, whose work
    /// waits for the work enqueued here so far. Join it back with `parent.wait_stream(&child)`.
    ///
    /// # Errors
    /// The errors of [`Stream::new`] and [`Stream::wait_stream`].
    pub fn fork(&self) -> Result<Stream> {
        let options = StreamOptions::non_blocking().with_priority(self.priority()?);
        let child = Stream::new(self.device, options)?;
        child.wait_stream(self)?;
        Ok(child)
    }

    /// The priority CUDA applied to this stream
    /// ([`cudaStreamGetPriority`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// CUDA's errors.
    #[inline]
    pub fn priority(&self) -> Result<Priority> {
        let _current = self.enter()?;
        let mut priority: c_int = 0;
        // SAFETY: `priority` is a valid out-pointer; `raw` is live.
        check(unsafe { sys::cudaStreamGetPriority(self.raw, &mut priority) }, "cudaStreamGetPriority")?;
        Ok(Priority(priority))
    }

    /// Whether the stream was created with `cudaStreamNonBlocking`
    /// ([`cudaStreamGetFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// CUDA's errors.
    pub fn is_non_blocking(&self) -> Result<bool> {
        let _current = self.enter()?;
        let mut flags: c_uint = 0;
        // SAFETY: `flags` is a valid out-pointer; `raw` is live.
        check(unsafe { sys::cudaStreamGetFlags(self.raw, &mut flags) }, "cudaStreamGetFlags")?;
        Ok(flags & sys::cudaStreamNonBlocking != 0)
    }

    /// Destroys an owned stream and reports what dropping it would hide: errors of earlier
    /// asynchronous work, then the destroy's own. Pending work still completes
    /// ([`cudaStreamDestroy`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// returns at once). For borrowed and built-in streams it only checks for errors.
    ///
    /// # Errors
    /// The first error of `cudaStreamQuery` and `cudaStreamDestroy`.
    pub fn destroy(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        let pending = this.query().map(drop);
        let destroyed = match this.ownership {
            Ownership::Owned => {
                live::stream_released();
                // SAFETY: we own `raw`; ManuallyDrop keeps Drop from destroying it twice.
                check(unsafe { sys::cudaStreamDestroy(this.raw) }, "cudaStreamDestroy")
            }
            Ownership::Borrowed | Ownership::Builtin(_) => Ok(()),
        };
        pending.and(destroyed)
    }
}

fn mismatch(what: &'static str, expected: Device, found: Device) -> Error {
    Error::DeviceMismatch { what, expected: expected.ordinal(), found: found.ordinal() }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.ownership == Ownership::Owned {
            live::stream_released();
            // Drop cannot report: errors of earlier work reach the next call that can, or
            // `destroy` for those who ask. The handle belongs to its context, so no device
            // switch is needed. Dropped inside a host function (the last `Arc` of a stream moved
            // into one), the destroy is made outside it.
            let raw = self.raw as usize;
            crate::host_fn::call_outside_host_fn(move || {
                // SAFETY: we own the handle and nothing uses it after this.
                let _ = unsafe { sys::cudaStreamDestroy(raw as sys::cudaStream_t) };
            });
        }
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.device == other.device && self.id == other.id
    }
}

impl Eq for Stream {}

impl Hash for Stream {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.device.hash(state);
        self.id.hash(state);
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.raw)
            .field("device", &self.device.ordinal())
            .field("ownership", &self.ownership)
            .field("id", &self.id)
            .finish()
    }
}

/// A borrowed view of a [`Stream`], valid while the stream is: the compiler checks it. Derefs
/// to a `Stream` of [`Ownership::Borrowed`] (or the same built-in kind), so every operation is
/// there, and dropping it destroys nothing.
#[derive(Debug)]
pub struct StreamRef<'a> {
    stream: Stream,
    _lifetime: PhantomData<&'a Stream>,
}

impl Deref for StreamRef<'_> {
    type Target = Stream;

    fn deref(&self) -> &Stream {
        &self.stream
    }
}

impl Clone for StreamRef<'_> {
    fn clone(&self) -> Self {
        StreamRef { stream: self.stream.borrow_view(), _lifetime: PhantomData }
    }
}
