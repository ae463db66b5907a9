//! The `StreamRef` inside an owner cannot be reached mutably (no `DerefMut`), so it cannot be
//! swapped into another owner: a `BuiltinStream` holding an owned handle, with no lifetime,
//! while the `Stream` destroys CUDA's null stream.
use cuda_stream::{BuiltinStream, Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let owned = Stream::new(device, StreamOptions::default()).unwrap();
    let builtin = BuiltinStream::null(device);
    std::mem::swap(&mut *owned, &mut *builtin);
}
