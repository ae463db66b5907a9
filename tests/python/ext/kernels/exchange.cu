// The kernels of the Python exchange tests: a slow fill and a slow copy (each thread first
// spins `spin_ns` nanoseconds of the GPU's global timer), so that a missing ordering shows.
#include <cstdint>

__device__ static uint64_t px_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ static void px_spin(uint64_t spin_ns) {
  const uint64_t start = px_now();
  while (px_now() - start < spin_ns) {
  }
}

extern "C" __global__ void px_fill(float* p, uint64_t n, float value, uint64_t spin_ns) {
  px_spin(spin_ns);
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    p[i] = value;
  }
}

extern "C" __global__ void px_copy(float* to, const float* from, uint64_t n, uint64_t spin_ns) {
  px_spin(spin_ns);
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    to[i] = from[i];
  }
}
