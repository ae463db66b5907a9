//! The crate docs' "bad input" table, row by row: each input gets its typed error, and no
//! stream, event or host-function closure leaks.

use cuda_stream::{
    BorrowedStream, Builtin, BuiltinStream, Device, Error, Event, EventFlags, Ownership, Priority, Stream,
    StreamOptions, StreamPool, capture, live_events, live_host_fns, live_streams,
};
use cuda_stream_tests::gpu_or_skip;
use std::sync::Mutex;

/// The live counts are process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `body` and asserts that the live stream, event and closure counts are unchanged after.
fn leaks_nothing(body: impl FnOnce()) {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let before = (live_streams(), live_events(), live_host_fns());
    body();
    assert_eq!((live_streams(), live_events(), live_host_fns()), before, "(streams, events, closures) leaked");
}

fn cuda_name(error: &Error) -> Option<&'static str> {
    error.cuda_code().map(|code| code.name())
}

#[test]
fn invalid_device_ordinals() {
    let _device = gpu_or_skip!();
    leaks_nothing(|| {
        let count = Device::count().unwrap();
        for ordinal in [-1, count, i32::MAX] {
            assert_eq!(Device::new(ordinal), Err(Error::InvalidDevice { ordinal, count }));
        }
    });
}

#[test]
fn priorities_outside_the_range_on_both_sides() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        let range = device.priority_range().unwrap();
        for requested in [range.most_urgent().value() - 1, range.least_urgent().value() + 1, i32::MIN, i32::MAX] {
            let options = StreamOptions::non_blocking().with_priority(Priority(requested));
            let error = Stream::new(device, options).unwrap_err();
            assert_eq!(error, Error::PriorityOutOfRange { requested, device: 0, range });
            assert!(matches!(StreamPool::new(device, options, 2), Err(Error::PriorityOutOfRange { .. })));
        }
    });
}

#[test]
fn elapsed_without_timing_never_recorded_and_not_yet_done() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
        let (timed, untimed, never) = (
            Event::new(device, EventFlags::timing()).unwrap(),
            Event::new(device, EventFlags::default()).unwrap(),
            Event::new(device, EventFlags::timing()).unwrap(),
        );
        stream.record(&timed).unwrap();
        stream.record(&untimed).unwrap();
        assert_eq!(untimed.elapsed(&timed), Err(Error::TimingDisabled));
        assert_eq!(never.elapsed(&timed), Err(Error::EventNotRecorded));
        cuda_stream_tests::spin(&stream, std::time::Duration::from_millis(50)).unwrap();
        let late = stream.record_event().unwrap();
        let end = Event::new(device, EventFlags::timing()).unwrap();
        stream.record(&end).unwrap();
        assert_eq!(end.elapsed(&timed), Ok(None), "not complete: None");
        stream.synchronize().unwrap();
        assert!(end.elapsed(&timed).unwrap().is_some());
        drop(late);
    });
}

#[test]
fn ipc_handles_need_the_interprocess_flag() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        let local = Event::new(device, EventFlags::default()).unwrap();
        assert_eq!(local.ipc_handle().unwrap_err(), Error::NotInterprocess);
        let both = Event::new(device, EventFlags { timing: true, interprocess: true, ..EventFlags::default() });
        assert_eq!(cuda_name(&both.unwrap_err()), Some("cudaErrorInvalidValue"));
    });
}

#[test]
fn special_handles_are_builtin_streams_never_owned() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        // SAFETY: the special handles are valid for every device.
        let null = unsafe { BorrowedStream::borrow_raw_on(std::ptr::null_mut(), device) }.unwrap();
        assert_eq!(null.ownership(), Ownership::Builtin(Builtin::Null));
        for special in [std::ptr::null_mut(), cuda_stream::sys::cudaStreamLegacy, cuda_stream::sys::cudaStreamPerThread]
        {
            // SAFETY: as above.
            let refused = unsafe { Stream::from_raw_owned(special, device) }.unwrap_err();
            assert_eq!(refused, Error::BuiltinNotOwnable { handle: special as usize });
        }
    });
}

#[test]
fn the_per_thread_stream_refuses_other_threads() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        let mine = BuiltinStream::per_thread(device);
        let theirs = std::thread::scope(|scope| scope.spawn(|| (mine.query(), mine.synchronize())).join().unwrap());
        assert_eq!(theirs, (Err(Error::WrongThread), Err(Error::WrongThread)));
    });
}

#[test]
fn capture_misuse() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        let legacy = BuiltinStream::legacy(device);
        assert!(matches!(legacy.begin_capture(capture::Global), Err(Error::CaptureMisuse(_))));
        let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
        let capture = stream.begin_capture(capture::ThreadLocal).unwrap();
        let refused = stream.launch_host_fn(|| ()).unwrap_err();
        assert!(matches!(refused, Error::CaptureMisuse(_)), "{refused}");
        let refused = stream.query().unwrap_err();
        assert!(matches!(refused, Error::CaptureMisuse(_)), "the crate refuses what CUDA would answer by invalidating");
        assert!(capture.end().is_ok(), "the capture survived both refusals");
        let capture = stream.begin_capture(capture::ThreadLocal).unwrap();
        // CUDA would answer cudaErrorIllegalState.
        let refused = stream.begin_capture(capture::ThreadLocal).map(drop).unwrap_err();
        assert!(matches!(refused, Error::CaptureMisuse(_)), "a second begin is refused before CUDA: {refused}");
        assert!(capture.end().is_ok(), "the capture survived the second begin");
        stream.synchronize().unwrap();
    });
}

#[test]
fn host_function_misuse() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        let _ = cuda_stream::take_host_fn_panics();
        let stream = std::sync::Arc::new(Stream::new(device, StreamOptions::non_blocking()).unwrap());
        let (send, receive) = std::sync::mpsc::channel();
        let inner = std::sync::Arc::clone(&stream);
        stream.launch_host_fn(move || send.send(inner.query()).unwrap()).unwrap();
        stream.launch_host_fn(|| panic!("bad input: a panicking host function")).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(receive.recv().unwrap(), Err(Error::InsideHostFn));
        assert_eq!(cuda_stream::take_host_fn_panics().len(), 1);
        cuda_stream_tests::empty(&*stream).unwrap();
        stream.synchronize().expect("the stream works after the panic");
    });
}

#[test]
fn an_exhausted_pool_refuses_instead_of_sharing() {
    let device = gpu_or_skip!();
    leaks_nothing(|| {
        let pool = StreamPool::new(device, StreamOptions::non_blocking(), 1).unwrap();
        let held = pool.acquire().unwrap();
        assert_eq!(pool.acquire().unwrap_err(), Error::PoolExhausted { capacity: 1 });
        drop(held);
        assert!(pool.acquire().is_ok());
        let too_large = StreamPool::new(device, StreamOptions::non_blocking(), StreamPool::MAX_CAPACITY + 1);
        let max = StreamPool::MAX_CAPACITY;
        assert_eq!(too_large.unwrap_err(), Error::PoolTooLarge { capacity: max + 1, max });
    });
}
