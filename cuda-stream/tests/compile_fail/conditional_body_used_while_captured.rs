//! A capture into a body borrows the body's builder mutably: no node is added by hand while
//! CUDA captures into that graph.
use cuda_stream::capture::ThreadLocal;
use cuda_stream::{Device, Graph, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut graph = Graph::new(device).unwrap();
    let mut root = graph.builder();
    let condition = root.condition(Some(1)).unwrap();
    let (_, mut body) = root.add_if(&condition, &[]).unwrap();
    let filling = body.capture(&stream, ThreadLocal).unwrap();
    body.add_empty_node(&[]).unwrap();
    filling.end().unwrap();
}
