//! A `CurrentStream` names a scope of the thread that read it: it cannot be sent to another
//! thread, where that scope means nothing.
use cuda_stream::{Device, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let current = StreamRef::current(device);
    std::thread::spawn(move || current.is_current());
}
