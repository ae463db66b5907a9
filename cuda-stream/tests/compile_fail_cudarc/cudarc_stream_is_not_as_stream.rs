//! cudarc's `CudaStream` is not an `AsStream`: lending it to this crate's safe functions would let
//! cudarc's safe `begin_capture`/`end_capture` race this crate's calls; it goes through the unsafe
//! `BorrowedStream::from_cudarc`.
use cuda_stream::{Device, Stream, StreamOptions};
use cudarc::driver::CudaContext;

fn main() {
    let context = CudaContext::new(0).unwrap();
    let theirs = context.new_stream().unwrap();
    let ours = Stream::new(Device::new(0).unwrap(), StreamOptions::default()).unwrap();
    let _ = ours.wait_stream(&theirs);
}
