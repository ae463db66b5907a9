//! A `Capture<'_, Global>` is `!Send`: CUDA ends a Global capture only on the thread that began
//! it (from another it fails and the graph is lost).
use cuda_stream::capture::Global;
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let capture = stream.begin_capture(Global).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || capture.end());
    });
}
