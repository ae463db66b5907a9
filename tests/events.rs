//! Events on a GPU: timing, the errors of misuse, and sharing with another process. Also the
//! sticky-error fact, in a child process.

use cuda_stream::{Device, Error, Event, EventFlags, Stream, StreamOptions};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{LONG_SPIN, MappedFlag, gpu_or_skip, spawn_child_test};
use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

#[test]
fn elapsed_measures_the_kernel_between_two_timing_events() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let (start, end) =
        (Event::new(device, EventFlags::timing()).unwrap(), Event::new(device, EventFlags::timing()).unwrap());
    stream.record(&start).unwrap();
    cuda_stream_tests::spin(&stream, LONG_SPIN).unwrap();
    stream.record(&end).unwrap();
    assert_eq!(end.elapsed(&start), Ok(None), "not complete yet: None, not an error");
    end.synchronize().unwrap();
    let elapsed = end.elapsed(&start).unwrap().unwrap();
    assert!(elapsed >= LONG_SPIN - Duration::from_millis(1) && elapsed < LONG_SPIN * 3, "{elapsed:?}");
}

#[test]
fn elapsed_refuses_events_without_timing_or_never_recorded() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let timed = Event::new(device, EventFlags::timing()).unwrap();
    let untimed = Event::new(device, EventFlags::default()).unwrap();
    let never = Event::new(device, EventFlags::timing()).unwrap();
    stream.record(&timed).unwrap();
    stream.record(&untimed).unwrap();
    assert_eq!(timed.elapsed(&untimed), Err(Error::TimingDisabled));
    assert_eq!(untimed.elapsed(&timed), Err(Error::TimingDisabled));
    assert_eq!(never.elapsed(&timed), Err(Error::EventNotRecorded));
    assert_eq!(timed.elapsed(&never), Err(Error::EventNotRecorded));
    stream.synchronize().unwrap();
    assert_eq!(timed.elapsed(&timed).unwrap(), Some(Duration::ZERO));
}

#[test]
fn an_ipc_handle_needs_the_interprocess_flag() {
    let device = gpu_or_skip!();
    let local = Event::new(device, EventFlags::timing()).unwrap();
    assert_eq!(local.ipc_handle().unwrap_err(), Error::NotInterprocess);
    // CUDA itself refuses interprocess with timing: a typed CUDA error, nothing leaks.
    let both = Event::new(device, EventFlags { timing: true, interprocess: true, ..EventFlags::default() });
    assert_eq!(both.unwrap_err().cuda_code().map(|c| c.name()), Some("cudaErrorInvalidValue"));
}

const IPC_HANDLE: &str = "CUDA_STREAM_TEST_IPC_HANDLE";

#[test]
fn an_event_exported_over_ipc_is_waited_on_in_another_process() {
    let device = gpu_or_skip!();
    let stream = stream(device);
    let event = Event::new(device, EventFlags { interprocess: true, ..EventFlags::default() }).unwrap();
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&stream, &flag, Duration::from_secs(20)).unwrap();
    stream.record(&event).unwrap();
    let handle = event.ipc_handle().unwrap();
    let hex: String = handle.reserved.iter().map(|byte| format!("{:02x}", *byte as u8)).collect();
    let mut child = spawn_child_test("ipc_child", &[(IPC_HANDLE, hex)]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines
        .by_ref()
        .map(Result::unwrap)
        .find_map(|line| line.find("ipc:").map(|at| line[at..].to_string()))
        .expect("the child reports");
    assert_eq!(first, "ipc: opened, pending", "the child saw the event before the kernel ended");
    flag.set();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "child failed: {rest:?} {stderr}");
    assert!(rest.iter().any(|line| line.contains("ipc: complete")), "{rest:?}");
}

#[test]
#[ignore = "child process of an_event_exported_over_ipc_is_waited_on_in_another_process"]
fn ipc_child() {
    let hex = std::env::var(IPC_HANDLE).expect("started by the parent test");
    let mut handle = cuda_stream::sys::cudaIpcEventHandle_t::default();
    for (i, byte) in handle.reserved.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap() as std::ffi::c_char;
    }
    let device = Device::new(0).unwrap();
    // SAFETY: the parent keeps the event alive until this child reports back and exits.
    let event = unsafe { Event::from_ipc_handle(device, handle) }.unwrap();
    assert!(!event.query().unwrap(), "the parent's kernel waits for its flag");
    println!("ipc: opened, pending");
    std::io::stdout().flush().unwrap();
    // A stream of this process waits on the other process's event.
    let stream = stream(device);
    stream.wait_event(&event).unwrap();
    stream.synchronize().unwrap();
    assert!(event.query().unwrap());
    println!("ipc: complete");
}

#[test]
fn a_sticky_error_poisons_the_process_and_is_reported_typed() {
    let _device = gpu_or_skip!();
    cuda_stream_tests::faulting_child_test_prints(
        "sticky_child",
        &[
            "sticky: synchronize: cudaStreamSynchronize failed: cudaErrorIllegalAddress (700)",
            "sticky: is_sticky true",
            "sticky: later create: cudaStreamCreateWithPriority failed: cudaErrorIllegalAddress (700)",
            "sticky: drops done",
        ],
    );
}

#[test]
#[ignore = "child process of a_sticky_error_poisons_the_process_and_is_reported_typed"]
fn sticky_child() {
    let device = Device::new(0).unwrap();
    let faulty = stream(device);
    let bystander = stream(device);
    let event = faulty.record_event().unwrap();
    cuda_stream_tests::fault(&faulty).unwrap();
    let error = faulty.synchronize().unwrap_err();
    println!("sticky: synchronize: {error}");
    println!("sticky: is_sticky {}", error.is_sticky());
    let later = Stream::new(device, StreamOptions::default()).unwrap_err();
    println!("sticky: later create: {later}");
    assert_eq!(later.cuda_code(), error.cuda_code());
    assert_eq!(bystander.query().unwrap_err().cuda_code(), error.cuda_code());
    drop((faulty, bystander, event));
    println!("sticky: drops done");
}
