//! A chunk of a buffer cannot outlive the buffer (its drop frees the memory the chunk names).
use cuda_stream::{Device, DeviceBuffer, DeviceSliceMut, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let chunk: DeviceSliceMut<'_, u32, &Stream> = {
        let mut buffer = DeviceBuffer::<u32, _>::zeroed(&stream, 16).unwrap();
        buffer.chunks_mut(4).unwrap().next().unwrap()
    };
    println!("{}", chunk.len());
}
