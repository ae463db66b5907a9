// The kernels of examples/multi_gpu.rs.
#include <cstdint>

// Spins for `ns` nanoseconds of the GPU's global timer, then appends `tag` to `log`, mapped
// host memory that every GPU reaches: `log[0]` counts the tags, the `capacity` words after it
// hold them in the order the GPUs ran the kernels (a tag past the capacity is dropped).
extern "C" __global__ void multi_gpu_tag(unsigned* log, unsigned capacity, unsigned tag, uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  unsigned slot = atomicAdd(&log[0], 1u);
  if (slot < capacity) log[1 + slot] = tag;
  __threadfence_system();
}

// y[i] = a * x[i] over `n` floats; x may be another GPU's memory (peer access).
extern "C" __global__ void multi_gpu_scale(const float* x, float* y, float a, uint32_t n) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = a * x[i];
  }
}
