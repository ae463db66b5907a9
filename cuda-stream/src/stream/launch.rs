//! Launching your own kernels on a stream: the scope a C launcher runs in.
//!
//! A kernel launches into the *current* device's context, and a `<<<>>>` launch reports its
//! error only through the runtime's per-thread last error. [`StreamRef::launch`] takes care of
//! both: it makes the stream's device current for the call (and restores the previous one), and
//! returns the error of this launch, not one that an earlier call left behind.

use crate::ffi::error::{Result, take_last_error};
use crate::stream::StreamRef;
use crate::stream::enqueue::Work;
use crate::sys;

impl StreamRef {
    /// Calls `launcher` with this stream's raw handle, with the stream's device current, and
    /// returns the launch's own error under the name `launcher_name`.
    ///
    /// `launcher` is typically an `extern "C"` function of your `.cu` file that launches with
    /// `<<<grid, block, shared, stream>>>` and returns `cudaGetLastError()`. The runtime's last
    /// error is reset before the call (an error an earlier, unchecked call left there is not
    /// this launch's) and read after it, so a launcher that returns `cudaSuccess` without
    /// checking still has its launch error reported; nothing is left behind either way.
    ///
    /// `launcher` runs inside the [enqueue path](crate::capture#who-is-in-a-capture-begins-ends-and-joins-are-transitions)'s
    /// hold, as the crate's own launches do: no capture begins, ends or is joined while it
    /// runs, so a launch that found the stream outside any capture is not caught by one, and
    /// one into a capture of this crate is not overlapped by its end nor by another thread's
    /// work of this crate on the same graph. So `launcher` must launch and return:
    /// * it must not wait for another thread (a join, a channel, a lock another thread holds
    ///   while calling this crate) nor for a [`completion`](StreamRef::completion): while a
    ///   capture transition of another thread is pending, the crate's other calls (and the
    ///   completions' reactor) wait for this one, which would wait for them forever;
    /// * calls of this crate on its own thread that put work on a stream or read a status work;
    ///   a transition there is refused with [`Error::CaptureMisuse`](crate::Error::CaptureMisuse)
    ///   (a capture's begin or end, an external record, and a wait or `wait_stream` that may
    ///   join a capture, which is every one while a capture may exist);
    /// * a [`Capture`](crate::capture::Capture) ended or dropped inside it stays open and
    ///   counted (see [`Capture::end`](crate::capture::Capture::end)).
    ///
    /// For longer work around a launch, see [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on),
    /// whose closure runs outside the hold and launches through this.
    ///
    /// ```no_run
    /// # use cuda_stream::{Device, Stream, StreamOptions, sys};
    /// unsafe extern "C" {
    ///     fn my_kernel_launch(stream: sys::cudaStream_t, n: u32) -> sys::cudaError_t;
    /// }
    /// # fn main() -> cuda_stream::Result<()> {
    /// let stream = Stream::new(Device::new(0)?, StreamOptions::non_blocking())?;
    /// // SAFETY: the launcher takes a live stream of the current device and a length.
    /// stream.launch("my_kernel_launch", |raw| unsafe { my_kernel_launch(raw, 1024) })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The launch error (`cudaErrorInvalidConfiguration`, `cudaErrorLaunchOutOfResources`, ...,
    /// or a sticky error of earlier work); [`crate::Error::NoKernelImage`] for kernels built
    /// for other architectures; [`crate::Error::WrongThread`] for another thread's
    /// per-thread stream; refused inside a host function; the errors of making the device
    /// current.
    pub fn launch(
        &self,
        launcher_name: &'static str,
        launcher: impl FnOnce(sys::cudaStream_t) -> sys::cudaError_t,
    ) -> Result<()> {
        let work = Work::named(launcher_name);
        self.enqueue(work, |_| {
            let _ = take_last_error();
            let returned = launcher(self.as_raw());
            let last = take_last_error();
            match if returned == sys::cudaError::cudaSuccess { last } else { returned } {
                sys::cudaError::cudaSuccess => Ok(()),
                code => Err(self.device().launch_error(code, launcher_name, launcher_name, None)),
            }
        })
    }
}
