//! An all-reduce over every GPU with NVIDIA's NCCL, enqueued on cuda-stream streams: each
//! GPU's input is produced on another stream, which the all-reduce's stream waits for with
//! `wait_stream`; the result is read on a third stream ordered by an event. NCCL is loaded at
//! run time (`CUDA_STREAM_NCCL`, else the `nvidia-nccl-cu13` wheel of `python3`).

use cuda_stream::{Device, Stream, StreamOptions, check, sys};
use cuda_stream_tests::nccl::nccl;
use std::ffi::c_void;

const COUNT: usize = 1 << 16;
const BYTES: usize = COUNT * size_of::<i32>();

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(_) = cuda_stream_tests::gpu::example_device("multi_gpu_nccl") else { return Ok(()) };
    let nccl = match nccl() {
        Ok(nccl) => nccl,
        Err(why) => {
            println!("multi_gpu_nccl: {why}. Nothing to show.");
            return Ok(());
        }
    };
    let devices: Vec<Device> = (0..Device::count()?).map(Device::new).collect::<cuda_stream::Result<_>>()?;
    println!("NCCL {} over {} GPU(s)", nccl.version()?, devices.len());
    let comms = nccl.comms(&devices)?;
    let mut ranks = Vec::new();
    for (rank, device) in devices.iter().enumerate() {
        let _current = device.make_current()?;
        let (producer, work, reader) = (
            Stream::new(*device, StreamOptions::non_blocking())?,
            Stream::new(*device, StreamOptions::non_blocking())?,
            Stream::new(*device, StreamOptions::non_blocking())?,
        );
        let (mut send, mut receive): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers.
        check(unsafe { sys::cudaMalloc(&mut send, BYTES) }, "cudaMalloc")?;
        // SAFETY: as above.
        check(unsafe { sys::cudaMalloc(&mut receive, BYTES) }, "cudaMalloc")?;
        // Rank r's input: every byte r + 1, produced on its own stream.
        // SAFETY: `send` holds BYTES bytes; freed below after every stream is synchronized.
        check(unsafe { sys::cudaMemsetAsync(send, rank as i32 + 1, BYTES, producer.as_raw()) }, "cudaMemsetAsync")?;
        work.wait_stream(&producer)?;
        ranks.push((producer, work, reader, send, receive));
    }
    let buffers: Vec<_> = ranks.iter().map(|rank| (rank.3.cast_const(), rank.4)).collect();
    let streams: Vec<_> = ranks.iter().map(|rank| &*rank.1).collect();
    // SAFETY: each pair holds COUNT i32s of its rank's device, alive until the streams finish.
    unsafe { comms.all_reduce_sum_i32(&buffers, COUNT, &streams) }?;
    let expected = (1..=devices.len() as i32).sum::<i32>() * 0x0101_0101;
    for (rank, (producer, work, reader, send, receive)) in ranks.into_iter().enumerate() {
        reader.wait_event(&work.record_event()?)?;
        let mut host = vec![0i32; COUNT];
        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToHost;
        let target = host.as_mut_ptr().cast();
        // SAFETY: both hold BYTES bytes; pageable memory: the copy is done when the call returns.
        let code = unsafe { sys::cudaMemcpyAsync(target, receive, BYTES, kind, reader.as_raw()) };
        check(code, "cudaMemcpyAsync")?;
        reader.synchronize()?;
        producer.synchronize()?;
        let right = host.iter().filter(|value| **value == expected).count();
        println!("rank {rank}: {right} of {COUNT} elements are the sum {expected:#x}");
        let _current = devices[rank].make_current()?;
        // SAFETY: our allocations; every stream that used them is synchronized.
        unsafe {
            check(sys::cudaFree(send), "cudaFree")?;
            check(sys::cudaFree(receive), "cudaFree")?;
        }
        if right != COUNT {
            return Err(format!("rank {rank}: the all-reduce's result is wrong").into());
        }
    }
    Ok(())
}
