//! `GraphExec` is `Send` but not `Sync`: launches of one executable must be serialized, so
//! `&GraphExec` stays on one thread.
use cuda_stream::capture::Global;
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let exec = stream.begin_capture(Global).unwrap().end().unwrap().instantiate().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| exec.launch(&stream));
    });
}
