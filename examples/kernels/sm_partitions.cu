// The kernels of examples/sm_partitions.rs.
#include <cstdint>

// y[i] = a * x[i] + y[i] over n elements, one thread each.
extern "C" __global__ void sm_partitions_saxpy(float a, const float* x, float* y, uint32_t n) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
