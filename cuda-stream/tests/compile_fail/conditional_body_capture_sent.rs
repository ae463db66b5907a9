//! A capture into a conditional body stays on the thread of the builder it fills, even in
//! Relaxed mode (whose plain captures may move).
use cuda_stream::capture::Relaxed;
use cuda_stream::{Device, Graph, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut graph = Graph::new(device).unwrap();
    let mut root = graph.builder();
    let condition = root.condition(Some(1)).unwrap();
    let (_, mut body) = root.add_while(&condition, &[]).unwrap();
    let filling = body.capture(&stream, Relaxed).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || filling.end());
    });
}
