// y = a * x + y, one thread per element (a grid-stride loop: any grid covers any n).
#include <cstdint>

extern "C" __global__ void kt_saxpy(float a, const float* x, float* y, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    y[i] = a * x[i] + y[i];
  }
}
