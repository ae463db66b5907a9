//! An exclusive view borrows its buffer mutably: the buffer cannot be used whole (a fill here)
//! while the view lives, or the two would write the same elements unordered by the types.
use cuda_stream::{Device, DeviceBuffer, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&stream, 16).unwrap();
    let mut view = buffer.slice_mut(0..8).unwrap();
    buffer.fill_bytes(&stream, 0).unwrap();
    view.copy_from_slice(&stream, &[1; 8]).unwrap();
}
