//! A `StreamLease` borrows its `StreamPool`: it cannot outlive the pool, whose drop destroys
//! the leased stream.
use cuda_stream::{Device, StreamOptions, StreamPool};

fn main() {
    let device = Device::new(0).unwrap();
    let lease = {
        let pool = StreamPool::new(device, StreamOptions::non_blocking(), 1).unwrap();
        pool.acquire().unwrap()
    };
    lease.query().unwrap();
}
