//! Launching your own kernels on a stream: the scope a C launcher runs in.
//!
//! A kernel launches into the *current* device's context, and a `<<<>>>` launch reports its
//! error only through the runtime's per-thread last error. [`StreamRef::launch`] takes care of
//! both: it makes the stream's device current for the call (and restores the previous one), and
//! returns the error of this launch, not one that an earlier call left behind.

use crate::call::race::model::Step;
use crate::ffi::error::{Result, take_last_error};
use crate::stream::StreamRef;
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
    /// `launcher` runs outside the enqueue path's hold (see the
    /// [capture docs](crate::capture#who-is-in-a-capture-begins-ends-and-joins-are-transitions)):
    /// it is your code, which may wait for other threads' calls of this crate. So a capture
    /// transition of another thread may come between the crate's checks and your launch: a
    /// launch onto a stream of a capture while another thread adds a node to that capture's
    /// graph is yours to avoid.
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
        // Not through the enqueue path's hold: `launcher` is your code, which may wait for
        // other threads' calls of this crate, and a transition pending on the hold would then
        // wait for it forever.
        let _current = self.enter_runtime()?;
        let checked = self.race_check(Step::Work, Vec::new, || launcher_name.to_owned())?;
        let _ = take_last_error();
        let returned = launcher(self.as_raw());
        let last = take_last_error();
        match if returned == sys::cudaError::cudaSuccess { last } else { returned } {
            sys::cudaError::cudaSuccess => {
                checked.enqueued();
                Ok(())
            }
            code => Err(self.device().launch_error(code, launcher_name, launcher_name, None)),
        }
    }
}
