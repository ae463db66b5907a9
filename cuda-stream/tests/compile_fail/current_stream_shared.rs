//! A `CurrentStream` cannot be shared with another thread either (`!Sync`): on that thread its
//! scope number would be checked against the wrong thread's scopes.
use cuda_stream::{Device, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let current = StreamRef::current(device);
    std::thread::scope(|scope| {
        scope.spawn(|| current.is_current());
    });
}
