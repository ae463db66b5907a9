//! Interop: a cuda-stream stream used by cudarc and by C code, and their streams borrowed by
//! cuda-stream. The handles are the same `CUstream_st*` in the runtime and driver APIs.
//!
//! From Python, `torch.cuda.current_stream().cuda_stream` (or CuPy's `stream.ptr`, or any
//! object's `__cuda_stream__()` tuple) is that pointer as an integer: pass it to a Rust extension
//! and wrap it with `unsafe { BorrowedStream::borrow_raw(ptr as cudaStream_t) }?` (its device is
//! read from the handle; borrowed: PyTorch keeps owning it); hand ours back as `stream.as_raw() as usize` into
//! `torch.cuda.ExternalStream(ptr)`.
//!
//! The C library is `examples/kernels/interop.cu`: it makes streams of its own and enqueues a
//! kernel on any stream it is handed. A crate of its own: this file as `src/main.rs`, that file
//! in `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) and `cudarc` (0.19, with
//! its features `driver`, `std`, `dynamic-loading` and a CUDA version, `cuda-13000`) as
//! dependencies and `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{BorrowedStream, LaunchConfig, MappedWords, Stream, StreamOptions, check, sys};
use cudarc::driver::CudaContext;
use std::sync::atomic::Ordering;

cuda_stream::kernel! {
    /// Spins for `spin_ns` nanoseconds, then appends `tag` to `log`: `log[0]` counts the tags,
    /// `log[1..=capacity]` holds them in the order the GPU ran the kernels.
    static TAG = fn interop_tag(log: *mut u32, capacity: u32, tag: u32, spin_ns: u64);
}

// The C library's functions (`examples/kernels/interop.cu`).
unsafe extern "C" {
    /// A new non-blocking stream of the current device, the library's own.
    fn interop_c_stream_create(stream: *mut sys::cudaStream_t) -> sys::cudaError_t;
    /// Destroys a stream the library created.
    fn interop_c_stream_destroy(stream: sys::cudaStream_t) -> sys::cudaError_t;
    /// Enqueues the tag kernel (no spin) on `stream`, any stream of the current device.
    fn interop_c_tag(stream: sys::cudaStream_t, log: *mut u32, capacity: u32, tag: u32) -> sys::cudaError_t;
}

const CAPACITY: u32 = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("interop") else { return Ok(()) };
    let log = MappedWords::<u32>::new(1 + CAPACITY as usize)?;
    let one = LaunchConfig::new(1, 1);

    // cudarc's stream, borrowed: our kernels and events on it, cudarc still owns it.
    let context = CudaContext::new(0)?;
    let theirs = context.new_stream()?;
    let done = {
        // SAFETY: cudarc keeps the stream alive for this whole block.
        let borrowed = unsafe { BorrowedStream::borrow_raw_on(theirs.cu_stream().cast(), device) }?;
        // SAFETY: `log` is mapped memory of 1 + CAPACITY words, alive until the end of `main`,
        // after every kernel here has been waited for.
        unsafe { TAG.launch(&borrowed, &one, (log.as_ptr(), CAPACITY, 1, 5_000_000))? };
        borrowed.record_event()?
    };
    theirs.synchronize()?;
    println!("cudarc stream: our kernel ran on it, our event complete: {}", done.query()?);

    // Ours, handed to a C library that enqueues on it.
    let ours = Stream::new(device, StreamOptions::non_blocking())?;
    // SAFETY: a live stream of device 0, the current device; `log` as above.
    check(unsafe { interop_c_tag(ours.as_raw(), log.as_ptr(), CAPACITY, 2) }, "interop_c_tag")?;
    ours.synchronize()?;

    // A C library's stream, borrowed.
    let mut foreign: sys::cudaStream_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    check(unsafe { interop_c_stream_create(&mut foreign) }, "interop_c_stream_create")?;
    {
        // SAFETY: the C library owns the stream until it destroys it, after this block.
        let c_stream = unsafe { BorrowedStream::borrow_raw_on(foreign, device) }?;
        // SAFETY: `log` as above.
        unsafe { TAG.launch(&c_stream, &one, (log.as_ptr(), CAPACITY, 3, 0))? };
        c_stream.synchronize()?;
    }
    // SAFETY: the C library created the stream; nothing uses it after this.
    check(unsafe { interop_c_stream_destroy(foreign) }, "interop_c_stream_destroy")?;
    let count = log.words()[0].load(Ordering::Acquire).min(CAPACITY) as usize;
    let tags: Vec<u32> = log.words()[1..=count].iter().map(|tag| tag.load(Ordering::Acquire)).collect();
    println!("tags in GPU order: {tags:?} (cudarc's stream, ours via C, C's via us)");
    Ok(())
}
