//! A `DeviceBuffer` is `Send` only when what holds its home stream is: one holding an
//! `Rc<Stream>` stays on its thread (its drop would touch the `Rc` from another).
use cuda_stream::{DeviceBuffer, Device, Stream, StreamOptions};
use std::rc::Rc;

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Rc::new(Stream::new(device, StreamOptions::non_blocking()).unwrap());
    let buffer = DeviceBuffer::<u32, _>::new(Rc::clone(&stream), 16).unwrap();
    std::thread::spawn(move || drop(buffer));
}
