//! A conditional node's body is a graph that CUDA destroys with its parent graph: its builder
//! borrows the graph's builder, which borrows the graph, so it cannot outlive the graph.
use cuda_stream::{Device, Graph, GraphBuilder};

fn main() {
    let device = Device::new(0).unwrap();
    let body: GraphBuilder<'_> = {
        let mut graph = Graph::new(device).unwrap();
        let mut root = graph.builder();
        let condition = root.condition(Some(1)).unwrap();
        let (_, body) = root.add_while(&condition, &[]).unwrap();
        body
    };
    drop(body);
}
