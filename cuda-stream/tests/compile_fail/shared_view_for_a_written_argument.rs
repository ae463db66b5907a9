//! A shared view is a read: it cannot be a kernel's `T*` argument, which the kernel writes.
use cuda_stream::{Device, DeviceBuffer, LaunchConfig, Stream, StreamOptions};

cuda_stream::kernel! {
    static FILL = fn fill(out: *mut u32, n: u32);
}

fn main() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let buffer = DeviceBuffer::<u32, _>::zeroed(&stream, 16).unwrap();
    let view = buffer.slice(..).unwrap();
    // SAFETY: not reached; the argument is refused at compile time.
    unsafe { FILL.launch(&stream, &LaunchConfig::new(1, 16), (&view, 16u32)) }.unwrap();
}
