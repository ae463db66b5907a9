// The kernels of examples/host_memory.rs.
#include <cstdint>

// Doubles each of `n` floats in place: host memory through its device address (zero-copy)
// or device memory alike.
extern "C" __global__ void host_memory_double(float* values, uint32_t n) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    values[i] *= 2.0f;
  }
}
