//! The `&StreamRef` of a `StreamLease` cannot outlive the lease: once the lease drops, the pool
//! may hand the same stream to another holder, and a stream is never leased to two at once.
use cuda_stream::{Device, StreamOptions, StreamPool, StreamRef};

fn main() {
    let device = Device::new(0).unwrap();
    let pool = StreamPool::new(device, StreamOptions::non_blocking(), 1).unwrap();
    let stream: &StreamRef = {
        let lease = pool.acquire().unwrap();
        &lease
    };
    let _next_holder = pool.acquire().unwrap();
    stream.query().unwrap();
}
