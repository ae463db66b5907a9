//! A stream lent by a `CurrentStream` cannot escape the closure it is lent to: kept past it,
//! the loan could outlive the `as_current` scope, after which the stream may be destroyed.
use cuda_stream::{AsStream, BorrowedStream, Device, Stream, StreamOptions, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let mut current = None;
    let mut escaped: Option<BorrowedStream<'_>> = None;
    {
        let stream = Stream::new(device, StreamOptions::default()).unwrap();
        stream.as_current(|| {
            current = Some(StreamRef::current(device));
            current.as_ref().unwrap().with(|stream| escaped = Some(stream.as_stream())).unwrap();
        });
    }
    escaped.unwrap().query().unwrap();
}
