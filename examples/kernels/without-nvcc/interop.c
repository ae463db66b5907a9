/* Host stubs of examples/kernels/interop.cu for a toolkit without nvcc: the example links, and
 * its first launch fails (no kernel image); the C library's functions fail the same way. */
#include <cuda_runtime_api.h>
#include <stdint.h>
void interop_tag(uint32_t* log, uint32_t capacity, uint32_t tag, uint64_t spin_ns) {
  (void)log;
  (void)capacity;
  (void)tag;
  (void)spin_ns;
}
cudaError_t interop_c_stream_create(cudaStream_t* stream) {
  *stream = 0;
  return cudaErrorNoKernelImageForDevice;
}
cudaError_t interop_c_stream_destroy(cudaStream_t stream) {
  (void)stream;
  return cudaErrorNoKernelImageForDevice;
}
cudaError_t interop_c_tag(cudaStream_t stream, uint32_t* log, uint32_t capacity, uint32_t tag) {
  (void)stream;
  (void)log;
  (void)capacity;
  (void)tag;
  return cudaErrorNoKernelImageForDevice;
}
