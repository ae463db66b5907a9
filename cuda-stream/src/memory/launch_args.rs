//! Buffers and views given to a typed launch ([`Kernel::launch`](crate::Kernel::launch)) in
//! place of raw addresses: the memory the kernel argument touches, read or written, ordered
//! as any use of it and told to the race detector.

use super::DeviceCopy;
use super::buffer::DeviceBuffer;
use super::buffer_core::BufferCore;
use super::graph_nodes::hold_in_capture;
use super::ledger::Span;
use super::uses::{Hold, InCaptures, Touches, Uses, ordered_use};
use super::view::{DeviceSlice, DeviceSliceMut};
use crate::call::race::{Access, AccessKind};
use crate::ffi::error::Result;
use crate::graph::held::CaptureHolds;
use crate::stream::{AsStream, BorrowedStream, StreamRef};
use std::sync::Arc;

/// The memory one launch argument touches: a buffer's or a view's elements, read or written.
/// Made by the launch from a `&DeviceBuffer`, `&mut DeviceBuffer`, `&DeviceSlice` or
/// `&mut DeviceSliceMut` argument; opaque.
pub struct ArgUse<'a> {
    home: BorrowedStream<'a>,
    uses: &'a Uses,
    span: Span,
    /// The memory as a capture's graph holds it (a launch in a capture of this crate).
    core: Option<&'a Arc<BufferCore>>,
    /// The device address of the span's first byte.
    address: u64,
}

impl std::fmt::Debug for ArgUse<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgUse").field("address", &self.address).field("span", &self.span).finish()
    }
}

impl ArgUse<'_> {
    /// The access, for the race detector.
    pub(crate) fn access(&self) -> Access {
        let kind = if self.span.writes { AccessKind::Write } else { AccessKind::Read };
        Access::bytes(self.address, self.span.bytes.len() as u64, kind)
    }
}

/// Runs `enqueue` (a launch on `stream`) ordered after the earlier uses that `args` conflict
/// with, and noted for the later ones and the frees, as [`DeviceBuffer::use_on`] orders a use;
/// on a stream of a capture of this crate, captured, the capture's graph holding the buffers,
/// unless `refused_in_captures` says why it is refused there.
pub(crate) fn ordered_launch(
    stream: &StreamRef,
    args: &[ArgUse<'_>],
    refused_in_captures: Option<&'static str>,
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let hold = |holds: &CaptureHolds| {
        let cores: Vec<_> = args.iter().map(|arg| arg.core).collect();
        hold_in_capture(holds, args, &cores)
    };
    let in_captures = refused_in_captures.map_or(InCaptures::Held(&hold), InCaptures::Refused);
    ordered_use(stream, args, Hold::Throughout, in_captures, |_| enqueue())
}

impl Touches for ArgUse<'_> {
    #[inline(always)]
    fn home(&self) -> Option<&StreamRef> {
        Some(&self.home)
    }

    #[inline(always)]
    fn uses(&self) -> &Uses {
        self.uses
    }

    #[inline(always)]
    fn span(&self) -> &Span {
        &self.span
    }
}

impl<T: DeviceCopy, S: AsStream> DeviceBuffer<T, S> {
    /// The buffer's elements, read (`writes` false) or written, by a launch argument.
    pub(crate) fn launch_use(&self, writes: bool) -> Result<ArgUse<'_>> {
        self.range_launch_use(0, self.len(), writes)
    }

    fn range_launch_use(&self, start: usize, len: usize, writes: bool) -> Result<ArgUse<'_>> {
        let span = self.span(start, len, writes);
        let address = self.element(start) as u64;
        Ok(ArgUse { home: self.home()?, uses: self.uses(), span, address, core: self.core_for_captures() })
    }
}

impl<T: DeviceCopy, S: AsStream> DeviceSlice<'_, T, S> {
    /// The view's elements, read by a launch argument.
    pub(crate) fn launch_use(&self) -> Result<ArgUse<'_>> {
        self.buffer().range_launch_use(self.range().start, self.len(), false)
    }
}

impl<T: DeviceCopy, S: AsStream> DeviceSliceMut<'_, T, S> {
    /// The view's elements, written by a launch argument.
    pub(crate) fn launch_use_mut(&self) -> Result<ArgUse<'_>> {
        self.buffer().range_launch_use(self.range().start, self.len(), true)
    }
}
