//! A capture's graph memory moves between threads: a `CaptureBuffer` (its state is behind a
//! mutex; only the capture's calls reach its address) and a `GraphOutput` are `Send + Sync`, and
//! a buffer taken from an output with an `Arc<Stream>` home is `Send + Sync` as any buffer.
use cuda_stream::capture::Relaxed;
use cuda_stream::{CaptureBuffer, Device, DeviceBuffer, GraphOutput, Stream, StreamOptions};
use std::sync::Arc;

fn send_sync<T: Send + Sync>(_: &T) {}

fn share() {
    let device = Device::new(0).unwrap();
    let stream = Arc::new(Stream::new(device, StreamOptions::non_blocking()).unwrap());
    let mut capture = stream.begin_capture(Relaxed).unwrap();
    let block: CaptureBuffer<u32> = capture.alloc(&*stream, 4).unwrap();
    send_sync(&block);
    let output: GraphOutput<u32> = capture.keep(block).unwrap();
    send_sync(&output);
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&*stream).unwrap();
    let taken: DeviceBuffer<u32, Arc<Stream>> = output.take(Arc::clone(&stream)).unwrap();
    send_sync(&taken);
    std::thread::spawn(move || drop((taken, output)));
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn() = share;
}
