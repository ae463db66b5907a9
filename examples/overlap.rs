//! Overlapping copies and kernels on several streams, the pattern every streams tutorial is
//! built on: one device buffer cut into chunks (`chunks_mut`), and each of 4 streams copies its
//! chunk to the GPU from pinned memory, runs a kernel on it, and copies it back. The chunks are
//! disjoint views, so nothing orders one stream's work after another's: the printed timeline
//! (from timing events) shows the streams' copies and kernels side by side, and the overlap
//! figure (the sum of the streams' spans over the whole span) says how much.
//!
//! A crate of its own: this file as `src/main.rs`, `examples/kernels/overlap.cu` in
//! `kernels/`, `cuda-stream` (feature `testing`, for the GPU gate) as a dependency and
//! `cuda-stream-build` as a build dependency, with its `build.rs`:
//! `cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");`.

use cuda_stream::{DeviceBuffer, Event, EventFlags, LaunchConfig, PinnedBuffer, Stream, StreamOptions, sys};

cuda_stream::kernel! {
    /// Spins for `ns` nanoseconds (the work on a chunk), then adds 1 to each of its `n` bytes.
    static WORK = fn overlap_work(chunk: *mut u8, n: u64, ns: u64);
}

const STREAMS: usize = 4;
const CHUNK: usize = 64 << 20;

fn main() -> cuda_stream::Result<()> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(device) = cuda_stream::testing::device_or_skip("overlap") else { return Ok(()) };
    let sms = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount)? as u32;
    // Loaded now: its first launch would load it (CUDA's lazy loading), which can wait for the
    // copies already running and stretch the timeline.
    WORK.attributes(device)?;
    let streams: Vec<Stream> =
        (0..STREAMS).map(|_| Stream::new(device, StreamOptions::non_blocking())).collect::<Result<_, _>>()?;
    // Allocated on the first stream, which also works on the first chunk: a chunk's work waits
    // only for the allocation, never for another chunk's.
    let mut buffer = DeviceBuffer::<u8, _>::new(&streams[0], CHUNK * STREAMS)?;
    let mut host: Vec<PinnedBuffer<u8>> =
        (0..STREAMS).map(|i| PinnedBuffer::from_slice(&vec![i as u8; CHUNK])).collect::<Result<_, _>>()?;
    let origin = Event::new(device, EventFlags::timing())?;
    streams[0].record(&origin)?;
    for stream in &streams[1..] {
        stream.wait_event(&origin)?;
    }
    let mut marks = Vec::new();
    for ((stream, mut chunk), pinned) in streams.iter().zip(buffer.chunks_mut(CHUNK)?).zip(&mut host) {
        let events: Vec<Event> = (0..4).map(|_| Event::new(device, EventFlags::timing())).collect::<Result<_, _>>()?;
        stream.record(&events[0])?;
        chunk.copy_from_pinned(stream, pinned)?;
        stream.record(&events[1])?;
        let config = LaunchConfig::new(sms / STREAMS as u32, 256);
        // SAFETY: the kernel writes the chunk's CHUNK bytes and no others; the launch orders
        // the chunk's use (after the copy in, before the copy back and the free).
        unsafe { WORK.launch(stream, &config, (&mut chunk, CHUNK as u64, 3_000_000))? };
        stream.record(&events[2])?;
        chunk.copy_to_pinned(stream, pinned)?;
        stream.record(&events[3])?;
        marks.push(events);
    }
    for (i, pinned) in host.iter().enumerate() {
        // Waits for the chunk's copy back.
        assert!(pinned.as_slice()?.iter().all(|&byte| byte == i as u8 + 1), "chunk {i} went through its kernel");
    }
    let at = |event: &Event| event.elapsed(&origin).map(|d| d.unwrap_or_default().as_secs_f64() * 1e3);
    let (mut end, mut busy) = (0.0f64, 0.0f64);
    for events in &marks {
        end = end.max(at(&events[3])?);
        busy += at(&events[3])? - at(&events[0])?;
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
    println!("overlap: {:.2}x (the streams' spans added up, over the whole span)", busy / end);
    Ok(())
}
