//! [`LentMemory`]: device memory another library lends to a [`DeviceBuffer`](super::DeviceBuffer)
//! (a PyTorch or CuPy tensor imported through DLPack), and the one call that gives it back.

use std::fmt;

/// What hands lent memory back to its lender (DLPack's deleter): called once, after the
/// buffer's last use has completed; never, if that cannot be known (the memory then stays the
/// lender's for good, a leak rather than a use after its reuse).
pub(crate) struct LentMemory {
    hand_back: Option<Box<dyn FnOnce() + Send>>,
    /// Memory the race detector knows nothing of (another library's): it begins and ends with
    /// the buffer. Memory of this crate's own (an export imported again) is already known.
    foreign: bool,
}

impl LentMemory {
    /// Another library's memory, which `hand_back` gives back to it.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn new(hand_back: impl FnOnce() + Send + 'static) -> LentMemory {
        LentMemory { hand_back: Some(Box::new(hand_back)), foreign: true }
    }

    /// Memory of this crate's own, lent back to it (`hand_back` lets it go).
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn own(hand_back: impl FnOnce() + Send + 'static) -> LentMemory {
        LentMemory { hand_back: Some(Box::new(hand_back)), foreign: false }
    }

    /// Whether the race detector should see the buffer allocate and free it.
    pub(crate) fn foreign(&self) -> bool {
        self.foreign
    }

    /// Gives the memory back (once; later calls do nothing).
    pub(crate) fn hand_back(&mut self) {
        if let Some(hand_back) = self.hand_back.take() {
            hand_back();
        }
    }
}

impl Drop for LentMemory {
    /// Never handed back: the lender's memory, and what `hand_back` owns, are leaked.
    fn drop(&mut self) {
        std::mem::forget(self.hand_back.take());
    }
}

impl fmt::Debug for LentMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LentMemory").field("handed_back", &self.hand_back.is_none()).finish()
    }
}
