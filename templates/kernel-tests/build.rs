// Every kernels/*.cu, compiled by nvcc with cuda-stream's toolkit and default-stream mode, for
// the GPUs of the building machine (CUDA_STREAM_ARCHS or CUDA_COMPUTE_CAP name others; without
// either or a GPU, a broad default), and linked; loaded eagerly in the tests. What was built is
// CUDA_STREAM_KERNEL_ARCHS in this crate.
fn main() {
    cuda_stream_build::Kernels::from_dir("kernels").compile("kernel_tests");
}
