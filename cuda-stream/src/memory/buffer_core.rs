//! A device buffer's memory as its owner and the graphs that use it share it: the order of
//! its uses, and, once the owner has been dropped while a graph still held the memory, the
//! free that the last graph's drop makes.
//!
//! A graph holds a borrowed [`DeviceBuffer`](super::DeviceBuffer)'s memory through this core,
//! not through the buffer: the buffer's home stream is lent by its owner (`&Stream`, say) and
//! may be gone before the graph. So the graph's launches never touch the home stream. Before a
//! graph first holds the memory, the home stream's unmarked uses are marked and its later uses
//! are marked like any other ([`Uses::prepare_for_graphs`]); a launch then waits for the marks
//! it conflicts with, wherever they were made. A buffer whose address was handed out for home
//! work the buffer does not see (`as_ptr`) is refused, at the hold and at every launch; one
//! whose memory a graph holds is not handed to Python (the consumer's work is not noted).
//!
//! The owner's drop while a graph holds the memory frees nothing: it records an event after
//! the home stream's work so far and leaves it, with what the free needs, here
//! ([`Detached`]); nothing else (a holder leaked with a failed capture leaks an event, no
//! stream). When the last holder of the memory (a graph, a clone, an executable, a capture)
//! is dropped, the core frees it on a new private stream of the device that waits for that
//! event (its position covers every use the old home made), after every use since, as the
//! owner's drop would have on the home stream. The end of a buffer's memory, whoever makes it, is here too
//! ([`free_after_uses`]).

use super::lent::LentMemory;
use super::output_slot::OutputSlot;
use super::uses::{Uses, refuse_capture};
use crate::call::capture_mode::{ignore_other_threads_captures, uncapturable_call, uncaptured_stream_call};
use crate::call::race::model::Step;
use crate::call::race::{self, Access, AccessKind};
use crate::call::sync_debug;
use crate::call::transitions::{NoTransitions, no_capture_transitions};
use crate::device::Device;
use crate::event::Event;
use crate::ffi::driver;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::graph::held::CaptureHolds;
use crate::stream::enqueue::InCapture;
use crate::stream::{Stream, StreamOptions, StreamRef};
use crate::sys;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The shared part of a device buffer (see the [module docs](self)).
pub(super) struct BufferCore {
    pub(super) uses: Uses,
    /// Set by the owner's drop while a graph held the memory.
    detached: Mutex<Option<Detached>>,
}

/// Memory whose owner was dropped while graphs held it: where its old home stream's work
/// ended, and its free.
pub(super) struct Detached {
    /// Recorded on the old home stream at the owner's drop, after its work so far.
    pub(super) tail: Event,
    pub(super) freed: Freed,
}

impl BufferCore {
    pub(super) fn new(uses: Uses) -> BufferCore {
        BufferCore { uses, detached: Mutex::new(None) }
    }

    /// Hands the free to the last holder.
    pub(super) fn detach(&self, detached: Detached) {
        *self.detached.lock().unwrap_or_else(PoisonError::into_inner) = Some(detached);
    }
}

impl Drop for BufferCore {
    /// Frees memory whose owner was dropped first (see the [module docs](self)), on a new
    /// private stream after the old home's work and every use; leaks it where that cannot be
    /// done safely (inside a host function, a stream that cannot be made).
    fn drop(&mut self) {
        let detached = self.detached.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        let Some(Detached { tail, freed }) = detached else { return };
        let home = refuse_inside_host_fn().and_then(|()| {
            ignore_other_threads_captures();
            let home = Stream::new(freed.device, StreamOptions::non_blocking())?;
            home.wait_raw(tail.as_raw(), 0)?;
            Ok(home)
        });
        match home {
            Ok(home) => free_after_uses(&home, &self.uses, freed),
            Err(_) => freed.leak(),
        }
        // The stream goes now: CUDA destroys it once the free has run.
    }
}

impl fmt::Debug for BufferCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferCore").field("leaked", &self.uses.leaked()).finish_non_exhaustive()
    }
}

/// Makes `core`, homed on `home`, ready to be held by a graph whose launches never reach
/// `home` ([`Uses::prepare_for_graphs`]), under the caller's capture-transition hold: `home`'s
/// uses not yet marked are marked there. Where `home` is being captured, no mark can be
/// recorded on it (the record would go into the capture): for the graph of the capture whose
/// holds are `capture`, the captured stream's own uses are marked once the capture has ended
/// ([`CaptureHolds::after_end`], before the graph is handed out); otherwise refused.
///
/// # Errors
/// [`Error::GraphMisuse`] for a buffer whose address was handed out; [`Error::CaptureMisuse`]
/// for home uses not yet marked on another captured stream; CUDA's errors recording the mark.
pub(super) fn prepare_core(core: &Arc<BufferCore>, home: &StreamRef, capture: Option<&CaptureHolds>) -> Result<()> {
    let origin = capture.filter(|holds| holds.is_origin(home));
    let mut deferred = false;
    let prepared = core.uses.prepare_for_graphs(home, || {
        if origin.is_some() {
            deferred = true;
            return Err(Error::CaptureMisuse("the captured stream's uses are marked once its capture has ended"));
        }
        refuse_capture(home)
    });
    match (prepared, origin) {
        (Err(_), Some(holds)) if deferred => {
            let core = Arc::clone(core);
            holds.after_end(Box::new(move |origin: &StreamRef| {
                // A buffer whose owner went while its home was captured is leaked, never marked:
                // the graph is handed out, and its launches are refused, as every use of a
                // leaked buffer is.
                if core.uses.leaked() {
                    return Ok(());
                }
                origin.outside_transitions(InCapture::Captured, || {
                    core.uses.prepare_for_graphs(origin, || refuse_capture(origin))
                })
            }));
            Ok(())
        }
        (prepared, _) => prepared,
    }
}

/// An event recorded on `home` after its work so far: where the old home's work ends for
/// memory whose owner is dropped while graphs hold it (see the [module docs](self)). Refused
/// inside a host function and while `home` is being captured.
pub(super) fn detach_from(home: &StreamRef, uses: &Uses) -> Result<Event> {
    let _hold = hold_for_the_end(home, uses)?;
    let tail = Event::internal(home.device())?;
    home.record_raw(tail.as_raw(), 0)?;
    Ok(tail)
}

/// What the end of a buffer's memory on `home` (its detach, its free) is made under: outside
/// a host function, with every use noted, the other threads' captures settled, and no capture
/// of this crate beginning until the hold returned goes, checked not capturing `home` (the
/// end's record or free would go into the capture, or make a capturing stream wait).
fn hold_for_the_end(home: &StreamRef, uses: &Uses) -> Result<NoTransitions> {
    refuse_inside_host_fn()?;
    if uses.leaked() {
        return Err(Error::Size("a use of this buffer could not be noted"));
    }
    ignore_other_threads_captures();
    let hold = no_capture_transitions();
    refuse_capture(home)?;
    Ok(hold)
}

/// Where a buffer's memory came from, and so what its drop does after the last use.
pub(super) enum Origin {
    /// Allocated by this buffer (`cudaMallocAsync`): freed on the home stream.
    Allocated,
    /// A graph's output ([`GraphOutput::take`](super::GraphOutput::take)): freed on the home
    /// stream, and that free is what the graph's next launch waits for.
    Output(Arc<OutputSlot>),
    /// Another library's memory: handed back to it, never freed here.
    Lent(LentMemory),
}

/// What the end of a buffer's memory needs besides its uses: where it is, and where it came
/// from.
pub(super) struct Freed {
    /// The device address (never dereferenced on the host).
    pub(super) address: u64,
    pub(super) bytes: usize,
    pub(super) device: Device,
    pub(super) origin: Origin,
}

impl Freed {
    /// Never freed nor handed back (noted for a graph output's next launch).
    pub(super) fn leak(self) {
        if let Origin::Output(output) = &self.origin {
            output.never_freed();
        }
    }
}

/// How a buffer's drop ended.
enum End {
    /// Nothing was freed or handed back.
    Leaked,
    /// Freed on the home stream.
    Freed,
    /// Lent memory, whose last use ends at this event (recorded on the home stream after it).
    AfterEvent(Event),
}

/// The end of a buffer's memory, after every use: freed on `home` (noted for a graph output's
/// next launch), or, for lent memory, handed back once the last use has completed; or leaked.
/// `home` is the buffer's home stream at its owner's drop, or the private stream of memory
/// whose owner was dropped while graphs held it.
pub(super) fn free_after_uses(home: &StreamRef, uses: &Uses, mut freed: Freed) {
    // A wait or a free on the legacy stream is reported by the sync-debug mode, never
    // refused: refused, the memory would leak.
    let end = sync_debug::reporting_only(|| order_and_free(home, uses, &freed));
    match (end, &mut freed.origin) {
        (End::Leaked, _) => freed.leak(),
        // Handed back only once the last use has completed (the lender may reuse it at
        // once); not at all if that cannot be waited for. The wait is a query of an event
        // outside any capture, which a capture of this thread's that another library began
        // (`torch.cuda.graph`) must neither refuse nor be invalidated by: made in the
        // Relaxed mode.
        (End::AfterEvent(last_use), Origin::Lent(lent))
            if sync_debug::reporting_only(|| uncapturable_call(|| last_use.synchronize())).is_ok() =>
        {
            lent.hand_back();
        }
        _ => {}
    }
}

/// The free, after every use, on `home`, or, for lent memory, an event after every use; or
/// nothing (a leak).
fn order_and_free(home: &StreamRef, uses: &Uses, freed: &Freed) -> End {
    let Ok(_hold) = hold_for_the_end(home, uses) else { return End::Leaked };
    // After the last use on every other stream (recorded outside any capture).
    if uses.home_waits_for_others(home).is_err() {
        return End::Leaked;
    }
    // A race the detector finds is reported, never refused here: refused, the memory
    // would leak and the report be lost.
    // Memory of this crate's own lent back to it is not freed here: no free to check.
    let frees = !matches!(&freed.origin, Origin::Lent(lent) if !lent.foreign());
    let free_check = || {
        let uses = || {
            if frees {
                vec![Access::bytes(freed.address, freed.bytes as u64, AccessKind::Free).as_use()]
            } else {
                Vec::new()
            }
        };
        home.race_check(Step::Work, uses, || "cudaFreeAsync".to_owned())
    };
    let Ok(checked) = race::reporting_only(free_check) else {
        return End::Leaked;
    };
    if let Origin::Lent(_) = freed.origin {
        // On a stream checked not capturing, under the hold: a plain record.
        let Ok(last_use) = Event::internal(freed.device) else { return End::Leaked };
        if home.record_raw(last_use.as_raw(), 0).is_err() {
            return End::Leaked;
        }
        checked.enqueued();
        return End::AfterEvent(last_use);
    }
    let (address, raw) = (freed.address as *mut c_void, home.as_raw());
    // Memory this buffer allocated and nothing else frees; every use this crate enqueued
    // is ordered before this point of the home stream. On failure the memory is leaked.
    // Not into a capture (checked above), but the calling thread may be capturing another
    // stream in Global or ThreadLocal mode (see `allocate_raw`).
    let released = uncaptured_stream_call(|| match home.enter()? {
        // SAFETY: as above; a live real stream.
        None => unsafe { driver::mem_free_async(address, raw) },
        // SAFETY: as above; a special handle of the current device.
        Some(_current) => check(unsafe { sys::cudaFreeAsync(address, raw) }, "cudaFreeAsync"),
    });
    if released.is_err() {
        return End::Leaked;
    }
    checked.enqueued();
    // On the stream just freed on, under the same hold: what a graph output's next launch
    // waits for.
    if let Origin::Output(output) = &freed.origin {
        output.freed_on(home);
    }
    End::Freed
}
