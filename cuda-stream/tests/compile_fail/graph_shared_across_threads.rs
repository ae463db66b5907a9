//! `Graph` is `Send` but not `Sync`: NVIDIA forbids concurrent access to one graph, even by
//! calls that look read-only such as `cudaGraphInstantiate`, so `&Graph` stays on one thread.
use cuda_stream::capture::Global;
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let graph = stream.begin_capture(Global).unwrap().end().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| graph.instantiate());
    });
}
