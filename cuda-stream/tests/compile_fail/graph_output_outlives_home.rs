//! A buffer taken from a graph's output borrows its home stream: it cannot outlive it (its drop
//! frees the memory there).
use cuda_stream::capture::ThreadLocal;
use cuda_stream::{Device, Stream, StreamOptions};

fn main() {
    let device = Device::new(0).unwrap();
    let launching = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut capture = launching.begin_capture(ThreadLocal).unwrap();
    let block = capture.alloc::<u32>(&launching, 4).unwrap();
    let output = capture.keep(block).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&launching).unwrap();
    let taken = {
        let home = Stream::new(device, StreamOptions::non_blocking()).unwrap();
        output.take(&home).unwrap()
    };
    drop(taken);
}
