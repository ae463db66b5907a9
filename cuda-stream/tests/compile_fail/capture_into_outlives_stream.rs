//! A capture into an existing graph borrows its stream like any capture: it cannot outlive it.
use cuda_stream::capture::Relaxed;
use cuda_stream::{Capture, Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let graph = {
        let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
        stream.begin_capture(Relaxed).unwrap().end().unwrap()
    };
    let capture: Capture<'_, Relaxed> = {
        let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
        stream.begin_capture_into(graph, Relaxed).unwrap()
    };
    drop(capture);
}
