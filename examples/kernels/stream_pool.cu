// The kernels of examples/stream_pool.rs.
#include <cstdint>

// Each thread spins for `ns` nanoseconds of the GPU's global timer.
extern "C" __global__ void stream_pool_spin(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
