// A buffer handed to Python lives as long as Python wants: its home stream must too. A buffer
// whose home is a borrowed `&Stream` cannot be exported.
use cuda_stream::python::ExportedBuffer;
use cuda_stream::{Device, DeviceBuffer, Stream, StreamOptions};

fn main() {
    let stream = Stream::new(Device::new(0).unwrap(), StreamOptions::non_blocking()).unwrap();
    let buffer = DeviceBuffer::<f32, _>::new(&stream, 4).unwrap();
    let _exported = ExportedBuffer::new(buffer);
}
