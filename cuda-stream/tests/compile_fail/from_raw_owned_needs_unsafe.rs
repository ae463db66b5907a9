//! `Stream::from_raw_owned` is `unsafe`: the caller promises nobody else destroys or uses the
//! handle after the new `Stream` destroys it.
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let handle = Stream::new(device, StreamOptions::default()).unwrap().into_raw();
    let _owned = Stream::from_raw_owned(handle, device).unwrap();
}
