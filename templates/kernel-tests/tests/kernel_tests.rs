//! GPU tests of the kernel in `kernels/tags.cu`. Without a GPU they say that they skipped; with
//! `CUDA_STREAM_REQUIRE_GPU=1` a missing GPU fails them.

use cuda_stream::{Stream, StreamOptions, gpu_or_skip};
use kernel_tests::{TagLog, append_tag};
use std::time::Duration;

fn stream(device: cuda_stream::Device) -> Stream {
    Stream::new(device, StreamOptions::non_blocking()).unwrap()
}

#[test]
fn kernels_on_one_stream_run_in_the_order_enqueued() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let log = TagLog::new(32).unwrap();
    // Earlier kernels spin longer: out of order execution would show.
    for tag in 0..32 {
        append_tag(&stream, &log, tag, Duration::from_micros(u64::from(32 - tag) * 20)).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(log.tags(), (0..32).collect::<Vec<u32>>());
}

#[test]
fn query_is_false_while_a_kernel_runs() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let log = TagLog::new(1).unwrap();
    append_tag(&stream, &log, 7, Duration::from_millis(300)).unwrap();
    assert!(!stream.query().unwrap(), "the stream reports done while its kernel spins");
    stream.synchronize().unwrap();
    assert!(stream.query().unwrap());
    assert_eq!(log.tags(), [7]);
}

#[test]
fn wait_stream_orders_work_on_two_streams() {
    let device = gpu_or_skip!();
    let (first, second) = (stream(device), stream(device));
    let log = TagLog::new(2).unwrap();
    append_tag(&first, &log, 1, Duration::from_millis(100)).unwrap();
    second.wait_stream(&first).unwrap();
    // Without the wait this kernel, which does not spin, would append first.
    append_tag(&second, &log, 2, Duration::ZERO).unwrap();
    second.synchronize().unwrap();
    assert_eq!(log.tags(), [1, 2]);
}

#[test]
fn cuda_stream_build_makes_module_loading_eager_in_tests() {
    // Set before `main` by the constructor cuda-stream-build links into this package's tests.
    assert_eq!(std::env::var("CUDA_MODULE_LOADING").as_deref(), Ok("EAGER"));
}
