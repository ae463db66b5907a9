//! What a stream tells the race detector ([`race`](crate::race)): which stream an operation
//! is on, and the accesses you declare for work the crate cannot see.

use super::{Builtin, StreamRef};
use crate::call::race::model::{Step, StreamClass, StreamKey, Use};
use crate::call::race::{self, Access, AccessKind, Checked};
use crate::ffi::error::Result;
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::stream::capture_status::CaptureStatus;

impl StreamRef {
    /// This stream as the detector knows it.
    pub(crate) fn race_key(&self) -> StreamKey {
        let (device, handle, thread) = self.identity();
        let class = match (self.builtin(), self.non_blocking) {
            (Some(builtin), _) if builtin.is_legacy() => StreamClass::Legacy,
            (Some(_), _) | (None, Some(false)) => StreamClass::Blocking,
            // Non-blocking, or flags unknown (a borrowed stream): no implicit order assumed.
            (None, _) => StreamClass::NonBlocking,
        };
        StreamKey { device: device.ordinal(), handle, thread, class }
    }

    /// Checks operation `step` about to be enqueued here, with the accesses `uses` makes (see
    /// [`race::check`]). Work enqueued into a capture is not checked: it runs when the graph
    /// is launched. One relaxed load while the detector is off.
    ///
    /// # Errors
    /// [`Error::Race`](crate::Error::Race) under [`RaceMode::Fail`](race::RaceMode::Fail).
    #[inline(always)]
    pub(crate) fn race_check(
        &self,
        step: Step,
        uses: impl FnOnce() -> Vec<Use>,
        operation: impl FnOnce() -> String,
    ) -> Result<Checked> {
        if !race::tracking() {
            return Ok(Checked::none());
        }
        self.race_check_tracking(step, uses, operation)
    }

    /// [`StreamRef::race_check`] while the detector tracks.
    #[cold]
    #[inline(never)]
    fn race_check_tracking(
        &self,
        step: Step,
        uses: impl FnOnce() -> Vec<Use>,
        operation: impl FnOnce() -> String,
    ) -> Result<Checked> {
        match self.race_destination() {
            Destination::Stream => race::check(self.race_key(), step, uses(), operation()),
            // Into a capture: the graph's launches replay the accesses.
            Destination::Capture(id) => {
                race::captured(id, uses(), operation());
                Ok(Checked::none())
            }
            Destination::Nowhere => Ok(Checked::none()),
        }
    }

    /// Where an operation enqueued here now goes, as the detector sees it.
    #[cold]
    fn race_destination(&self) -> Destination {
        // The legacy stream is never captured (and asking fails while another stream of its
        // device is captured in Global mode).
        if self.builtin().is_some_and(Builtin::is_legacy) || !self.may_be_captured_now() {
            return Destination::Stream;
        }
        match self.capture_info() {
            Ok(info) if info.status == CaptureStatus::None => Destination::Stream,
            Ok(info) if info.status == CaptureStatus::Active => Destination::Capture(info.id),
            // Invalidated, or unreadable: nothing is recorded.
            _ => Destination::Nowhere,
        }
    }

    /// Checks a launch here of a graph whose capture declared `accesses` (see
    /// [`race::check_replay`]).
    ///
    /// # Errors
    /// [`Error::Race`](crate::Error::Race) under [`RaceMode::Fail`](race::RaceMode::Fail).
    #[cold]
    pub(crate) fn race_check_replay(&self, accesses: &race::CapturedAccesses) -> Result<Checked> {
        match self.race_destination() {
            Destination::Stream => race::check_replay(self.race_key(), accesses),
            // A graph launched into a capture (a child graph): not modelled.
            Destination::Capture(_) | Destination::Nowhere => Ok(Checked::none()),
        }
    }

    /// What a synchronize (or a query that answers true) of this stream waits for, read
    /// before it, for [`race::host_saw`] after it: later work on any stream comes after it.
    #[inline(always)]
    pub(crate) fn race_snapshot(&self) -> Option<race::Snapshot> {
        race::snapshot(|model| model.stream_clock(&self.race_key()))
    }

    /// Tells the race detector that work enqueued here (by raw FFI, another library, a kernel
    /// launched without the crate) accesses `accesses` (device memory, or pinned host memory
    /// the device reads or writes): it is
    /// checked against the other streams' accesses of that memory, and later ones against
    /// it. Enqueues nothing. Call it when the work is enqueued, in the same order as the
    /// stream's other operations. Costs one relaxed load while the detector is off.
    ///
    /// # Errors
    /// [`Error::Race`](crate::Error::Race) under [`RaceMode::Fail`](race::RaceMode::Fail)
    /// when the accesses race; [`Error::InsideHostFn`](crate::Error::InsideHostFn); the
    /// per-thread stream's [`Error::WrongThread`](crate::Error::WrongThread) on another
    /// thread.
    pub fn declare_accesses(&self, operation: &str, accesses: &[Access]) -> Result<()> {
        refuse_inside_host_fn()?;
        let _current = self.enter_to_read()?;
        self.race_check(Step::Work, || race::uses(accesses), || operation.to_owned())?.enqueued();
        Ok(())
    }

    /// Enqueues a collective that the crate cannot see (NCCL's, through `enqueue`) and tells
    /// the race detector about it: rank `i` runs on `ranks[i].0` and accesses `ranks[i].1`
    /// there, and `order` says which ranks receive data from which. Each rank is checked as
    /// one operation of its stream, as [`StreamRef::declare_accesses`] does; then `enqueue`
    /// runs, and only if it returns `Ok` is the collective recorded: its accesses, and its
    /// rendezvous (each rank's later work comes after the earlier work of every rank it
    /// receives from; not after those ranks' own accesses in the collective). A collective
    /// whose ranks access no bytes orders nothing (NCCL enqueues nothing for zero elements).
    /// Ranks whose stream is being captured go with the capture's graph, as their accesses
    /// alone. While the detector is off, this is `enqueue()` after each rank's thread check.
    ///
    /// Enqueue nothing else on the ranks' streams between this call's start and `enqueue`'s
    /// return: work another thread enqueues there meanwhile may run before the collective,
    /// and is taken as after it.
    ///
    /// # Errors
    /// [`Error::Race`](crate::Error::Race) under [`RaceMode::Fail`](race::RaceMode::Fail) when
    /// a rank's accesses race earlier work: `enqueue` is not run, nothing is recorded (races
    /// between the ranks themselves are found as they are recorded, and reported);
    /// [`Error::InsideHostFn`](crate::Error::InsideHostFn); a per-thread stream's
    /// [`Error::WrongThread`](crate::Error::WrongThread) on another thread. Otherwise `Ok` with
    /// what `enqueue` returned.
    pub fn declare_collective<T, E>(
        operation: &str,
        order: race::CollectiveOrder,
        ranks: &[(&StreamRef, &[Access])],
        enqueue: impl FnOnce() -> std::result::Result<T, E>,
    ) -> Result<std::result::Result<T, E>> {
        refuse_inside_host_fn()?;
        for (stream, _) in ranks {
            // Each stream may be used here (its thread); no guard is held across the ranks,
            // whose devices may differ.
            drop(stream.enter_to_read()?);
        }
        if !race::tracking() {
            return Ok(enqueue());
        }
        let (mut on_streams, mut captured) = (Vec::with_capacity(ranks.len()), Vec::new());
        for (stream, accesses) in ranks {
            match stream.race_destination() {
                Destination::Stream => on_streams.push((stream.race_key(), race::uses(accesses))),
                Destination::Capture(id) => captured.push((id, race::uses(accesses))),
                Destination::Nowhere => {}
            }
        }
        let checked = race::check_collective(on_streams, order, operation)?;
        let enqueued = enqueue();
        if enqueued.is_ok() {
            checked.enqueued();
            for (id, uses) in captured {
                race::captured(id, uses, operation.to_owned());
            }
        }
        Ok(enqueued)
    }

    /// `bytes` bytes at `address` were allocated here (stream-ordered).
    #[inline(always)]
    pub(crate) fn race_allocated(&self, address: u64, bytes: u64, operation: &str) {
        race::allocated(|| self.race_key(), || Access::bytes(address, bytes, AccessKind::Write).as_use(), operation);
    }
}

/// Where an operation enqueued on a stream goes, as the race detector sees it.
enum Destination {
    /// The stream itself: checked now.
    Stream,
    /// Capture `0` (CUDA's id): replayed by the graph's launches.
    Capture(u64),
    /// A capture that was invalidated, or a status that cannot be read: not recorded.
    Nowhere,
}
