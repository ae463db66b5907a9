//! `DeviceGuard` is `!Send`: the current context belongs to the thread that made the guard, and
//! its drop restores that thread's previous context.
use cuda_stream::Device;

fn main() {
    let device = Device::new(0).unwrap();
    let guard = device.make_current().unwrap();
    std::thread::spawn(move || drop(guard));
}
