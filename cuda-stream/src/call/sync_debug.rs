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

use super::mode_switch::{self, ModeScope, ModeSwitch, ThreadScopes};
use crate::ffi::error::{Error, Result};
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

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

impl mode_switch::Mode for SyncDebugMode {
    const OFF: Self = SyncDebugMode::Off;
    const REPORT: Self = SyncDebugMode::Report;
    const REFUSE: Self = SyncDebugMode::Refuse;
}

thread_local! {
    /// This thread's open scopes, innermost last, with their events.
    static SCOPES: ThreadScopes<SyncDebugMode, SyncEvent> = const { RefCell::new(Vec::new()) };
    /// Inside [`reporting_only`]: refusals are reports.
    static REPORTING_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// The mode, process-wide and per scope, and the events reported under it.
static SWITCH: ModeSwitch<SyncDebugMode, SyncEvent> = ModeSwitch::new(&SCOPES, &REPORTING_ONLY, KEPT_EVENTS, None);

/// How many events are kept for [`take_sync_events`] (and per scope); later ones are counted
/// in [`dropped_sync_events`] only.
pub const KEPT_EVENTS: usize = 4096;

/// Sets the process-wide mode, for every thread without a scope of its own; returns the
/// previous one.
pub fn set_sync_debug_mode(mode: SyncDebugMode) -> SyncDebugMode {
    SWITCH.set_process_mode(mode)
}

/// The process-wide mode.
pub fn sync_debug_mode() -> SyncDebugMode {
    SWITCH.process_mode()
}

/// Takes the events reported under the process mode so far (those under a scope belong to
/// the scope: [`SyncDebugScope::take_events`]).
pub fn take_sync_events() -> Vec<SyncEvent> {
    SWITCH.take_process_kept()
}

/// How many reported events were not kept (beyond [`KEPT_EVENTS`] in one list).
pub fn dropped_sync_events() -> usize {
    SWITCH.dropped()
}

/// Opens a scope with `mode` on this thread: until the returned guard drops, calls of this
/// thread follow `mode` instead of the process mode, and their events are kept in the scope.
/// Scopes nest; the innermost one decides. A guard leaked with `mem::forget` keeps its mode
/// on this thread, and (unless its mode is off) the other threads' calls take the slow path (a
/// thread-local read) for the rest of the process.
pub fn sync_debug_scope(mode: SyncDebugMode) -> SyncDebugScope {
    SyncDebugScope { scope: SWITCH.open_scope(mode) }
}

/// A sync-debug scope of this thread ([`sync_debug_scope`]): the mode is restored when it
/// drops. Not `Send`: it belongs to its thread.
#[derive(Debug)]
#[must_use = "the scope ends when this guard drops"]
pub struct SyncDebugScope {
    /// The scope on the switch, which closes it when dropped.
    scope: ModeScope<SyncDebugMode, SyncEvent>,
}

impl SyncDebugScope {
    /// Takes the events reported in this scope so far.
    pub fn take_events(&self) -> Vec<SyncEvent> {
        self.scope.take_kept()
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
    if SWITCH.is_on_anywhere() { decide(api, kind) } else { Ok(()) }
}

/// Runs `drop` (a destructor that waits or enqueues, and cannot fail) with refusals turned
/// into reports: a refused wait would make it leak.
pub(crate) fn reporting_only<R>(drop: impl FnOnce() -> R) -> R {
    SWITCH.reporting_only(drop)
}

/// What this thread's mode does with a call of `kind` about to wait (the slow path of
/// [`before_sync`]).
#[cold]
#[inline(never)]
fn decide(api: &'static str, kind: SyncKind) -> Result<()> {
    match SWITCH.this_threads_mode() {
        SyncDebugMode::Off => Ok(()),
        SyncDebugMode::Refuse => Err(Error::SyncRefused { api }),
        SyncDebugMode::Report => {
            let thread = super::thread::thread_name();
            SWITCH.keep([SyncEvent { api, kind, thread, backtrace: Arc::new(Backtrace::capture()) }]);
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
}
