// y = a * x + y, one thread per element.
#include <cstdint>
#include <cuda_runtime.h>

namespace {
__global__ void saxpy(float a, const float* x, float* y, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    y[i] = a * x[i] + y[i];
  }
}
}  // namespace

extern "C" cudaError_t kt_saxpy(cudaStream_t stream, float a, const float* x, float* y, uint64_t n) {
  unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
  saxpy<<<blocks, 256, 0, stream>>>(a, x, y, n);
  return cudaGetLastError();
}
