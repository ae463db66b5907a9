//! `StreamRef` is `Sync`: a `&StreamRef` borrowed from a `Stream` may be shared with scoped
//! threads, which end before the `Stream` drops.
use cuda_stream::{Device, Result, Stream, StreamOptions, StreamRef};

fn query_elsewhere(device: Device) -> Result<bool> {
    let owned = Stream::new(device, StreamOptions::non_blocking())?;
    let stream: &StreamRef = &owned;
    std::thread::scope(|s| s.spawn(|| stream.query()).join().unwrap())
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(Device) -> Result<bool> = query_elsewhere;
}
