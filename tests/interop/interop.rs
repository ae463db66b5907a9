//! Interop on a GPU: a cuda-stream stream handed to cudarc and to C, and cudarc's and C's
//! streams borrowed by cuda-stream; the order of work is proven with our events and kernels.
//! `cudaStream_t` (runtime) and `CUstream` (driver, cudarc) are the same `CUstream_st*`.

use cuda_stream::capture::Global;
use cuda_stream::{BorrowedStream, Builtin, CaptureStatus, Device, Ownership, Stream, StreamOptions};
use cuda_stream_tests::{ForeignStream, MappedFlag, TagLog, gpu_or_skip, poll_until};
use cudarc::driver::{CudaContext, result, sys as driver};
use std::time::Duration;

const BYTES: usize = 1 << 20;

/// A device buffer allocated through cudarc's driver API, freed on drop.
struct DeviceBuffer(driver::CUdeviceptr);

impl DeviceBuffer {
    fn zeroed() -> DeviceBuffer {
        // SAFETY: plain allocation and fill of our own buffer.
        unsafe {
            let ptr = result::malloc_sync(BYTES).unwrap();
            result::memset_d8_sync(ptr, 0, BYTES).unwrap();
            DeviceBuffer(ptr)
        }
    }

    fn read(&self) -> Vec<u8> {
        let mut host = vec![0u8; BYTES];
        // SAFETY: `host` holds BYTES bytes; the buffer is live.
        unsafe { result::memcpy_dtoh_sync(&mut host, self.0) }.unwrap();
        host
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `zeroed`, freed once.
        let _ = unsafe { result::free_sync(self.0) };
    }
}

fn all(bytes: &[u8], value: u8) -> bool {
    bytes.iter().all(|b| *b == value)
}

#[test]
fn our_stream_carries_a_cudarc_memset_ordered_by_our_event() {
    let device = gpu_or_skip!();
    let context = CudaContext::new(0).unwrap();
    context.bind_to_thread().unwrap();
    let buffer = DeviceBuffer::zeroed();
    let ours = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let flag = MappedFlag::new().unwrap();
    cuda_stream_tests::wait_flag(&ours, &flag, Duration::from_secs(10)).unwrap();
    // SAFETY: our live stream, as the driver's handle type; the buffer outlives the work.
    unsafe { result::memset_d8_async(buffer.0, 7, BYTES, ours.as_raw().cast()) }.unwrap();
    let done = ours.record_event().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!done.query().unwrap(), "our event waits for our kernel and cudarc's memset");
    assert!(all(&buffer.read(), 0), "cudarc's memset waited behind our kernel");
    flag.set();
    done.synchronize().unwrap();
    assert!(all(&buffer.read(), 7));
}

#[test]
fn a_cudarc_stream_borrowed_by_us_orders_its_own_work_and_survives_our_drop() {
    let device = gpu_or_skip!();
    let context = CudaContext::new(0).unwrap();
    let theirs = context.new_stream().unwrap();
    let buffer = DeviceBuffer::zeroed();
    let flag = MappedFlag::new().unwrap();
    {
        // SAFETY: cudarc keeps its stream alive longer than this borrowed wrapper.
        let borrowed = unsafe { BorrowedStream::borrow_raw_on(theirs.cu_stream().cast(), device) }.unwrap();
        assert_eq!(borrowed.ownership(), Ownership::Borrowed);
        cuda_stream_tests::wait_flag(&borrowed, &flag, Duration::from_secs(10)).unwrap();
        // SAFETY: cudarc's own live stream; the buffer outlives the work.
        unsafe { result::memset_d8_async(buffer.0, 9, BYTES, theirs.cu_stream()) }.unwrap();
        let done = borrowed.record_event().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!done.query().unwrap());
        assert!(all(&buffer.read(), 0), "cudarc's memset waited behind our kernel on its stream");
        flag.set();
        done.synchronize().unwrap();
    }
    assert!(all(&buffer.read(), 9));
    // Our wrapper is gone; cudarc's stream is not.
    // SAFETY: as above.
    unsafe { result::memset_d8_async(buffer.0, 3, BYTES, theirs.cu_stream()) }.unwrap();
    theirs.synchronize().expect("cudarc's stream is still alive");
    assert!(all(&buffer.read(), 3));
}

#[test]
fn c_code_enqueues_on_our_stream_and_we_borrow_its_stream() {
    let device = gpu_or_skip!();
    let log = TagLog::new(8).unwrap();
    // Ours, handed to C.
    let ours = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    cuda_stream_tests::tag(&ours, &log, 1, Duration::from_millis(10)).unwrap();
    ForeignStream::c_tag(&ours.as_raw(), &log, 2).unwrap();
    ours.synchronize().unwrap();
    // C's, borrowed by us.
    let foreign = ForeignStream::create().unwrap();
    {
        // SAFETY: the C library keeps its stream until `destroy` below.
        let borrowed = unsafe { BorrowedStream::borrow_raw_on(foreign.raw(), device) }.unwrap();
        ForeignStream::c_tag(&foreign.raw(), &log, 3).unwrap();
        cuda_stream_tests::tag(&borrowed, &log, 4, Duration::ZERO).unwrap();
        borrowed.synchronize().unwrap();
    }
    foreign.destroy().unwrap();
    assert_eq!(log.tags(), vec![1, 2, 3, 4]);
}

#[test]
fn a_cudarc_stream_borrowed_from_cudarc_is_waited_on_by_ours() {
    let device = gpu_or_skip!();
    let context = CudaContext::new(0).unwrap();
    let theirs = context.new_stream().unwrap();
    let ours = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = TagLog::new(8).unwrap();
    let flag = MappedFlag::new().unwrap();
    // SAFETY: cudarc keeps its stream alive while it is borrowed; nobody captures it.
    let lent = unsafe { BorrowedStream::from_cudarc(&theirs) }.unwrap();
    assert_eq!(
        (lent.as_raw(), lent.device(), lent.ownership()),
        (theirs.cu_stream().cast(), device, Ownership::Borrowed)
    );
    cuda_stream_tests::wait_flag(&lent, &flag, Duration::from_secs(10)).unwrap();
    cuda_stream_tests::tag(&lent, &log, 1, Duration::ZERO).unwrap();
    ours.wait_stream(&lent).unwrap();
    cuda_stream_tests::tag(&ours, &log, 2, Duration::ZERO).unwrap();
    let early = poll_until(Duration::from_millis(100), || log.count() > 0);
    assert!(early.is_none(), "our stream ran before cudarc's: {:?}", log.tags());
    flag.set();
    ours.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
    // cudarc's default stream (the driver's handle 0) is the legacy stream in both our builds.
    let default = context.default_stream();
    // SAFETY: as above.
    let default = unsafe { BorrowedStream::from_cudarc(&default) }.unwrap();
    assert_eq!(default.ownership(), Ownership::Builtin(Builtin::Legacy));
}

#[test]
fn our_stream_lent_to_cudarc_is_ordered_by_cudarcs_own_event() {
    let device = gpu_or_skip!();
    let context = CudaContext::new(0).unwrap();
    // cudarc's first stream may synchronize the context: made before any kernel is pending.
    let theirs = context.new_stream().unwrap();
    let buffer = DeviceBuffer::zeroed();
    let ours = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let flag = MappedFlag::new().unwrap();
    // SAFETY: `ours` outlives `lent` and everything cudarc makes from it (dropped below first);
    // the work of both libraries is ordered by the events below.
    let lent = unsafe { ours.to_cudarc(&context) }.unwrap();
    assert_eq!(lent.cu_stream(), ours.as_raw().cast());
    cuda_stream_tests::wait_flag(&ours, &flag, Duration::from_secs(10)).unwrap();
    // SAFETY: the lent stream is live; the buffer outlives the work.
    unsafe { result::memset_d8_async(buffer.0, 5, BYTES, lent.cu_stream()) }.unwrap();
    let recorded = lent.record_event(None).unwrap();
    theirs.wait(&recorded).unwrap();
    // SAFETY: cudarc's live stream; the buffer outlives the work.
    unsafe { result::memset_d8_async(buffer.0, 6, BYTES, theirs.cu_stream()) }.unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(all(&buffer.read(), 0), "both memsets wait behind our kernel");
    flag.set();
    theirs.synchronize().unwrap();
    assert!(all(&buffer.read(), 6), "cudarc's event ordered its stream after ours");
    drop((recorded, lent));
    ours.synchronize().expect("lending never destroys our stream");
}

#[test]
fn a_foreign_handle_is_borrowed_on_its_own_device_without_breaking_its_capture() {
    let device = gpu_or_skip!();
    let foreign = ForeignStream::create().unwrap();
    {
        // SAFETY: the C library keeps its stream until `destroy` below.
        let borrowed = unsafe { BorrowedStream::borrow_raw(foreign.raw()) }.unwrap();
        assert_eq!((borrowed.device(), borrowed.ownership()), (device, Ownership::Borrowed));
        // SAFETY: as above.
        let named = unsafe { BorrowedStream::borrow_raw_on(foreign.raw(), device) }.unwrap();
        assert_eq!(named, borrowed);
        // SAFETY: handle 0 is CUDA's; it means the current device's null stream.
        let null = unsafe { BorrowedStream::borrow_raw(std::ptr::null_mut()) }.unwrap();
        assert_eq!((null.device(), null.ownership()), (Device::current().unwrap(), Ownership::Builtin(Builtin::Null)));
    }
    // Reading the device of a stream someone is capturing leaves the capture intact.
    let capturing = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let log = TagLog::new(8).unwrap();
    let capture = capturing.begin_capture(Global).unwrap();
    cuda_stream_tests::tag(&capturing, &log, 1, Duration::ZERO).unwrap();
    // SAFETY: `capturing` outlives the borrow.
    let borrowed = unsafe { BorrowedStream::borrow_raw(capturing.as_raw()) }.unwrap();
    assert_eq!(borrowed.device(), device);
    assert_eq!(capturing.capture_status().unwrap(), CaptureStatus::Active);
    cuda_stream_tests::tag(&capturing, &log, 2, Duration::ZERO).unwrap();
    let exec = capture.end().expect("the capture survived the device read").instantiate().unwrap();
    assert_eq!(log.count(), 0, "captured, not run");
    exec.launch(&capturing).unwrap();
    capturing.synchronize().unwrap();
    assert_eq!(log.tags(), vec![1, 2]);
    foreign.destroy().unwrap();
}

#[test]
fn a_stream_whose_capture_broke_is_still_borrowed_on_the_device_named_for_it() {
    let device = gpu_or_skip!();
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let capture = stream.begin_capture(Global).unwrap();
    // A raw query of a capturing stream breaks its capture (the crate's own query refuses).
    // SAFETY: a live stream.
    let code = unsafe { cuda_stream::sys::cudaStreamQuery(stream.as_raw()) };
    assert_ne!(code, cuda_stream::sys::cudaError::cudaSuccess);
    let _ = cuda_stream_tests::take_last_error();
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::Invalidated);
    // SAFETY: `stream` outlives both borrows.
    let unnamed = unsafe { BorrowedStream::borrow_raw(stream.as_raw()) };
    println!("borrow_raw of a stream whose capture broke: {unnamed:?}");
    assert!(unnamed.unwrap_err().cuda_code().is_some_and(cuda_stream::CudaCode::is_capture_error));
    // SAFETY: as above.
    let named = unsafe { BorrowedStream::borrow_raw_on(stream.as_raw(), device) }.unwrap();
    assert_eq!(named.device(), device);
    assert_eq!(named.capture_status().unwrap(), CaptureStatus::Invalidated);
    let ended = capture.end().unwrap_err();
    assert_eq!(ended.cuda_code().map(|code| code.name()), Some("cudaErrorStreamCaptureInvalidated"));
    stream.synchronize().expect("usable again once the broken capture ended");
}
