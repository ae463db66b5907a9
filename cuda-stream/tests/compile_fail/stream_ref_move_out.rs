//! A `StreamRef` cannot be moved out of the `Stream` that owns it: the only way to hold one is
//! by reference.
use cuda_stream::{Device, Stream, StreamOptions, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::default()).unwrap();
    let inner: StreamRef = *stream;
    inner.query().unwrap();
}
