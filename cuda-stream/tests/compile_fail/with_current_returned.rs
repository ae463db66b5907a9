//! The `&StreamRef` that `StreamRef::with_current` lends its closure cannot be returned from it
//! either.
use cuda_stream::{Device, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let current = StreamRef::with_current(device, |current| current);
    current.query().unwrap();
}
