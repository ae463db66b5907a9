//! The counterpart of compile_fail/graph*_shared_across_threads.rs: `Graph` and `GraphExec`
//! are `Send`, so each may move to another thread (only sharing them is refused).
use cuda_stream::capture::Global;
use cuda_stream::{Device, GraphExec, Result, Stream, StreamOptions};

fn instantiate_elsewhere(device: Device) -> Result<GraphExec> {
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let graph = stream.begin_capture(Global)?.end()?;
    std::thread::spawn(move || graph.instantiate()).join().unwrap()
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(Device) -> Result<GraphExec> = instantiate_elsewhere;
}
