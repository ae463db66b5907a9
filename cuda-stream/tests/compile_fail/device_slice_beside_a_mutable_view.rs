//! A shared view and an exclusive view of one buffer cannot live at once.
use cuda_stream::{Device, DeviceBuffer, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&stream, 16).unwrap();
    let shared = buffer.slice(..).unwrap();
    let mut exclusive = buffer.slice_mut(8..).unwrap();
    exclusive.copy_from_slice(&stream, &[1; 8]).unwrap();
    println!("{}", shared.len());
}
