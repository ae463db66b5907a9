//! A part of a pinned buffer cannot outlive the buffer.
use cuda_stream::{PinnedBuffer, PinnedSliceMut};

fn part() -> PinnedSliceMut<'static, u32> {
    let mut pinned = PinnedBuffer::<u32>::zeroed(16).unwrap();
    pinned.slice_mut(..8).unwrap()
}

fn main() {
    println!("{}", part().len());
}
