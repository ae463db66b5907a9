//! GPU tests of the kernel in `kernels/tags.cu`. Without a GPU they say that they skipped; with
//! `CUDA_STREAM_REQUIRE_GPU=1` a missing GPU fails them.

use cuda_stream::{DeviceBuffer, PinnedBuffer, Stream, StreamOptions, gpu_or_skip};
use kernel_tests::{TagLog, append_tag, saxpy};
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
    // A second: the query comes long before the end, also on a loaded host (seen late once
    // after 300 ms, under compute-sanitizer beside 11 other sanitized processes).
    append_tag(&stream, &log, 7, Duration::from_secs(1)).unwrap();
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

#[test]
fn saxpy_computes_a_x_plus_y_in_device_buffers() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let n = 100_000;
    let x_values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut x = DeviceBuffer::from_slice(&stream, &x_values).unwrap();
    let mut y = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n]).unwrap();
    saxpy(2.0, &mut x, &mut y).unwrap();
    let y_values = y.to_vec().unwrap();
    assert!(y_values.iter().enumerate().all(|(i, &value)| value == 2.0 * i as f32 + 1.0));
}

#[test]
fn saxpy_reads_x_from_another_stream_after_its_writes() {
    let device = gpu_or_skip!();
    let (x_home, y_home) = (stream(device), stream(device));
    let mut x = DeviceBuffer::<f32, _>::zeroed(&x_home, 1024).unwrap();
    // A slow kernel on x's stream, then x's new values there, copied asynchronously from
    // pinned memory: saxpy on y's stream must see them.
    let log = TagLog::new(1).unwrap();
    append_tag(&x_home, &log, 1, Duration::from_millis(100)).unwrap();
    let mut threes = PinnedBuffer::from_slice(&[3.0f32; 1024]).unwrap();
    x.copy_from_pinned(&x_home, &mut threes).unwrap();
    let mut y = DeviceBuffer::<f32, _>::zeroed(&y_home, 1024).unwrap();
    saxpy(1.0, &mut x, &mut y).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![3.0; 1024]);
}

#[test]
fn the_build_says_which_architectures_the_kernels_are_for() {
    // Set by cuda-stream-build: SASS (`sm_*`) and PTX (`compute_*`) targets, e.g. `sm_80,compute_80`.
    let archs = env!("CUDA_STREAM_KERNEL_ARCHS");
    assert!(
        !archs.is_empty() && archs.split(',').all(|arch| arch.starts_with("sm_") || arch.starts_with("compute_")),
        "{archs}"
    );
}
