//! The operations that may still touch a block of words, in the ledger device buffers keep
//! (each operation a use of the block that is ordered with no other: operations signal each
//! other), and the block's release once none may (at the drop, or by a host function that
//! waits for them).

use super::blocks::{Block, OVERFLOW, Place, lock};
use super::operation::{BarrierScope, MemOp, WaitValue};
use super::raw::{wait_value_on, write_value_on};
use super::word::Word;
use crate::call::live_captures;
use crate::call::transitions::no_capture_transitions;
use crate::device::keep_alive::{graph_mutations, keep_alive};
use crate::device::{Device, same_device};
use crate::ffi::driver::{self, MemOpParams};
use crate::ffi::error::{Error, Result};
use crate::ffi::inside_host_fn::{call_outside_host_fn, refuse_inside_host_fn};
use crate::memory::ledger::{Ledger, SharedEvent, Span};
use crate::stream::capture_status::{CaptureStatus, capture_state};
use crate::stream::{Builtin, Stream, StreamOptions, StreamRef};
use crate::sys;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

/// What an enqueue does on a capturing stream.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum InCapture {
    /// The work becomes graph nodes; the graph keeps the block.
    KeepAlive,
    /// [`Error::CaptureMisuse`]: the work must run now (a memset before first use, a copy
    /// into host memory).
    Refuse,
}

/// The machinery both kinds of words share: a block, and the events after the operations
/// that may still touch it.
pub(super) struct Words<W> {
    pub(super) block: Arc<Block>,
    pub(super) len: usize,
    pub(super) place: Place,
    tracked: Mutex<Tracked>,
    _word: PhantomData<W>,
}

/// The operations still possibly in flight.
pub(super) struct Tracked {
    /// An event after the last operation on each stream of certain identity, and after each
    /// other operation, forgotten as they complete (a signalling ledger: nothing waits).
    ledger: Ledger,
    /// An operation could not be noted: the block is never reused.
    leaked: bool,
}

impl<W: Word> Words<W> {
    pub(super) fn new(place: Place, len: usize) -> Result<Words<W>> {
        // Refused as every allocation is, also when the free list would serve it.
        refuse_inside_host_fn()?;
        if len == 0 {
            return Err(Error::Size("zero words (CUDA has no empty allocation)"));
        }
        let bytes = len.checked_mul(size_of::<W>()).filter(|&bytes| bytes <= isize::MAX as usize);
        let block = Block::take(place, bytes.ok_or(Error::Size(OVERFLOW))?)?;
        let tracked = Mutex::new(Tracked { ledger: Ledger::signalling(), leaked: false });
        Ok(Words { block: Arc::new(block), len, place, tracked, _word: PhantomData })
    }

    /// The device address of word `index`.
    pub(super) fn address(&self, index: usize) -> Result<u64> {
        if index >= self.len {
            return Err(Error::WordOutOfRange { index, len: self.len });
        }
        Ok(self.block.address as u64 + (index * size_of::<W>()) as u64)
    }

    pub(super) fn wait_value(&self, stream: &StreamRef, index: usize, wait: WaitValue<W>) -> Result<()> {
        let address = self.address(index)?;
        // SAFETY: an aligned word of this block, which `enqueue` keeps until the wait has run.
        self.enqueue(stream, InCapture::KeepAlive, |raw| unsafe { wait_value_on(raw, address, wait) })
    }

    pub(super) fn write_value(&self, stream: &StreamRef, index: usize, value: W) -> Result<()> {
        let address = self.address(index)?;
        // SAFETY: as in `wait_value`.
        self.enqueue(stream, InCapture::KeepAlive, |raw| unsafe { write_value_on(raw, address, value) })
    }

    pub(super) fn mem_ops(&self, stream: &StreamRef, ops: &[MemOp<W>]) -> Result<()> {
        if ops.len() > driver::MAX_BATCH_MEM_OPS {
            return Err(Error::Size("a batch of stream memory operations holds at most 255 (cuStreamBatchMemOp)"));
        }
        if ops.is_empty() {
            return Ok(());
        }
        let mut params = Vec::with_capacity(ops.len());
        for op in ops {
            params.push(match *op {
                MemOp::Wait { index, wait } if W::WIDE => {
                    MemOpParams::wait64(self.address(index)?, wait.value.to_bits(), wait.flags())
                }
                MemOp::Wait { index, wait } => {
                    MemOpParams::wait32(self.address(index)?, wait.value.to_bits() as u32, wait.flags())
                }
                MemOp::Write { index, value } if W::WIDE => MemOpParams::write64(self.address(index)?, value.to_bits()),
                MemOp::Write { index, value } => MemOpParams::write32(self.address(index)?, value.to_bits() as u32),
                MemOp::Barrier(BarrierScope::System) => MemOpParams::barrier(driver::MEMORY_BARRIER_SYS),
                MemOp::Barrier(BarrierScope::Device) => MemOpParams::barrier(driver::MEMORY_BARRIER_GPU),
                MemOp::FlushRemoteWrites => MemOpParams::flush_remote_writes(),
            });
        }
        // SAFETY: every address is an aligned word of this block, which `enqueue` keeps until
        // the batch has run.
        self.enqueue(stream, InCapture::KeepAlive, |raw| unsafe { driver::stream_batch_mem_op(raw, &mut params) })
    }

    /// Runs `submit` (this crate's CUDA work on `stream` that touches the block: it gets the
    /// handle the driver takes) and keeps the block until that work has run: outside a
    /// capture, an event recorded after it that the drop honours; in one (as `capture`
    /// allows), the graph's reference. No capture of this crate begins or ends meanwhile.
    pub(super) fn enqueue<R>(
        &self,
        stream: &StreamRef,
        capture: InCapture,
        submit: impl FnOnce(sys::cudaStream_t) -> Result<R>,
    ) -> Result<R> {
        self.same_device(stream)?;
        // The crate's refusals (inside a host function, another thread's per-thread stream,
        // the legacy stream during a capture); a special handle's device made current, for the
        // driver, which takes `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` but reads 0 as the
        // legacy stream whatever this build's default stream is.
        let current = stream.enter()?;
        let raw = if current.is_some() { stream.unambiguous_raw() } else { stream.as_raw() };
        let _transitions = no_capture_transitions();
        if let Some((graph, _)) = capturing(stream)? {
            if capture == InCapture::Refuse {
                return Err(Error::CaptureMisuse(CAPTURED));
            }
            // Not beside another thread's work on the same graph (see `graph_mutations`).
            let _turn = graph_mutations();
            // The graph holds the block for every launch, also if the work fails to enqueue.
            keep_alive(graph, stream.device(), Box::new(Arc::clone(&self.block)))?;
            return submit(raw);
        }
        let result = submit(raw);
        // Noted whatever `submit` returned: part of the work may be enqueued.
        let noted = self.note(stream);
        result.and_then(|result| noted.map(|()| result))
    }

    /// Runs `launch` (the caller's work on `stream`, which may call this crate: run under no
    /// lock) and keeps the block until its work on `stream` has run, as [`Words::enqueue`]
    /// does. A capture that began or ended on `stream` meanwhile leaves the work's whereabouts
    /// unknown: the block is then leaked.
    pub(super) fn use_with<R>(&self, stream: &StreamRef, launch: impl FnOnce() -> R) -> Result<R> {
        self.same_device(stream)?;
        let _current = stream.enter()?;
        let before = {
            let _transitions = no_capture_transitions();
            let before = capturing(stream)?;
            if let Some((graph, _)) = before {
                keep_alive(graph, stream.device(), Box::new(Arc::clone(&self.block)))?;
            }
            before
        };
        let result = launch();
        let _transitions = no_capture_transitions();
        let after = capturing(stream);
        match (before, after) {
            (None, Ok(None)) => self.note(stream)?,
            (Some((_, id)), Ok(Some((_, now)))) if id == now => {}
            _ => {
                lock(&self.tracked).leaked = true;
                return Err(Error::CaptureMisuse("a capture began or ended during the launch: the words are leaked"));
            }
        }
        Ok(result)
    }

    fn same_device(&self, stream: &StreamRef) -> Result<()> {
        match self.place {
            Place::Device(device) => {
                same_device("device words are used on streams of their own device", device, stream.device())
            }
            Place::Host => Ok(()),
        }
    }

    /// Notes the work just enqueued on `stream` as a use of the block, ordered with no other
    /// (see [`Ledger::signalling`]): an event recorded after it, that stream's earlier one
    /// again where its identity is certain. On failure the block is never reused.
    fn note(&self, stream: &StreamRef) -> Result<()> {
        let mut tracked = lock(&self.tracked);
        let noted = tracked.ledger.note_unordered(stream, Span { bytes: 0..self.len * size_of::<W>(), writes: false });
        if noted.is_err() {
            tracked.leaked = true;
        }
        noted
    }
}

/// The graph `stream`'s capture builds and the capture's id, while it is being captured;
/// `None` when it is not (one load while no stream of the process may be capturing).
/// [`Error::CaptureMisuse`] for an invalidated capture.
pub(super) fn capturing(stream: &StreamRef) -> Result<Option<(sys::cudaGraph_t, u64)>> {
    // The legacy stream is never captured (and asking it fails during Global captures).
    if !stream.may_be_captured_now() || stream.builtin().is_some_and(Builtin::is_legacy) {
        return Ok(None);
    }
    let state = capture_state(stream)?;
    match state.info.status {
        CaptureStatus::None => Ok(None),
        CaptureStatus::Active => Ok(Some((state.graph, state.info.id))),
        CaptureStatus::Invalidated => Err(Error::CaptureMisuse("the stream's capture is invalidated")),
    }
}

pub(super) const CAPTURED: &str =
    "device words are zeroed and copied to the host now, not in a capture (a graph would do it at each launch)";

impl<W> Drop for Words<W> {
    /// Never waits: the block goes back now if no operation may touch it, later (a host
    /// function on a private stream waits for the operations) if one may, or never if that
    /// cannot be arranged.
    fn drop(&mut self) {
        let tracked = self.tracked.get_mut().unwrap_or_else(PoisonError::into_inner);
        if tracked.leaked {
            std::mem::forget(Arc::clone(&self.block));
            return;
        }
        let events = std::mem::take(&mut tracked.ledger).into_events();
        if !events.is_empty() {
            let block = Arc::clone(&self.block);
            // CUDA calls are refused inside a host function: then on another thread.
            call_outside_host_fn(move || release_after(events, block));
        }
    }
}

/// Drops `block` once the work before every event has completed, never waiting for it: now,
/// if the events have completed; else through a host function on a new stream of each
/// events' device that waits for them (the stream destroyed at once: its work still runs). If
/// that cannot be arranged, the block is leaked.
fn release_after(mut events: Vec<SharedEvent>, block: Arc<Block>) {
    if !live_captures::may_capture() {
        events.retain(|event| driver::event_query(event.as_raw()) != Ok(true));
    }
    let mut devices: Vec<Device> = Vec::new();
    for event in &events {
        if !devices.contains(&event.device()) {
            devices.push(event.device());
        }
    }
    for device in devices {
        let arranged = Stream::new(device, StreamOptions::non_blocking()).and_then(|stream| {
            for event in events.iter().filter(|event| event.device() == device) {
                stream.wait_raw(event.as_raw(), 0)?;
            }
            let held = Arc::clone(&block);
            // Runs also after a fault (with the error): the block goes back either way.
            stream.launch_host_callback(move |_status| drop(held))
        });
        if arranged.is_err() {
            std::mem::forget(Arc::clone(&block));
        }
    }
    // The events go now: the waits above took their state when they were enqueued.
}
