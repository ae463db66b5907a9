//! A `DeviceBuffer` holding `&Stream` borrows its home stream: it cannot outlive the stream,
//! whose drop would leave the buffer's free with no stream to run on.
use cuda_stream::{DeviceBuffer, Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let buffer = {
        let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
        DeviceBuffer::<u32, _>::new(&stream, 16).unwrap()
    };
    buffer.to_vec().unwrap();
}
