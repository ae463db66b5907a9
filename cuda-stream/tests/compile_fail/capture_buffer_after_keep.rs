//! A capture buffer given to `Capture::keep` is the output's now: the capture's calls cannot use
//! it again (nor free it, which would free the graph's output in the graph).
use cuda_stream::capture::ThreadLocal;
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut capture = stream.begin_capture(ThreadLocal).unwrap();
    let mut block = capture.alloc::<u32>(&stream, 4).unwrap();
    let _output = capture.keep(block).unwrap();
    capture.free(&stream, &mut block).unwrap();
}
