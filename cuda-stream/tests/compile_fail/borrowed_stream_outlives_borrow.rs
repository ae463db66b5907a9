//! A `BorrowedStream<'a>` keeps the lifetime it was given, through `clone` too: one tied to a
//! `Stream` cannot outlive that `Stream`.
use cuda_stream::{BorrowedStream, Device, Stream, StreamOptions};

fn borrow(stream: &Stream) -> BorrowedStream<'_> {
    // SAFETY: `stream` owns the handle and, by this signature, outlives the borrow.
    unsafe { BorrowedStream::borrow_raw(stream.as_raw()) }.unwrap()
}

fn main() {
    let device = Device::new(0).unwrap();
    let copy = {
        let stream = Stream::new(device, StreamOptions::default()).unwrap();
        let borrowed = borrow(&stream);
        borrowed.clone()
    };
    copy.query().unwrap();
}
