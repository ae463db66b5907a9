//! Graph objects are not thread-safe (NVIDIA): a builder stays on its thread.
use cuda_stream::{Device, Graph};

fn main() {
    let device = Device::new(0).unwrap();
    let mut graph = Graph::new(device).unwrap();
    let mut root = graph.builder();
    std::thread::scope(|s| {
        s.spawn(move || root.add_empty_node(&[]).map(drop));
    });
}
