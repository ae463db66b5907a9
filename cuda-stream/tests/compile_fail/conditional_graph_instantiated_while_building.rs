//! While a body's builder lives, its graph is borrowed mutably: it cannot be instantiated (nor
//! moved, dropped or captured into) until the body is done.
use cuda_stream::{Device, Graph};

fn main() {
    let device = Device::new(0).unwrap();
    let mut graph = Graph::new(device).unwrap();
    let mut root = graph.builder();
    let condition = root.condition(Some(1)).unwrap();
    let (_, mut body) = root.add_if(&condition, &[]).unwrap();
    let exec = graph.instantiate().unwrap();
    body.add_empty_node(&[]).unwrap();
    drop(exec);
}
