//! The `&StreamRef` that `StreamRef::with_current` lends its closure cannot be stored outside
//! it: the current stream is only guaranteed alive while the closure runs.
use cuda_stream::{Device, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let mut smuggled: Option<&StreamRef> = None;
    StreamRef::with_current(device, |current| smuggled = Some(current));
    smuggled.unwrap().query().unwrap();
}
