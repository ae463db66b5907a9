//! Streams, with their ownership in the types, as std does for file descriptors:
//!
//! | type | like | destroyed on drop | made by |
//! |---|---|---|---|
//! | [`Stream`] | `OwnedFd` | yes | [`Stream::new`], `unsafe` [`Stream::from_raw_owned`] |
//! | [`BorrowedStream<'a>`] | `BorrowedFd<'a>` | never | `unsafe` [`BorrowedStream::borrow_raw`] |
//! | [`BuiltinStream`] | | never (CUDA's own) | [`BuiltinStream::null`], [`legacy`](BuiltinStream::legacy), [`per_thread`](BuiltinStream::per_thread) |
//! | `&`[`StreamRef`] | `&BorrowedFd` | — | deref of any of the above |
//!
//! Every operation lives on [`StreamRef`], which all three deref to. A `StreamRef` exists only
//! inside one of them and is never handed out by value, so nothing reachable from safe code
//! holds a stream without a lifetime or an ownership that keeps it alive.

// Layer 5 of docs/architecture.md, streams. May use: ffi, call, device, event.

pub(crate) mod as_stream;
pub mod attributes;
pub(crate) mod capture_node;
pub(crate) mod capture_status;
pub(crate) mod current;
pub(crate) mod enqueue;
mod launch;
pub(crate) mod partition;
pub(crate) mod pool;
mod race_check;
pub(crate) mod record;

pub use self::as_stream::AsStream;

use crate::call::live;
use crate::call::live_captures;
use crate::call::race;
use crate::call::sync_debug::{self, SyncKind};
use crate::call::thread::thread_identity;
use crate::device::same_device;
use crate::device::{Device, DeviceGuard};
use crate::ffi::driver;
use crate::ffi::error::{CudaCode, Error, Result, check, check_ready};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::ffi::priority::Priority;
use crate::sys;
use std::ffi::{c_int, c_uint, c_ulonglong};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;

/// Who owns a stream handle, and so whether anything here ever destroys it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// A [`Stream`]: destroyed when it drops.
    Owned,
    /// A [`BorrowedStream`] of someone else's handle: never destroyed here.
    Borrowed,
    /// One of CUDA's own default streams ([`BuiltinStream`]): never destroyed.
    Builtin(Builtin),
}

/// CUDA's built-in streams. Each means the stream of the device current when it is used, so
/// every call on one makes its device current first.
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
        self.canonical() == Builtin::PerThread
    }

    /// The stream handle 0 stands for in this build: the legacy or the per-thread stream.
    fn canonical(self) -> Builtin {
        match self {
            Builtin::Null if crate::NULL_STREAM_IS_PER_THREAD => Builtin::PerThread,
            Builtin::Null => Builtin::Legacy,
            other => other,
        }
    }

    /// Whether this is the legacy stream, which CUDA cannot capture.
    pub(crate) fn is_legacy(self) -> bool {
        self.canonical() == Builtin::Legacy
    }
}

/// What a call does with a stream it enters: the sync-debug mode reports work enqueued on the
/// legacy stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Use {
    Enqueue,
    Read,
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

/// A stream, seen through any of its owners: every stream operation is here.
///
/// You only ever hold a `&StreamRef`, borrowed from a [`Stream`], a [`BorrowedStream`] or a
/// [`BuiltinStream`] (or a pool's lease), so the compiler keeps it from outliving the stream.
///
/// * `Eq` and `Hash` compare the stream, not the handle's bits alone: the device, the handle
///   (with handle 0 meaning the stream it stands for in this build), and for the per-thread
///   stream the thread. A handle value that CUDA reuses after a destroy cannot fool them: two
///   `&StreamRef`s are alive together only while both streams are, and two live streams never
///   share a handle. No CUDA call is made, so comparing never disturbs a capture.
/// * `Send + Sync`: CUDA's stream calls are thread-safe. The one stream that means something
///   else on each thread (the per-thread default stream) remembers the thread it was made on,
///   by an identity never reused, and every call from another thread returns
///   [`Error::WrongThread`] instead of silently using that thread's own stream.
pub struct StreamRef {
    raw: sys::cudaStream_t,
    device: Device,
    ownership: Ownership,
    /// The only thread this stream may be used on (0: any thread).
    thread: u64,
    /// CUDA's id, read when this crate created the stream (nobody could capture it yet).
    id: Option<u64>,
    /// Whether it was created non-blocking, where known without asking CUDA (which
    /// invalidates a capture of the stream to answer): streams created here, built-in streams.
    non_blocking: Option<bool>,
    /// The priority CUDA gave it, read back when this crate created it.
    priority: Option<c_int>,
    /// The green context of the [`SmPartition`](partition::SmPartition) the stream was made
    /// on (null for every other stream): one reference, owned by the [`Stream`] and let go by
    /// its drop; every view of it only looks (see [`partition::PartitionRef`]).
    partition: partition::PartitionRef,
}

// SAFETY: a cudaStream_t is a handle the CUDA runtime lets any thread use; the thread-bound
// per-thread stream checks the calling thread on every use (see the type's docs).
unsafe impl Send for StreamRef {}
// SAFETY: every method takes `&self` and makes only thread-safe runtime calls.
unsafe impl Sync for StreamRef {}

impl StreamRef {
    fn new(raw: sys::cudaStream_t, device: Device, ownership: Ownership) -> StreamRef {
        let thread = match ownership {
            Ownership::Builtin(builtin) if builtin.is_thread_bound() => thread_identity(),
            _ => 0,
        };
        // The built-in streams are blocking: the legacy stream itself, and the per-thread
        // stream, which synchronizes with it.
        let non_blocking = matches!(ownership, Ownership::Builtin(_)).then_some(false);
        StreamRef {
            raw,
            device,
            ownership,
            thread,
            id: None,
            non_blocking,
            priority: None,
            partition: partition::PartitionRef::NONE,
        }
    }

    /// A copy of this view for the crate's own bookkeeping (the current-stream stack). It must
    /// never reach safe code by value: it has neither a lifetime nor an owner.
    pub(crate) fn view(&self) -> StreamRef {
        StreamRef { ..*self }
    }

    /// The raw handle, for FFI. It stays owned by whoever owns the stream.
    #[inline]
    pub fn as_raw(&self) -> sys::cudaStream_t {
        self.raw
    }

    /// The device this stream belongs to.
    #[inline]
    pub fn device(&self) -> Device {
        self.device
    }

    /// Who owns the handle.
    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    /// CUDA's id for this stream
    /// ([`cudaStreamGetId`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)),
    /// unique for the life of the program (never reused). For a stream this crate created it
    /// was read at creation; otherwise it is read now, unless the stream is being captured:
    /// `cudaStreamGetId` would invalidate the capture.
    ///
    /// No capture of this crate begins between the check and the read; a foreign capture that
    /// another thread begins then is still invalidated (the conditions of
    /// [`BorrowedStream::borrow_raw`] exclude it).
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] while the stream is being captured; CUDA's errors.
    pub fn id(&self) -> Result<u64> {
        if let Some(id) = self.id {
            return Ok(id);
        }
        refuse_inside_host_fn()?;
        let _transitions = crate::call::transitions::no_capture_transitions();
        self.refuse_capturing("reading the id of a capturing stream would invalidate the capture")?;
        self.read_id()
    }

    /// CUDA's id where it was read when this crate created the stream (never reused), with no
    /// CUDA call.
    pub(crate) fn known_id(&self) -> Option<u64> {
        self.id
    }

    fn read_id(&self) -> Result<u64> {
        let _current = self.enter_runtime()?;
        let mut id: c_ulonglong = 0;
        // SAFETY: `raw` is a live stream (or special handle) of the current device.
        check(unsafe { sys::cudaStreamGetId(self.raw, &mut id) }, "cudaStreamGetId")?;
        Ok(id)
    }

    /// Prepares one call on this stream. The built-in handles (0, 0x1, 0x2) mean "the stream of
    /// the current device (and thread)", so for them the device is made current (a no-op when
    /// it already is), the per-thread stream is refused on other threads, and the legacy stream
    /// while a capture of its device is in progress (see [`crate::capture`]). Every other
    /// handle carries its own context: the runtime's stream and event calls work on it whatever
    /// device is current, so nothing is queried or switched (the multi-GPU tests prove it).
    #[inline(always)]
    pub(crate) fn enter(&self) -> Result<Option<DeviceGuard>> {
        self.enter_as(Use::Enqueue)
    }

    /// As [`StreamRef::enter`], for a call that enqueues nothing (a query, a read, a
    /// synchronize): work on the legacy stream is not reported to the sync-debug mode.
    #[inline(always)]
    pub(crate) fn enter_to_read(&self) -> Result<Option<DeviceGuard>> {
        self.enter_as(Use::Read)
    }

    #[inline(always)]
    fn enter_as(&self, usage: Use) -> Result<Option<DeviceGuard>> {
        if let Ownership::Builtin(_) = self.ownership {
            self.enter_builtin(usage).map(Some)
        } else {
            refuse_inside_host_fn().map(|()| None)
        }
    }

    #[inline(never)]
    fn enter_builtin(&self, usage: Use) -> Result<DeviceGuard> {
        if self.thread != 0 && self.thread != thread_identity() {
            return Err(Error::WrongThread);
        }
        if self.builtin().is_some_and(Builtin::is_legacy) {
            if live_captures::any() {
                live_captures::refuse_legacy_stream(self.device.ordinal())?;
            }
            if usage == Use::Enqueue {
                // Waits for every blocking stream of the device, and they for it.
                sync_debug::before_sync("work on the legacy default stream", SyncKind::LegacyStream)?;
            }
        }
        self.device.make_current()
    }

    /// Prepares a runtime call on this stream that may bind a context to the calling thread:
    /// as [`StreamRef::enter`], and for a real handle its device's primary context is made
    /// current (the runtime would bind device 0's on a thread that has none).
    #[inline]
    pub(crate) fn enter_runtime(&self) -> Result<DeviceGuard> {
        match self.enter()? {
            Some(current) => Ok(current),
            None => self.device.make_current(),
        }
    }

    /// Whether this handle means another stream on another thread (the per-thread stream).
    pub(crate) fn is_thread_bound(&self) -> bool {
        self.thread != 0
    }

    /// The built-in stream this is, if it is one.
    pub(crate) fn builtin(&self) -> Option<Builtin> {
        match self.ownership {
            Ownership::Builtin(builtin) => Some(builtin),
            _ => None,
        }
    }

    /// Whether all work enqueued so far has completed
    /// ([`cudaStreamQuery`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// `cudaErrorNotReady` is `Ok(false)`.
    ///
    /// # Errors
    /// Errors of earlier asynchronous work. [`Error::CaptureMisuse`], before CUDA sees the call
    /// (which would invalidate the capture), while a capture begun through this crate forbids
    /// it: this stream is being captured, this thread has a Global or ThreadLocal capture in
    /// progress, any thread has a Global one, or this is the legacy stream of a device being
    /// captured ([the rules](crate::capture#calls-refused-during-a-capture); captures begun
    /// outside this crate are not counted).
    #[inline]
    pub fn query(&self) -> Result<bool> {
        let current = self.enter_to_read()?;
        // While captures of this crate are in progress, none begins or ends during the query
        // (CUDA 13.0 crashed when a query raced the end of a Global capture).
        let transitions = crate::call::transitions::unsafe_call_hold()?;
        if transitions.is_some() {
            self.refuse_capturing_for_query()?;
        }
        let snapshot = self.race_snapshot();
        let done = match current {
            None => driver::stream_query(self.raw),
            // SAFETY: `raw` is a special handle, for the stream of the current device.
            Some(_current) => check_ready(unsafe { sys::cudaStreamQuery(self.raw) }, "cudaStreamQuery"),
        }?;
        if done {
            race::host_saw(snapshot);
        }
        Ok(done)
    }

    /// Blocks until all work enqueued so far has completed
    /// ([`cudaStreamSynchronize`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    ///
    /// # Errors
    /// Errors of earlier asynchronous work; [`Error::CaptureMisuse`] as for
    /// [`StreamRef::query`].
    #[inline]
    pub fn synchronize(&self) -> Result<()> {
        let current = self.enter_to_read()?;
        if let Some(_transitions) = crate::call::transitions::unsafe_call_hold()? {
            // Checked, not held while waiting: the work may depend on a capture's end.
            self.refuse_capturing_for_query()?;
        }
        sync_debug::before_sync("cudaStreamSynchronize", SyncKind::StreamSynchronize)?;
        self.synchronize_entered(current)
    }

    /// Blocks until all work enqueued so far has completed, after the caller made the checks
    /// of [`StreamRef::synchronize`] itself (before it enqueued the work it waits for).
    pub(crate) fn synchronize_checked_earlier(&self) -> Result<()> {
        self.synchronize_entered(self.enter_to_read()?)
    }

    #[inline(always)]
    fn synchronize_entered(&self, current: Option<DeviceGuard>) -> Result<()> {
        let snapshot = self.race_snapshot();
        match current {
            None => driver::stream_synchronize(self.raw),
            // SAFETY: `raw` is a special handle, for the stream of the current device.
            Some(_current) => check(unsafe { sys::cudaStreamSynchronize(self.raw) }, "cudaStreamSynchronize"),
        }
        .map(|()| race::host_saw(snapshot))
    }

    /// Refuses a query or synchronize of this stream while it is being captured.
    #[cold]
    #[inline(never)]
    fn refuse_capturing_for_query(&self) -> Result<()> {
        self.refuse_capturing("querying or synchronizing a capturing stream would invalidate its capture")
    }

    /// A new non-blocking stream on the same device, at this stream's priority, whose work
    /// waits for the work enqueued here so far. Join it back with `parent.wait_stream(&child)`.
    ///
    /// # Errors
    /// The errors of [`Stream::new`] and [`StreamRef::wait_stream`].
    pub fn fork(&self) -> Result<Stream> {
        let options = StreamOptions::non_blocking().with_priority(self.priority()?);
        let child = Stream::new(self.device, options)?;
        child.wait_stream(self)?;
        Ok(child)
    }

    /// The priority CUDA applied to this stream
    /// ([`cudaStreamGetPriority`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)):
    /// for a stream created here, read back at creation; otherwise read now, which CUDA allows
    /// during a capture of the stream.
    ///
    /// # Errors
    /// CUDA's errors.
    #[inline]
    pub fn priority(&self) -> Result<Priority> {
        // Both calls are allowed during any capture of the stream (probed on CUDA 13.0).
        match (self.enter_to_read()?, self.priority) {
            (None, Some(known)) => Ok(Priority(known)),
            (None, None) => driver::stream_priority(self.raw).map(Priority),
            (Some(_current), _) => {
                let mut priority: c_int = 0;
                // SAFETY: `priority` is a valid out-pointer; `raw` is a special handle of the
                // current device.
                check(unsafe { sys::cudaStreamGetPriority(self.raw, &mut priority) }, "cudaStreamGetPriority")?;
                Ok(Priority(priority))
            }
        }
    }

    /// Whether the stream was created with `cudaStreamNonBlocking`
    /// ([`cudaStreamGetFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// Known without a CUDA call for streams created here and built-in streams; for others it
    /// is read, unless the stream is being captured: CUDA invalidates the capture, in every
    /// mode, to answer.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a foreign stream that is being captured; CUDA's errors.
    pub fn is_non_blocking(&self) -> Result<bool> {
        // The built-in streams' rules (their thread; the legacy stream during a capture) hold
        // even where no CUDA call is needed.
        let _current = self.enter_to_read()?;
        if let Some(non_blocking) = self.non_blocking {
            return Ok(non_blocking);
        }
        // A stream this crate did not create (a real handle). CUDA invalidates a capture of the
        // stream, in every mode, to answer `cuStreamGetFlags` (probed on CUDA 13.0); no capture
        // of this crate begins between the check and the read.
        let _transitions = crate::call::transitions::no_capture_transitions();
        self.refuse_capturing("reading the flags of a capturing stream would invalidate its capture")?;
        Ok(driver::stream_flags(self.raw)? & sys::cudaStreamNonBlocking != 0)
    }

    /// The identity `Eq` and `Hash` use: device, the stream the handle stands for, thread.
    pub(crate) fn identity(&self) -> (Device, usize, u64) {
        (self.device, self.unambiguous_raw() as usize, self.thread)
    }

    /// The handle, with 0 replaced by the handle of the stream it stands for in this build
    /// (`cudaStreamLegacy` or `cudaStreamPerThread`): what it means in any other code.
    pub(crate) fn unambiguous_raw(&self) -> sys::cudaStream_t {
        match self.builtin() {
            Some(builtin) => builtin.canonical().handle(),
            None => self.raw,
        }
    }
}

impl PartialEq for StreamRef {
    fn eq(&self, other: &StreamRef) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for StreamRef {}

impl Hash for StreamRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl fmt::Debug for StreamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.raw)
            .field("device", &self.device.ordinal())
            .field("ownership", &self.ownership)
            .finish()
    }
}

/// An owned CUDA stream: destroyed when dropped (pending work still completes). Derefs to
/// [`StreamRef`], which has every operation.
///
/// `Eq` and `Hash` are [`StreamRef`]'s: a `Stream` and any other wrapper of the same stream
/// compare and hash alike.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Stream {
    /// Its [`StreamRef::partition`] reference is this stream's own (see [`partition`]).
    stream: StreamRef,
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
        let mut stream = Stream { stream: StreamRef::new(raw, device, Ownership::Owned) };
        // Nobody else has the handle yet, so nobody can be capturing it: reading the id is
        // safe now, and only now. If a read fails, the stream drops and is destroyed.
        stream.stream.id = Some(stream.read_id()?);
        stream.stream.non_blocking = Some(options.non_blocking);
        stream.stream.priority = Some(driver::stream_priority(raw)?);
        Ok(stream)
    }

    /// Takes ownership of a stream handle: dropping the `Stream` destroys it. Checks that the
    /// handle belongs to `device` (see [`BorrowedStream::borrow_raw`] for how, without
    /// disturbing a capture in progress).
    ///
    /// # Safety
    /// `handle` must be a live stream that nobody else will destroy or use after this `Stream`
    /// destroys it (for example one from [`Stream::into_raw`]). Captures begun or ended outside
    /// this crate on `handle` must not overlap this crate's calls on it, and it is not called
    /// inside a raw launcher's closure, as for [`BorrowedStream::borrow_raw`].
    ///
    /// # Errors
    /// [`Error::BuiltinNotOwnable`] for the special handles (0, 0x1, 0x2);
    /// [`Error::DeviceMismatch`] if the handle belongs to another device (nothing is taken:
    /// the caller still owns it); CUDA's errors reading its device.
    pub unsafe fn from_raw_owned(handle: sys::cudaStream_t, device: Device) -> Result<Stream> {
        if Builtin::of_handle(handle).is_some() {
            return Err(Error::BuiltinNotOwnable { handle: handle as usize });
        }
        refuse_inside_host_fn()?;
        check_stream_device("an owned stream handle belongs to the device it is taken for", handle, device)?;
        // Made elsewhere: whoever made it may have begun a capture of it.
        crate::call::uncaptured_calls::foreign_handle_seen();
        live::stream_created();
        Ok(Stream { stream: StreamRef::new(handle, device, Ownership::Owned) })
    }

    /// Gives up ownership: returns the handle without destroying it. A stream of an
    /// [`SmPartition`](partition::SmPartition) keeps its partition alive for the rest of the
    /// process.
    pub fn into_raw(self) -> sys::cudaStream_t {
        live::stream_released();
        ManuallyDrop::new(self).stream.raw
    }

    /// Destroys the stream and reports what dropping it would hide: errors of earlier
    /// asynchronous work, then the destroy's own. Pending work still completes
    /// ([`cudaStreamDestroy`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// returns at once).
    ///
    /// During a capture that forbids the query ([`StreamRef::query`]'s [`Error::CaptureMisuse`])
    /// the check of earlier work is skipped, not refused: the stream is destroyed and the next
    /// call that may ask reports a sticky error.
    ///
    /// # Errors
    /// The first error of `cudaStreamQuery` and `cudaStreamDestroy`; [`Error::InsideHostFn`]
    /// inside a host function, where the stream is destroyed later, outside it.
    pub fn destroy(self) -> Result<()> {
        let mut this = ManuallyDrop::new(self);
        live::stream_released();
        let raw = this.stream.raw as usize;
        // Let go of after the stream is destroyed.
        // SAFETY: this stream's own reference, let go once: `this` is never dropped.
        let partition = unsafe { this.stream.partition.release() };
        if refuse_inside_host_fn().is_err() {
            crate::ffi::inside_host_fn::call_outside_host_fn(move || {
                destroy_stream(raw);
                drop(partition);
            });
            return Err(Error::InsideHostFn);
        }
        let pending = match this.query() {
            Err(Error::CaptureMisuse(_)) => Ok(()),
            queried => queried.map(drop),
        };
        // SAFETY: we own `raw`; ManuallyDrop keeps Drop from destroying it twice.
        let destroyed = check(unsafe { sys::cudaStreamDestroy(raw as sys::cudaStream_t) }, "cudaStreamDestroy");
        drop(partition);
        pending.and(destroyed)
    }
}

fn destroy_stream(raw: usize) {
    // SAFETY: called once, by the stream's owner, after which nothing uses the handle.
    let _ = check(unsafe { sys::cudaStreamDestroy(raw as sys::cudaStream_t) }, "cudaStreamDestroy");
}

impl Deref for Stream {
    type Target = StreamRef;

    #[inline(always)]
    fn deref(&self) -> &StreamRef {
        &self.stream
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        live::stream_released();
        // A later stream may get the handle: it is another stream to the race detector.
        race::update(|model| model.forget_stream(&self.stream.race_key()));
        // Drop cannot report: errors of earlier work reach the next call that can, or
        // `destroy` for those who ask. The handle belongs to its context, so no device switch
        // is needed. Dropped inside a host function, the destroy is made outside it.
        let raw = self.stream.raw as usize;
        // A partition's green context outlives its stream.
        // SAFETY: this stream's own reference, let go once, by its drop.
        let partition = unsafe { self.stream.partition.release() };
        crate::ffi::inside_host_fn::call_outside_host_fn(move || {
            destroy_stream(raw);
            drop(partition);
        });
    }
}

/// Someone else's stream (C, cudarc, PyTorch), valid for `'a`: never destroyed here. Derefs to
/// [`StreamRef`]. Copying it copies the borrow, lifetime and all.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BorrowedStream<'a> {
    stream: StreamRef,
    _lifetime: PhantomData<&'a StreamRef>,
}

impl<'a> BorrowedStream<'a> {
    /// Borrows a stream handle for `'a`, a lifetime the caller picks, on the device it belongs
    /// to. The special handles (0, `cudaStreamLegacy`, `cudaStreamPerThread`) give the
    /// matching built-in stream of the current device: **the null handle means the device's
    /// null stream**, not "no stream"; a per-thread handle means the calling thread's.
    ///
    /// The device of any other handle is read from the driver (`cuStreamGetCtx`, then
    /// `cuCtxGetDevice` with that context pushed), which leaves a capture of the stream intact:
    /// so wrapping a stream that is being captured (say by `torch.cuda.graph`) is safe.
    /// (`cudaStreamGetDevice`, CUDA 12.8, would invalidate that capture.) These driver calls
    /// exist in every CUDA 12 and 13 driver.
    ///
    /// Only streams of a device's primary context (the runtime's, PyTorch's, CuPy's, cudarc's
    /// `CudaContext::new`) are accepted: a stream of another context is [`Error::ForeignContext`].
    ///
    /// From the first borrow on, the process may hold streams whose owners capture them: the
    /// calls whose meaning changes during a capture (records, `wait_stream`, a pool's returns)
    /// then read the stream's capture status first (about 25 ns), where without foreign
    /// handles they need not.
    ///
    /// # Safety
    /// * `handle` must be a live stream (or a special handle), and its owner must not destroy
    ///   it during `'a`.
    /// * Its context (a primary context, checked) must stay alive during `'a`: nobody resets
    ///   the device (`cudaDeviceReset`).
    /// * Captures its owner begins or ends (`torch.cuda.graph`, cudarc's `begin_capture`) must
    ///   not overlap, on another thread, a call of this crate on the stream, nor, for an end,
    ///   one on another stream of that capture: the driver is not
    ///   safe against a host function enqueued while a capture of the stream begins or ends
    ///   (a segmentation fault inside libcuda, probed on CUDA 13.0), and a call that checked
    ///   the capture status would act on a stale one. A capture in progress before the call is
    ///   seen and respected, and reading the stream leaves it intact.
    /// * Not inside a raw launcher's closure ([`StreamRef::launch`]): the first foreign handle
    ///   of the process waits for the other threads' calls that assumed none, which a launcher,
    ///   running inside such a call, cannot.
    ///
    /// # Errors
    /// CUDA's errors reading the device (for a stream whose capture is broken, the capture's
    /// error: name the device with [`BorrowedStream::borrow_raw_on`] to wrap it anyway);
    /// [`Error::ForeignContext`] for a stream of another context; [`Error::InsideHostFn`]
    /// inside a host function.
    pub unsafe fn borrow_raw(handle: sys::cudaStream_t) -> Result<BorrowedStream<'a>> {
        refuse_inside_host_fn()?;
        let device = match Builtin::of_handle(handle) {
            Some(_) => Device::current()?,
            None => stream_device(handle)?,
        };
        // SAFETY: the caller's contract; `device` is the handle's own.
        Ok(unsafe { BorrowedStream::borrow_unchecked(handle, device) })
    }

    /// Borrows a stream handle of `device` for `'a`, checking that it belongs there: a wrong
    /// device is an error now rather than a failed launch later. A special handle means
    /// `device`'s built-in stream.
    ///
    /// # Safety
    /// As [`BorrowedStream::borrow_raw`].
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] if the handle belongs to another device;
    /// [`Error::ForeignContext`] if it belongs to another context than the device's primary
    /// one; CUDA's errors reading the device. A stream whose capture is broken cannot report
    /// its device: `device` is then taken on trust.
    pub unsafe fn borrow_raw_on(handle: sys::cudaStream_t, device: Device) -> Result<BorrowedStream<'a>> {
        refuse_inside_host_fn()?;
        if Builtin::of_handle(handle).is_none() {
            check_stream_device("a borrowed stream handle belongs to the device named for it", handle, device)?;
        }
        // SAFETY: the caller's contract; the device is checked.
        Ok(unsafe { BorrowedStream::borrow_unchecked(handle, device) })
    }

    /// Borrows a foreign `handle` as a stream of `device` without asking CUDA anything, and
    /// marks the process as holding a foreign handle (its owner may capture it unseen).
    ///
    /// # Safety
    /// As [`BorrowedStream::borrow_raw`], and `handle` must belong to `device` (or be a special
    /// handle, which then means `device`'s built-in stream).
    pub(crate) unsafe fn borrow_unchecked(handle: sys::cudaStream_t, device: Device) -> BorrowedStream<'a> {
        crate::call::uncaptured_calls::foreign_handle_seen();
        let ownership = Builtin::of_handle(handle).map_or(Ownership::Borrowed, Ownership::Builtin);
        BorrowedStream { stream: StreamRef::new(handle, device, ownership), _lifetime: PhantomData }
    }

    /// A view of `stream` for `'a`, keeping its ownership, thread and id.
    pub(crate) fn of(stream: &'a StreamRef) -> BorrowedStream<'a> {
        // SAFETY: `stream` is borrowed for `'a`.
        unsafe { BorrowedStream::from_view(stream.view()) }
    }

    /// Lends a view (see [`StreamRef::view`]) for `'a`.
    ///
    /// # Safety
    /// The stream the view was taken from must stay alive during `'a`.
    pub(crate) unsafe fn from_view(view: StreamRef) -> BorrowedStream<'a> {
        BorrowedStream { stream: view, _lifetime: PhantomData }
    }
}

impl From<BuiltinStream> for BorrowedStream<'static> {
    /// A built-in stream is never destroyed, so it can be lent for any lifetime.
    fn from(builtin: BuiltinStream) -> BorrowedStream<'static> {
        // SAFETY: CUDA's built-in streams are never destroyed.
        unsafe { BorrowedStream::from_view(builtin.stream) }
    }
}

/// The device a real (not special) stream handle belongs to, read through its context, which
/// must be the device's primary context: this crate uses no other (see [`Device::make_current`]).
fn stream_device(handle: sys::cudaStream_t) -> Result<Device> {
    let context = driver::stream_context(handle)?;
    let device = Device::new(driver::context_device_ordinal(context)?)?;
    device.require_primary(context)?;
    Ok(device)
}

/// [`Error::DeviceMismatch`] (saying `what`) unless the real stream handle belongs to `device`.
/// A stream whose capture is broken cannot say (`cuStreamGetCtx` answers with the capture's
/// error, seen on CUDA 13.0): the named device is then taken on trust, so that the stream can
/// still be wrapped, and its capture ended.
fn check_stream_device(what: &'static str, handle: sys::cudaStream_t, device: Device) -> Result<()> {
    match stream_device(handle) {
        Ok(found) => same_device(what, device, found),
        Err(error) if error.cuda_code().is_some_and(CudaCode::is_capture_error) => Ok(()),
        Err(error) => Err(error),
    }
}

impl Clone for BorrowedStream<'_> {
    fn clone(&self) -> Self {
        BorrowedStream { stream: self.stream.view(), _lifetime: PhantomData }
    }
}

impl Deref for BorrowedStream<'_> {
    type Target = StreamRef;

    #[inline(always)]
    fn deref(&self) -> &StreamRef {
        &self.stream
    }
}

/// One of CUDA's built-in streams of a device: never destroyed, so it needs no lifetime.
/// Derefs to [`StreamRef`].
///
/// The per-thread stream (and handle 0 in a `per-thread-default-stream` build) is a different
/// stream on each thread: one made on a thread works on that thread only; from any other every
/// call returns [`Error::WrongThread`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BuiltinStream {
    stream: StreamRef,
}

impl BuiltinStream {
    /// The device's null stream, handle 0: the legacy stream, or the calling thread's
    /// per-thread stream in a `per-thread-default-stream` build. Where it is the legacy stream,
    /// it is refused as [`BuiltinStream::legacy`] is during a capture.
    pub fn null(device: Device) -> BuiltinStream {
        BuiltinStream::of(device, Builtin::Null)
    }

    /// The device's legacy default stream (`cudaStreamLegacy`): it waits for all earlier work
    /// on the device's blocking streams, and they wait for it.
    ///
    /// While a capture of the device begun through this crate is in progress (any mode, any
    /// thread), every operation on it returns [`Error::CaptureMisuse`] before CUDA sees it:
    /// CUDA would invalidate the capture. Captures begun outside this crate are not counted
    /// ([the rules](crate::capture#calls-refused-during-a-capture)).
    pub fn legacy(device: Device) -> BuiltinStream {
        BuiltinStream::of(device, Builtin::Legacy)
    }

    /// The calling thread's per-thread default stream (`cudaStreamPerThread`). Usable only on
    /// this thread: from another, every call returns [`Error::WrongThread`].
    pub fn per_thread(device: Device) -> BuiltinStream {
        BuiltinStream::of(device, Builtin::PerThread)
    }

    /// The built-in stream `builtin` of `device`.
    pub fn of(device: Device, builtin: Builtin) -> BuiltinStream {
        BuiltinStream { stream: StreamRef::new(builtin.handle(), device, Ownership::Builtin(builtin)) }
    }
}

impl Clone for BuiltinStream {
    fn clone(&self) -> Self {
        BuiltinStream { stream: self.stream.view() }
    }
}

impl Deref for BuiltinStream {
    type Target = StreamRef;

    #[inline(always)]
    fn deref(&self) -> &StreamRef {
        &self.stream
    }
}
