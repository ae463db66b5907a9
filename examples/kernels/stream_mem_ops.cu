// The kernel of examples/stream_mem_ops.rs.
#include <cstdint>

// Each thread spins for `ns` nanoseconds of the GPU's global timer: stands in for real work.
extern "C" __global__ void stream_mem_ops_spin(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
