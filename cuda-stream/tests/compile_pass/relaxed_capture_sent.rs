//! The counterpart of compile_fail/capture_*_sent.rs: a `Capture<'_, Relaxed>` is `Send`, and
//! may be ended on another thread.
use cuda_stream::capture::Relaxed;
use cuda_stream::{Device, Graph, Result, Stream, StreamOptions};

fn end_elsewhere(device: Device) -> Result<Graph> {
    let stream = Stream::new(device, StreamOptions::non_blocking())?;
    let capture = stream.begin_capture(Relaxed)?;
    std::thread::scope(|s| s.spawn(move || capture.end()).join().unwrap())
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(Device) -> Result<Graph> = end_elsewhere;
}
