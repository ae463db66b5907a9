//! A `StreamRef` cannot be cloned out of the `Stream` that owns it: a copy by value would hold
//! the handle with neither a lifetime nor an owner.
use cuda_stream::{Device, Stream, StreamOptions, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::default()).unwrap();
    let copy: StreamRef = (*stream).clone();
    drop(stream);
    copy.query().unwrap();
}
