//! A `&StreamRef` borrowed from a `Stream` cannot outlive the `Stream`, which destroys the
//! handle when it drops.
use cuda_stream::{Device, Stream, StreamOptions, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let stream: &StreamRef = {
        let owned = Stream::new(device, StreamOptions::default()).unwrap();
        &owned
    };
    stream.query().unwrap();
}
