//! A `Capture` borrows the stream it captures: it cannot outlive it.
use cuda_stream::capture::Relaxed;
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let capture = {
        let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
        stream.begin_capture(Relaxed).unwrap()
    };
    capture.end().unwrap();
}
