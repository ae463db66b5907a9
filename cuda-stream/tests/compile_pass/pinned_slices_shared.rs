//! The counterpart of compile_fail/pinned_slice_outlives_copy_borrow.rs: a `PinnedBuffer`'s
//! host slice is a shared borrow, as a `Vec`'s: two slices at once, through `&`, and from two
//! threads (only a copy into the buffer needs it alone).
use cuda_stream::{PinnedBuffer, Result};

fn read_twice(pinned: &PinnedBuffer<u32>) -> Result<u32> {
    let (first, second) = (pinned.as_slice()?, pinned.as_slice()?);
    let elsewhere = std::thread::scope(|scope| scope.spawn(|| pinned.as_slice().map(|slice| slice[0])).join().unwrap())?;
    Ok(first[0] + second[0] + elsewhere)
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(&PinnedBuffer<u32>) -> Result<u32> = read_twice;
}
