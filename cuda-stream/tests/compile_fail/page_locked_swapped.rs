//! The page-locked memory behind a pinned buffer or a registered slice is out of reach: two
//! swapped would hand one owner's memory to the other (freed, unregistered, or of another
//! size).
use cuda_stream::{PageLockedMemory, PinnedBuffer, register_host};

fn main() {
    let mut pinned = PinnedBuffer::<u32>::zeroed(16).unwrap();
    let mut data = vec![0u32; 4096];
    register_host(&mut data, |registered| {
        std::mem::swap(registered.page_locked(), pinned.page_locked());
    })
    .unwrap();
}
