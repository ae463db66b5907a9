//! The counterpart of compile_fail/capture_into_global_sent.rs: a Relaxed capture into an
//! existing graph is `Send` (and `Sync`, as every `Capture<'_, Relaxed>`), and may be ended on
//! another thread, which gets the graph back.
use cuda_stream::capture::Relaxed;
use cuda_stream::{Capture, Device, Graph, Result, Stream, StreamOptions};

fn assert_sync<T: Sync>(_: &T) {}

fn end_elsewhere(device: Device) -> Result<Graph> {
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let graph = stream.begin_capture(Relaxed)?.end()?;
    let capture: Capture<'_, Relaxed> = stream.begin_capture_into(graph, Relaxed)?;
    assert_sync(&capture);
    std::thread::scope(|s| s.spawn(move || capture.end()).join().unwrap())
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(Device) -> Result<Graph> = end_elsewhere;
}
