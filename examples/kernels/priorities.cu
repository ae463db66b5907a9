// The kernels of examples/priorities.rs.
#include <cstdint>

// Each thread spins for `ns` nanoseconds of the GPU's global timer.
extern "C" __global__ void priorities_spin(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Writes `value` to `word` (mapped host memory), visible to the host as soon as it is written.
extern "C" __global__ void priorities_mark(unsigned* word, unsigned value) {
  *(volatile unsigned*)word = value;
  __threadfence_system();
}
