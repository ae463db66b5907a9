// The kernels of examples/tour.rs.
#include <cstdint>

// Each thread spins for `ns` nanoseconds of the GPU's global timer.
extern "C" __global__ void tour_spin(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
