//! A capture into an existing graph keeps its mode's thread rule: `begin_capture_into(graph,
//! Global)` gives a `!Send` `Capture` (CUDA ends a Global capture only on the thread that began
//! it), though the graph it holds is `Send`.
use cuda_stream::capture::Global;
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let graph = stream.begin_capture(Global).unwrap().end().unwrap();
    let capture = stream.begin_capture_into(graph, Global).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || capture.end());
    });
}
