//! A `BuiltinStream` has no lifetime and is `Send`: it may move to another thread (where the
//! per-thread stream answers `Error::WrongThread` at run time, not at compile time).
use cuda_stream::{BuiltinStream, Device, Result};

fn query_elsewhere(device: Device) -> Result<bool> {
    let stream = BuiltinStream::legacy(device);
    std::thread::spawn(move || stream.query()).join().unwrap()
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(Device) -> Result<bool> = query_elsewhere;
}
