//! Overlapping copies and kernels on several streams: each of 4 streams copies its chunk to the
//! GPU, runs a kernel on it, and copies it back; the printed timeline (from timing events) shows
//! the streams' copies and kernels running side by side.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/overlap.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{Event, EventFlags, LaunchConfig, Stream, StreamOptions, check, sys};
use std::ffi::c_void;

cuda_stream::kernel! {
    /// Each thread spins for `ns` nanoseconds: the work on a chunk.
    static SPIN = fn overlap_spin(ns: u64);
}

const STREAMS: usize = 4;
const CHUNK: usize = 64 << 20;

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("overlap") else { return Ok(()) };
    let sms = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount)? as u32;
    // Loaded now: its first launch would load it (CUDA's lazy loading), which can wait for the
    // copies already running and stretch the timeline.
    SPIN.attributes(device)?;
    let (mut host, mut dev): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid out-pointers; pinned host memory so that copies are asynchronous.
    unsafe {
        check(sys::cudaHostAlloc(&mut host, CHUNK * STREAMS, sys::cudaHostAllocDefault), "cudaHostAlloc")?;
        check(sys::cudaMalloc(&mut dev, CHUNK * STREAMS), "cudaMalloc")?;
    }
    let streams: Vec<Stream> =
        (0..STREAMS).map(|_| Stream::new(device, StreamOptions::non_blocking())).collect::<Result<_, _>>()?;
    let origin = Event::new(device, EventFlags::timing())?;
    streams[0].record(&origin)?;
    for stream in &streams[1..] {
        stream.wait_event(&origin)?;
    }
    let mut marks = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        // SAFETY: both buffers hold CHUNK bytes at this offset and outlive the synchronize below.
        let (h, d) = unsafe {
            (host.cast::<u8>().add(i * CHUNK).cast::<c_void>(), dev.cast::<u8>().add(i * CHUNK).cast::<c_void>())
        };
        let events: Vec<Event> = (0..4).map(|_| Event::new(device, EventFlags::timing())).collect::<Result<_, _>>()?;
        let kind = sys::cudaMemcpyKind::cudaMemcpyHostToDevice;
        stream.record(&events[0])?;
        // SAFETY: as above.
        check(unsafe { sys::cudaMemcpyAsync(d, h, CHUNK, kind, stream.as_raw()) }, "cudaMemcpyAsync")?;
        stream.record(&events[1])?;
        // SAFETY: the kernel takes a number of nanoseconds (3 ms) and touches no memory.
        unsafe { SPIN.launch(stream, &LaunchConfig::new(sms / STREAMS as u32, 256), (3_000_000,))? };
        stream.record(&events[2])?;
        let back = sys::cudaMemcpyKind::cudaMemcpyDeviceToHost;
        // SAFETY: as above.
        check(unsafe { sys::cudaMemcpyAsync(h, d, CHUNK, back, stream.as_raw()) }, "cudaMemcpyAsync")?;
        stream.record(&events[3])?;
        marks.push(events);
    }
    device.synchronize()?;
    let at = |event: &Event| event.elapsed(&origin).map(|d| d.unwrap_or_default().as_secs_f64() * 1e3);
    let mut end = 0.0f64;
    for events in &marks {
        end = end.max(at(&events[3])?);
    }
    println!("timeline, 0 .. {end:.2} ms ('>' copy to GPU, '#' kernel, '<' copy back):");
    for (i, events) in marks.iter().enumerate() {
        let mut line = vec![' '; 60];
        for (segment, symbol) in [(0, '>'), (1, '#'), (2, '<')] {
            let (from, to) = (at(&events[segment])?, at(&events[segment + 1])?);
            let (a, b) = ((from / end * 59.0) as usize, (to / end * 59.0).ceil() as usize);
            for cell in &mut line[a..=b.min(59)] {
                *cell = symbol;
            }
        }
        println!("  stream {i} |{}|", line.iter().collect::<String>());
    }
    // SAFETY: allocated above, no work pending after the synchronize.
    unsafe {
        check(sys::cudaFree(dev), "cudaFree")?;
        check(sys::cudaFreeHost(host), "cudaFreeHost")?;
    }
    Ok(())
}
