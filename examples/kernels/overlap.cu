// The kernels of examples/overlap.rs.
#include <cstdint>

// Each thread spins for `ns` nanoseconds of the GPU's global timer: the "work" on each chunk.
extern "C" __global__ void overlap_spin(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
