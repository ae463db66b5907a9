//! A `PinnedBuffer`'s host slice borrows the buffer: no copy (which takes it mutably) can be enqueued into it
//! while the slice is alive (the copy would write under it).
use cuda_stream::{DeviceBuffer, Device, PinnedBuffer, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let buffer = DeviceBuffer::<u32, _>::zeroed(&stream, 16).unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(16).unwrap();
    let slice = pinned.as_slice().unwrap();
    buffer.copy_to_pinned(&stream, &mut pinned).unwrap();
    println!("{}", slice[0]);
}
