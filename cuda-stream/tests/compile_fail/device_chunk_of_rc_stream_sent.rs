//! A chunk of a buffer whose home is an `Rc<Stream>` stays on its thread: the `Rc` it shares
//! with the buffer is not thread-safe.
use cuda_stream::{Device, DeviceBuffer, Stream, StreamOptions};
use std::rc::Rc;

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Rc::new(Stream::new(device, StreamOptions::non_blocking()).unwrap());
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(Rc::clone(&stream), 16).unwrap();
    let chunk = buffer.chunks_mut(4).unwrap().next().unwrap();
    std::thread::scope(|scope| {
        scope.spawn(move || chunk.len());
    });
}
