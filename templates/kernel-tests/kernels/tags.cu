// Appends a tag to a log in mapped host memory, after spinning: log[0] counts the tags in log[1..].
#include <cstdint>

extern "C" __global__ void kt_append_tag(uint32_t* log, uint32_t tag, uint64_t spin_ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < spin_ns);
  uint32_t slot = atomicAdd(log, 1u);
  log[1 + slot] = tag;
  __threadfence_system();
}
