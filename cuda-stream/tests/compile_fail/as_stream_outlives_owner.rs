//! `AsStream::as_stream` lends the stream for as long as its owner is borrowed, like
//! `AsFd::as_fd`: the loan cannot outlive the owner.
use cuda_stream::{AsStream, BorrowedStream, Device, Stream, StreamOptions};

fn lend() -> BorrowedStream<'static> {
    let stream = Stream::new(Device::new(0).unwrap(), StreamOptions::default()).unwrap();
    stream.as_stream()
}

fn main() {
    lend().query().unwrap();
}
