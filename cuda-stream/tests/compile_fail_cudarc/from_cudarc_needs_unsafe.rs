//! `BorrowedStream::from_cudarc` is `unsafe`: cudarc's safe API can begin and end captures of the
//! stream on any thread, outside this crate's sight, and the caller promises they do not overlap
//! this crate's calls on it.
use cuda_stream::BorrowedStream;
use cudarc::driver::CudaContext;

fn main() {
    let context = CudaContext::new(0).unwrap();
    let theirs = context.new_stream().unwrap();
    let _borrowed = BorrowedStream::from_cudarc(&theirs);
}
