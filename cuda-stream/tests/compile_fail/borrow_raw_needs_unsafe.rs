//! `BorrowedStream::borrow_raw_on` (like `borrow_raw`) is `unsafe`: the caller promises the handle is live and that
//! its owner keeps it alive for the lifetime the caller picks.
use cuda_stream::{BorrowedStream, Device};

fn main() {
    let device = Device::new(0).unwrap();
    let _borrowed = BorrowedStream::borrow_raw_on(std::ptr::null_mut(), device);
}
