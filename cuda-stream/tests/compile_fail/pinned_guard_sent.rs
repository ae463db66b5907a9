//! A `SharedPinned`'s guard stays on the thread that locked it (a `MutexGuard` inside): the host
//! access it gives is that thread's.
use cuda_stream::{PinnedBuffer, SharedPinned};

fn main() {
    let shared = SharedPinned::new(PinnedBuffer::<u32>::zeroed(4).unwrap());
    let guard = shared.lock();
    std::thread::scope(|s| {
        s.spawn(move || drop(guard));
    });
}
