//! Every function that takes a stream takes anything that is one: our stream types, references,
//! `Box`, `Rc`, `Arc`, and a user's own type that implements `AsStream`. Events are `Eq + Hash`.
use cuda_stream::{AsStream, BorrowedStream, BuiltinStream, Device, Event, EventFlags, Stream, StreamOptions};
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;

struct Worker {
    stream: Stream,
}

impl AsStream for Worker {
    fn as_stream(&self) -> BorrowedStream<'_> {
        self.stream.as_stream()
    }
}

fn use_everywhere() {
    let device = Device::new(0).unwrap();
    let stream = Stream::new(device, StreamOptions::default()).unwrap();
    let worker = Worker { stream: Stream::new(device, StreamOptions::default()).unwrap() };
    let shared = Arc::new(Stream::new(device, StreamOptions::default()).unwrap());
    stream.wait_stream(&worker).unwrap();
    stream.wait_stream(&shared).unwrap();
    stream.wait_stream(Arc::clone(&shared)).unwrap();
    stream.wait_stream(Box::new(BuiltinStream::legacy(device))).unwrap();
    stream.wait_stream(Rc::new(worker)).unwrap();
    stream.wait_stream(&*stream).unwrap();
    let event = Event::new(device, EventFlags::default()).unwrap();
    event.record(&shared).unwrap();
    let events: HashSet<&Event> = [&event, &event].into_iter().collect();
    assert_eq!(events.len(), 1);
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn() = use_everywhere;
}
