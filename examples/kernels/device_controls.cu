// The kernels of examples/device_controls.rs.
#include <cstdint>

// Fills `words` words of dynamic shared memory with their indices, then thread 0 sums them into
// out[0]: every word written and read back.
extern "C" __global__ void device_controls_shared_sum(uint64_t* out, uint32_t words) {
  extern __shared__ uint32_t shared[];
  for (uint32_t i = threadIdx.x; i < words; i += blockDim.x) shared[i] = i;
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < words; ++i) sum += shared[i];
  out[0] = sum;
}

// Each thread spins for `ns` nanoseconds of the GPU's global timer.
extern "C" __global__ void device_controls_spin(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
