// Every kernels/*.cu, compiled by nvcc with cuda-stream's toolkit, default-stream mode and
// architectures (CUDA_STREAM_ARCHS), and linked; loaded eagerly in the tests.
fn main() {
    cuda_stream_build::Kernels::from_dir("kernels").compile("kernel_tests");
}
