//! Once its builders are gone, a graph with conditional nodes is a `Graph` like any other: it
//! may move to another thread and be instantiated there; a condition's handle and the nodes
//! are plain values that may go anywhere.
use cuda_stream::{ConditionHandle, Device, GraphExec, GraphNode, Result};

fn build_here_run_elsewhere(device: Device) -> Result<GraphExec> {
    let mut graph = cuda_stream::Graph::new(device)?;
    let (node, handle): (GraphNode, ConditionHandle) = {
        let mut root = graph.builder();
        let condition = root.condition(Some(1))?;
        let (node, mut body) = root.add_while(&condition, &[])?;
        body.add_empty_node(&[])?;
        (node, condition.handle())
    };
    std::thread::spawn(move || {
        let _ = (node, handle);
        graph.instantiate()
    })
    .join()
    .unwrap()
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(Device) -> Result<GraphExec> = build_here_run_elsewhere;
}
