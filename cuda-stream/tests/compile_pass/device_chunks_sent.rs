//! The counterpart of compile_fail/device_slice_mut_beside_the_buffer.rs: a buffer's chunks are
//! disjoint exclusive views, which may be used at once, from several threads (a pipeline's
//! chunks filled in parallel), and split again.
use cuda_stream::{DeviceBuffer, Result, Stream};

fn fill_in_parallel(buffer: &mut DeviceBuffer<u32, &Stream>, stream: &Stream) -> Result<()> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = buffer
            .chunks_mut(4)?
            .map(|mut chunk| scope.spawn(move || chunk.copy_from_slice(stream, &[7; 4])))
            .collect();
        workers.into_iter().try_for_each(|worker| worker.join().unwrap())
    })?;
    let (mut first, mut second) = buffer.slice_mut(..)?.split_at_mut(8)?;
    first.copy_from_slice(stream, &[1; 8])?;
    second.use_on(stream, |_, _| ())
}

fn main() {
    // Compiled, never run: the test needs no GPU.
    let _: fn(&mut DeviceBuffer<u32, &Stream>, &Stream) -> Result<()> = fill_in_parallel;
}
