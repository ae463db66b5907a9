//! Two parts of one pinned buffer cannot live at once (each is exclusive, and copies track the
//! buffer's copies in flight through it), nor a part beside a host read of the buffer.
use cuda_stream::PinnedBuffer;

fn main() {
    let mut pinned = PinnedBuffer::<u32>::zeroed(16).unwrap();
    let low = pinned.slice_mut(..8).unwrap();
    let high = pinned.slice_mut(8..).unwrap();
    let all = pinned.as_slice().unwrap();
    println!("{} {} {}", low.len(), high.len(), all.len());
}
