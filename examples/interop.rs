//! Interop: a cuda-stream stream used by cudarc and by C code, and their streams borrowed by
//! cuda-stream. The handles are the same `CUstream_st*` in the runtime and driver APIs.
//!
//! From Python, `torch.cuda.current_stream().cuda_stream` (or CuPy's `stream.ptr`, or any
//! object's `__cuda_stream__()` tuple) is that pointer as an integer: pass it to a Rust extension
//! and wrap it with `unsafe { BorrowedStream::borrow_raw(ptr as cudaStream_t) }?` (its device is
//! read from the handle; borrowed: PyTorch keeps owning it); hand ours back as `stream.as_raw() as usize` into
//! `torch.cuda.ExternalStream(ptr)`.

use cuda_stream::{BorrowedStream, Stream, StreamOptions};
use cuda_stream_tests::{ForeignStream, TagLog};
use cudarc::driver::CudaContext;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(device) = cuda_stream_tests::gpu::example_device("interop") else { return Ok(()) };
    let log = TagLog::new(8)?;

    // cudarc's stream, borrowed: our kernels and events on it, cudarc still owns it.
    let context = CudaContext::new(0)?;
    let theirs = context.new_stream()?;
    let done = {
        // SAFETY: cudarc keeps the stream alive for this whole block.
        let borrowed = unsafe { BorrowedStream::borrow_raw_on(theirs.cu_stream().cast(), device) }?;
        cuda_stream_tests::tag(&borrowed, &log, 1, Duration::from_millis(5))?;
        borrowed.record_event()?
    };
    theirs.synchronize()?;
    println!("cudarc stream: our kernel ran on it, our event complete: {}", done.query()?);

    // Ours, handed to a C library that enqueues on it.
    let ours = Stream::new(device, StreamOptions::non_blocking())?;
    ForeignStream::c_tag(&ours.as_raw(), &log, 2)?;
    ours.synchronize()?;

    // A C library's stream, borrowed.
    let foreign = ForeignStream::create()?;
    {
        // SAFETY: the C library owns the stream until `destroy`, after this block.
        let c_stream = unsafe { BorrowedStream::borrow_raw_on(foreign.raw(), device) }?;
        cuda_stream_tests::tag(&c_stream, &log, 3, Duration::ZERO)?;
        c_stream.synchronize()?;
    }
    foreign.destroy()?;
    println!("tags in GPU order: {:?} (cudarc's stream, ours via C, C's via us)", log.tags());
    Ok(())
}
