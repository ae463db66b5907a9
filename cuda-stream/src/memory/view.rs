//! Views of a [`DeviceBuffer`]: a range of its elements, shared ([`DeviceSlice`]) or exclusive
//! ([`DeviceSliceMut`]), to copy and use a part of a buffer (a chunk of a pipeline, one
//! element read back) as `cudaMemcpyAsync(h + off, d + off, bytes)` does in C++.
//!
//! A view borrows its buffer, so the buffer outlives it and cannot be dropped, moved or used
//! whole while an exclusive view lives; exclusive views split from one another
//! ([`DeviceSliceMut::split_at_mut`], [`DeviceBuffer::chunks_mut`]) cover disjoint ranges. A
//! shared view's use is a read of its range, an exclusive view's a write (see
//! [`DeviceBuffer::use_on`]): each waits only for the earlier uses of the buffer it conflicts
//! with, so reads of one range, and uses of disjoint ranges, on different streams run at once.
//! A kernel given a view's address may use only the view's elements, and through a shared
//! view only read them: the ordering is only as true as that promise.

use super::buffer::DeviceBuffer;
use super::page_locked::PageLockedMemory;
use super::{DeviceCopy, checked_range, same_length};
use crate::call::race::Access;
use crate::ffi::error::{Error, Result};
use crate::stream::{AsStream, StreamRef};
use std::marker::PhantomData;
use std::ops::{Range, RangeBounds};

/// A shared view of elements `range` of a [`DeviceBuffer`]: read them, copy them out.
pub struct DeviceSlice<'a, T: DeviceCopy, S: AsStream> {
    buffer: &'a DeviceBuffer<T, S>,
    range: Range<usize>,
}

/// An exclusive view of elements `range` of a [`DeviceBuffer`]: nothing else uses those
/// elements while it lives (the buffer is borrowed mutably, and views split from one another
/// are disjoint). It derefs to the shared view of the same elements, for reading and copying
/// out.
pub struct DeviceSliceMut<'a, T: DeviceCopy, S: AsStream> {
    shared: DeviceSlice<'a, T, S>,
    _exclusive: PhantomData<&'a mut DeviceBuffer<T, S>>,
}

impl<'a, T: DeviceCopy, S: AsStream> DeviceSliceMut<'a, T, S> {
    fn new(buffer: &'a DeviceBuffer<T, S>, range: Range<usize>) -> Self {
        DeviceSliceMut { shared: DeviceSlice { buffer, range }, _exclusive: PhantomData }
    }
}

impl<'a, T: DeviceCopy, S: AsStream> std::ops::Deref for DeviceSliceMut<'a, T, S> {
    type Target = DeviceSlice<'a, T, S>;

    fn deref(&self) -> &DeviceSlice<'a, T, S> {
        &self.shared
    }
}

impl<T: DeviceCopy, S: AsStream> DeviceBuffer<T, S> {
    /// A shared view of the elements in `range`.
    ///
    /// # Errors
    /// [`Error::Size`] for a range outside the buffer or an empty one.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T, S>> {
        Ok(DeviceSlice { buffer: self, range: checked_range(&range, self.len())? })
    }

    /// An exclusive view of the elements in `range`.
    ///
    /// # Errors
    /// As [`DeviceBuffer::slice`].
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T, S>> {
        let range = checked_range(&range, self.len())?;
        Ok(DeviceSliceMut::new(self, range))
    }

    /// Exclusive views of `chunk` elements each, in order, the last one shorter if `chunk`
    /// does not divide the length: the chunks of a pipeline.
    ///
    /// # Errors
    /// [`Error::Size`] for chunks of zero elements.
    pub fn chunks_mut(&mut self, chunk: usize) -> Result<ChunksMut<'_, T, S>> {
        if chunk == 0 {
            return Err(Error::Size("chunks have at least one element"));
        }
        Ok(ChunksMut { buffer: self, next: 0, chunk, _exclusive: PhantomData })
    }
}

/// The exclusive views of [`DeviceBuffer::chunks_mut`].
pub struct ChunksMut<'a, T: DeviceCopy, S: AsStream> {
    buffer: &'a DeviceBuffer<T, S>,
    next: usize,
    chunk: usize,
    _exclusive: PhantomData<&'a mut DeviceBuffer<T, S>>,
}

impl<'a, T: DeviceCopy, S: AsStream> Iterator for ChunksMut<'a, T, S> {
    type Item = DeviceSliceMut<'a, T, S>;

    fn next(&mut self) -> Option<DeviceSliceMut<'a, T, S>> {
        let start = self.next;
        if start >= self.buffer.len() {
            return None;
        }
        let end = start.saturating_add(self.chunk).min(self.buffer.len());
        self.next = end;
        Some(DeviceSliceMut::new(self.buffer, start..end))
    }
}

impl<'a, T: DeviceCopy, S: AsStream> DeviceSlice<'a, T, S> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Always `false`: a view has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The elements of the buffer it covers.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The buffer it views.
    pub(super) fn buffer(&self) -> &'a DeviceBuffer<T, S> {
        self.buffer
    }

    /// The device address of its first element, for work on the home stream that reads the
    /// view's elements only (see [`DeviceBuffer::as_ptr`]).
    pub fn as_ptr(&self) -> *const T {
        self.buffer.as_ptr().wrapping_add(self.range.start)
    }

    /// The device address of its first element, for a launch argument whose use the launch
    /// orders (not handed out).
    pub(crate) fn as_ptr_untracked(&self) -> *const T {
        self.buffer.as_ptr_untracked().wrapping_add(self.range.start)
    }

    /// Copies the view into `destination` on `stream`, and returns once the copy has completed
    /// (as [`DeviceBuffer::copy_to_slice`]).
    ///
    /// # Errors
    /// [`Error::Size`] unless `destination` has the view's length; as
    /// [`DeviceBuffer::copy_to_slice`].
    pub fn copy_to_slice(&self, stream: impl AsStream, destination: &mut [T]) -> Result<()> {
        same_length(destination.len(), self.len())?;
        self.buffer.copy_range_to_host(&stream.as_stream(), self.range.start, destination)
    }

    /// The view's elements, copied on the buffer's home stream after its work so far
    /// (blocking, as [`DeviceBuffer::to_vec`]).
    ///
    /// # Errors
    /// As [`DeviceBuffer::to_vec`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.buffer.range_to_vec(self.range.start, self.range.len())
    }

    /// Copies the view into `destination` (pinned host memory of the view's length) on
    /// `stream`, asynchronously (as [`DeviceBuffer::copy_to_pinned`]).
    ///
    /// # Errors
    /// [`Error::Size`] unless the lengths match; as [`DeviceBuffer::copy_to_pinned`].
    pub fn copy_to_pinned(&self, stream: impl AsStream, destination: &mut impl PageLockedMemory<T>) -> Result<()> {
        self.buffer.copy_pinned(&stream.as_stream(), self.range.start, self.len(), destination, false)
    }

    /// Runs `launch` with `stream` and the view's device address, ordered as a read of the
    /// view's elements: it waits for the earlier writes of them (on other streams), not for
    /// other reads, and the later writes and the free wait for it (see
    /// [`DeviceBuffer::use_on`]). The kernel may only read the view's elements
    /// ([`range`](DeviceSlice::range)), only on `stream`.
    ///
    /// # Errors
    /// As [`DeviceBuffer::use_on`].
    pub fn use_on<R>(&self, stream: impl AsStream, launch: impl FnOnce(&StreamRef, *const T) -> R) -> Result<R> {
        let span = self.buffer.span(self.range.start, self.len(), false);
        self.buffer.use_range_on(&stream.as_stream(), span, |stream, ptr| launch(stream, ptr.cast_const()))
    }

    /// The view read, for [`LaunchConfig::accesses`](crate::LaunchConfig::accesses).
    pub fn read_access(&self) -> Access {
        // A declaration for the detector, not an address for work: no export.
        Access::read(self.as_ptr_untracked(), self.len())
    }
}

impl<'a, T: DeviceCopy, S: AsStream> DeviceSliceMut<'a, T, S> {
    /// The device address of its first element, for work on the home stream that uses the
    /// view's elements only (see [`DeviceBuffer::as_mut_ptr`]).
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.shared.as_ptr().cast_mut()
    }

    /// Two exclusive views: the first `mid` elements and the rest.
    ///
    /// # Errors
    /// [`Error::Size`] unless `0 < mid < len` (each view has at least one element).
    pub fn split_at_mut(self, mid: usize) -> Result<(DeviceSliceMut<'a, T, S>, DeviceSliceMut<'a, T, S>)> {
        if mid == 0 || mid >= self.len() {
            return Err(Error::Size("a view splits into two non-empty views"));
        }
        let DeviceSlice { buffer, range } = self.shared;
        let split = range.start + mid;
        Ok((DeviceSliceMut::new(buffer, range.start..split), DeviceSliceMut::new(buffer, split..range.end)))
    }

    /// Copies `source` into the view on `stream`, and returns once the copy has completed (as
    /// [`DeviceBuffer::copy_from_slice`]).
    ///
    /// # Errors
    /// [`Error::Size`] unless `source` has the view's length; as
    /// [`DeviceBuffer::copy_from_slice`].
    pub fn copy_from_slice(&mut self, stream: impl AsStream, source: &[T]) -> Result<()> {
        same_length(self.len(), source.len())?;
        self.shared.buffer.copy_range_from_host(&stream.as_stream(), self.range.start, source)
    }

    /// Copies `source` (pinned host memory of the view's length) into the view on `stream`,
    /// asynchronously (as [`DeviceBuffer::copy_from_pinned`]).
    ///
    /// # Errors
    /// [`Error::Size`] unless the lengths match; as [`DeviceBuffer::copy_from_pinned`].
    pub fn copy_from_pinned(&mut self, stream: impl AsStream, source: &mut impl PageLockedMemory<T>) -> Result<()> {
        self.shared.buffer.copy_pinned(&stream.as_stream(), self.range.start, self.len(), source, true)
    }

    /// Copies `source` (a view of this or another buffer, of the same length, on this or a
    /// peer device) into the view on `stream`, asynchronously, as
    /// [`DeviceBuffer::copy_from`] copies a buffer: a read of `source`'s elements and a write of
    /// the view's, ordered with their other uses.
    ///
    /// # Errors
    /// [`Error::Size`] unless the lengths match; as [`DeviceBuffer::copy_from`].
    pub fn copy_from<R: AsStream>(&mut self, stream: impl AsStream, source: &DeviceSlice<'_, T, R>) -> Result<()> {
        same_length(self.len(), source.len())?;
        let (start, source_start) = (self.range.start, source.range.start);
        self.shared.buffer.copy_range_from(&stream.as_stream(), start, source.buffer, source_start, self.len())
    }

    /// Runs `launch` with `stream` and the view's device address, ordered as a write of the
    /// view's elements: it waits for every earlier use of them (on other streams), and later
    /// uses of them and the free wait for it (see [`DeviceBuffer::use_on`]). The kernel may use
    /// only the view's elements ([`range`](DeviceSlice::range)), only on `stream`: a disjoint
    /// view's use may run at the same time.
    ///
    /// # Errors
    /// As [`DeviceBuffer::use_on`].
    pub fn use_on<R>(&mut self, stream: impl AsStream, launch: impl FnOnce(&StreamRef, *mut T) -> R) -> Result<R> {
        let span = self.shared.buffer.span(self.range.start, self.len(), true);
        self.shared.buffer.use_range_on(&stream.as_stream(), span, launch)
    }

    /// The view written, for [`LaunchConfig::accesses`](crate::LaunchConfig::accesses).
    pub fn write_access(&self) -> Access {
        // A declaration for the detector, not an address for work: no export.
        Access::write(self.as_ptr_untracked(), self.len())
    }
}

impl<T: DeviceCopy, S: AsStream> std::fmt::Debug for DeviceSlice<'_, T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSlice").field("range", &self.range).field("buffer", self.buffer).finish()
    }
}

impl<T: DeviceCopy, S: AsStream> std::fmt::Debug for DeviceSliceMut<'_, T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSliceMut").field("range", &self.range).field("buffer", self.shared.buffer).finish()
    }
}

impl<T: DeviceCopy, S: AsStream> std::fmt::Debug for ChunksMut<'_, T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunksMut").field("next", &self.next).field("chunk", &self.chunk).finish()
    }
}
