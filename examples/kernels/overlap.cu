// The kernels of examples/overlap.rs.
#include <cstdint>

// Spins for `ns` nanoseconds of the GPU's global timer (the "work" on a chunk), then adds 1
// to each of the chunk's `n` bytes.
extern "C" __global__ void overlap_work(uint8_t* chunk, uint64_t n, uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    chunk[i] += 1;
  }
}
