//! The memory graphs hold moves between threads: an `Arc<SharedPinned>` and an
//! `Arc<DeviceBuffer>` homed on an `Arc<Stream>` are `Send + Sync`, and so is the executable
//! that holds them (`Send`).
use cuda_stream::{Device, DeviceBuffer, Graph, GraphExec, PinnedBuffer, SharedPinned, Stream, StreamOptions};
use std::sync::Arc;

fn send_sync<T: Send + Sync>(_: &T) {}
fn send<T: Send>(_: &T) {}

fn share() {
    let device = Device::new(0).unwrap();
    let home = Arc::new(Stream::new(device, StreamOptions::non_blocking()).unwrap());
    let pinned = Arc::new(SharedPinned::new(PinnedBuffer::<u32>::zeroed(4).unwrap()));
    let buffer = Arc::new(DeviceBuffer::<u32, _>::zeroed(Arc::clone(&home), 4).unwrap());
    send_sync(&pinned);
    send_sync(&buffer);
    let mut graph = Graph::new(device).unwrap();
    graph.builder().add_copy_to_pinned(&pinned, .., &buffer, .., &[]).unwrap();
    let exec: GraphExec = graph.instantiate().unwrap();
    send(&exec);
    std::thread::spawn(move || {
        exec.launch(&*home).unwrap();
        drop(pinned.lock());
    });
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn() = share;
}
