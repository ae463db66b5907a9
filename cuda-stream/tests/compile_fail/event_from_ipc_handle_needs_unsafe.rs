//! `Event::from_ipc_handle` is `unsafe`: nothing in this process can tell whether the exporting
//! process keeps the event alive.
use cuda_stream::{Device, Event, EventFlags};

fn main() {
    let device = Device::new(0).unwrap();
    let flags = EventFlags { interprocess: true, ..EventFlags::default() };
    let handle = Event::new(device, flags).unwrap().ipc_handle().unwrap();
    let _imported = Event::from_ipc_handle(device, handle).unwrap();
}
