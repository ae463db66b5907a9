// kernels/*.cu, compiled by nvcc with cuda-stream's toolkit and default-stream mode.
fn main() {
    cuda_stream_build::Kernels::from_dir("kernels").compile("exchange_kernels");
}
