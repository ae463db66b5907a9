//! The sync-debug mode: finds the calls that make the host wait for the device, which
//! serialize a pipeline that should overlap (what PyTorch's `torch.cuda.set_sync_debug_mode`
//! finds in PyTorch programs).
//!
//! Every call of this crate that waits for the device, or enqueues work that makes the device
//! wait for all other work, asks here first:
//!
//! | [`SyncKind`] | calls |
//! |---|---|
//! | `StreamSynchronize` | [`StreamRef::synchronize`](crate::StreamRef::synchronize) |
//! | `EventSynchronize` | [`Event::synchronize`](crate::Event::synchronize) |
//! | `DeviceSynchronize` | [`Device::synchronize`](crate::Device::synchronize) |
//! | `LegacyStream` | any work enqueued on the legacy default stream ([`BuiltinStream::legacy`](crate::BuiltinStream::legacy), and [`BuiltinStream::null`](crate::BuiltinStream::null) without `per-thread-default-stream`), which waits for every blocking stream of its device, and they for it |
//! | `PageableCopy` | the copies between a device buffer and a Rust slice ([`DeviceBuffer::copy_from_slice`](crate::DeviceBuffer::copy_from_slice), `copy_to_slice`, `from_slice`, `to_vec`), which wait for the copy |
//! | `PinnedWait` | host access to a [`PinnedBuffer`](crate::PinnedBuffer) whose copies are still in flight |
//!
//! What the mode does with such a call ([`SyncDebugMode`]): nothing (`Off`, the default);
//! `Report`: the call goes on, and a [`SyncEvent`] (the CUDA call's name, the kind, the
//! thread, a backtrace as `RUST_BACKTRACE` asks) is kept for [`take_sync_events`] and for the
//! scope; `Refuse`: the call fails with [`Error::SyncRefused`] before it waits or enqueues.
//! A drop that must wait (a `PinnedBuffer` dropped with copies in flight) cannot fail: it is
//! reported, also under `Refuse`.
//!
//! The mode is chosen process-wide ([`set_sync_debug_mode`]) and per thread for a scope
//! ([`sync_debug_scope`], which overrides the process mode on its thread until dropped, and
//! nests). Off, it costs each of those calls one relaxed load.

use crate::ffi::error::{Error, Result};
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// What the sync-debug mode does with a call that makes the host wait for the device.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum SyncDebugMode {
    /// Nothing: the call goes on unseen.
    #[default]
    Off,
    /// The call goes on, and is reported as a [`SyncEvent`].
    Report,
    /// The call fails with [`Error::SyncRefused`] before it waits or enqueues.
    Refuse,
}

/// Which kind of wait a [`SyncEvent`] was (see the [module docs](self)).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SyncKind {
    /// A stream synchronize.
    StreamSynchronize,
    /// An event synchronize.
    EventSynchronize,
    /// A device synchronize.
    DeviceSynchronize,
    /// Work on the legacy default stream, which synchronizes with every blocking stream.
    LegacyStream,
    /// A copy between device memory and a pageable Rust slice, which waits for the copy.
    PageableCopy,
    /// Host access to pinned memory that waits for copies in flight.
    PinnedWait,
}

/// One call that made (or, refused, would have made) the host wait for the device.
#[derive(Clone, Debug)]
pub struct SyncEvent {
    /// The CUDA call it stands for, e.g. `cudaStreamSynchronize`.
    pub api: &'static str,
    /// The kind of wait.
    pub kind: SyncKind,
    /// The calling thread's name, if it has one.
    pub thread: Option<String>,
    /// Where it was called from, as `RUST_BACKTRACE` asks ([`Backtrace::capture`]).
    pub backtrace: Arc<Backtrace>,
}

/// Bit 0-1: the process mode; the rest counts live scopes (in steps of [`SCOPE`]). Zero means
/// off everywhere: the one relaxed load of the fast path.
static STATE: AtomicUsize = AtomicUsize::new(0);
const MODE_BITS: usize = 0b11;
const SCOPE: usize = 0b100;

/// The events of calls reported under the process mode (not under a scope), at most
/// [`KEPT_EVENTS`].
static PROCESS_EVENTS: Mutex<Vec<SyncEvent>> = Mutex::new(Vec::new());
/// How many events are kept for [`take_sync_events`] (and per scope); later ones are counted
/// in [`dropped_sync_events`] only.
pub const KEPT_EVENTS: usize = 4096;
static DROPPED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The innermost scope's mode and its events, one entry per open scope of this thread.
    static SCOPES: RefCell<Vec<(SyncDebugMode, Vec<SyncEvent>)>> = const { RefCell::new(Vec::new()) };
    /// Inside [`reporting_only`]: refusals are reports.
    static DROPPING: Cell<bool> = const { Cell::new(false) };
}

fn encode(mode: SyncDebugMode) -> usize {
    match mode {
        SyncDebugMode::Off => 0,
        SyncDebugMode::Report => 1,
        SyncDebugMode::Refuse => 2,
    }
}

fn decode(bits: usize) -> SyncDebugMode {
    match bits & MODE_BITS {
        1 => SyncDebugMode::Report,
        2 => SyncDebugMode::Refuse,
        _ => SyncDebugMode::Off,
    }
}

/// Sets the process-wide mode, for every thread without a scope of its own; returns the
/// previous one.
pub fn set_sync_debug_mode(mode: SyncDebugMode) -> SyncDebugMode {
    let previous = STATE
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| Some((state & !MODE_BITS) | encode(mode)))
        .unwrap_or_else(|state| state);
    decode(previous)
}

/// The process-wide mode.
pub fn sync_debug_mode() -> SyncDebugMode {
    decode(STATE.load(Ordering::Acquire))
}

/// Takes the events reported under the process mode so far (those under a scope belong to
/// the scope: [`SyncDebugScope::take_events`]).
pub fn take_sync_events() -> Vec<SyncEvent> {
    std::mem::take(&mut *PROCESS_EVENTS.lock().unwrap_or_else(PoisonError::into_inner))
}

/// How many reported events were not kept (beyond [`KEPT_EVENTS`] in one list).
pub fn dropped_sync_events() -> usize {
    DROPPED.load(Ordering::Relaxed)
}

/// Opens a scope with `mode` on this thread: until the returned guard drops, calls of this
/// thread follow `mode` instead of the process mode, and their events are kept in the scope.
/// Scopes nest; the innermost one decides. A guard leaked with `mem::forget` keeps its mode
/// on this thread, and the other threads' calls take the slow path (a thread-local read) for
/// the rest of the process.
pub fn sync_debug_scope(mode: SyncDebugMode) -> SyncDebugScope {
    SCOPES.with(|scopes| scopes.borrow_mut().push((mode, Vec::new())));
    STATE.fetch_add(SCOPE, Ordering::AcqRel);
    SyncDebugScope { depth: SCOPES.with(|scopes| scopes.borrow().len()), not_send: PhantomData }
}

/// A sync-debug scope of this thread ([`sync_debug_scope`]): the mode is restored when it
/// drops. Not `Send`: it belongs to its thread.
#[derive(Debug)]
#[must_use = "the scope ends when this guard drops"]
pub struct SyncDebugScope {
    /// How many scopes this thread had open, this one included.
    depth: usize,
    not_send: PhantomData<*const ()>,
}

impl SyncDebugScope {
    /// Takes the events reported in this scope so far.
    pub fn take_events(&self) -> Vec<SyncEvent> {
        SCOPES.with(|scopes| {
            scopes.borrow_mut().get_mut(self.depth - 1).map(|(_, events)| std::mem::take(events)).unwrap_or_default()
        })
    }
}

impl Drop for SyncDebugScope {
    fn drop(&mut self) {
        // Scopes inside this one that were leaked close with it.
        SCOPES.with(|scopes| scopes.borrow_mut().truncate(self.depth - 1));
        STATE.fetch_sub(SCOPE, Ordering::AcqRel);
    }
}

/// Asks the mode about a call of `kind` that is about to make the host wait: `Ok` to go on
/// (reported where the mode says so), [`Error::SyncRefused`] where it refuses. One relaxed
/// load while the mode is off everywhere.
///
/// # Errors
/// [`Error::SyncRefused`] under [`SyncDebugMode::Refuse`].
#[inline(always)]
pub(crate) fn before_sync(api: &'static str, kind: SyncKind) -> Result<()> {
    let state = STATE.load(Ordering::Relaxed);
    if state == 0 { Ok(()) } else { decide(state, api, kind, true) }
}

/// Runs `drop` (a destructor that waits or enqueues, and cannot fail) with refusals turned
/// into reports: a refused wait would make it leak.
pub(crate) fn reporting_only<R>(drop: impl FnOnce() -> R) -> R {
    if STATE.load(Ordering::Relaxed) == 0 {
        return drop();
    }
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = DROPPING.try_with(|dropping| dropping.set(self.0));
        }
    }
    let _restore = Restore(DROPPING.try_with(|dropping| dropping.replace(true)).unwrap_or(false));
    drop()
}

#[cold]
#[inline(never)]
fn decide(state: usize, api: &'static str, kind: SyncKind, refusable: bool) -> Result<()> {
    let scoped = if state >= SCOPE {
        SCOPES.try_with(|scopes| scopes.borrow().last().map(|(mode, _)| *mode)).ok().flatten()
    } else {
        None
    };
    let mode = scoped.unwrap_or(decode(state));
    let refusable = refusable && !DROPPING.try_with(Cell::get).unwrap_or(false);
    match mode {
        SyncDebugMode::Off => Ok(()),
        SyncDebugMode::Refuse if refusable => Err(Error::SyncRefused { api }),
        SyncDebugMode::Report | SyncDebugMode::Refuse => {
            let event = SyncEvent {
                api,
                kind,
                thread: super::thread::thread_name(),
                backtrace: Arc::new(Backtrace::capture()),
            };
            let keep = |events: &mut Vec<SyncEvent>| {
                if events.len() < KEPT_EVENTS {
                    events.push(event);
                } else {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                }
            };
            if scoped.is_some() {
                let _ = SCOPES.try_with(|scopes| scopes.borrow_mut().last_mut().map(|(_, events)| keep(events)));
            } else {
                keep(&mut PROCESS_EVENTS.lock().unwrap_or_else(PoisonError::into_inner));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_override_nest_and_restore_and_keep_their_events() {
        // The process mode stays off here: other unit tests run beside this one.
        assert_eq!(before_sync("outside", SyncKind::StreamSynchronize), Ok(()));
        let outer = sync_debug_scope(SyncDebugMode::Report);
        before_sync("cudaStreamSynchronize", SyncKind::StreamSynchronize).unwrap();
        {
            let inner = sync_debug_scope(SyncDebugMode::Refuse);
            assert_eq!(
                before_sync("cudaDeviceSynchronize", SyncKind::DeviceSynchronize),
                Err(Error::SyncRefused { api: "cudaDeviceSynchronize" })
            );
            reporting_only(|| before_sync("cudaEventSynchronize", SyncKind::PinnedWait)).unwrap();
            reporting_only(|| before_sync("cudaFreeAsync", SyncKind::LegacyStream)).unwrap();
            let events = inner.take_events();
            assert_eq!(events.len(), 2, "the drops' waits are reported, the refusal is not");
            assert_eq!((events[0].api, events[0].kind), ("cudaEventSynchronize", SyncKind::PinnedWait));
            assert_eq!(events[1].api, "cudaFreeAsync");
            assert!(before_sync("again", SyncKind::LegacyStream).is_err(), "refusing again after the drop");
        }
        before_sync("cudaMemcpyAsync", SyncKind::PageableCopy).unwrap();
        let events = outer.take_events();
        let apis: Vec<_> = events.iter().map(|event| event.api).collect();
        assert_eq!(apis, ["cudaStreamSynchronize", "cudaMemcpyAsync"]);
        assert!(outer.take_events().is_empty(), "taken");
        drop(outer);
        assert_eq!(before_sync("after", SyncKind::StreamSynchronize), Ok(()));
        // Another thread never sees this thread's scope.
        let _scope = sync_debug_scope(SyncDebugMode::Refuse);
        std::thread::scope(|scope| {
            scope.spawn(|| assert_eq!(before_sync("elsewhere", SyncKind::StreamSynchronize), Ok(()))).join().unwrap()
        });
    }

    #[test]
    fn modes_encode_in_two_bits() {
        for mode in [SyncDebugMode::Off, SyncDebugMode::Report, SyncDebugMode::Refuse] {
            assert_eq!(decode(encode(mode) | (7 * SCOPE)), mode);
        }
    }
}
