// One kernel and its launcher: append a tag to a log in mapped host memory, after spinning.
#include <cstdint>
#include <cuda_runtime.h>

namespace {
__global__ void append_tag(uint32_t* log, uint32_t tag, uint64_t spin_ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < spin_ns);
  uint32_t slot = atomicAdd(log, 1u);  // log[0] counts the tags in log[1..]
  log[1 + slot] = tag;
  __threadfence_system();
}
}  // namespace

// Launches one thread that spins `spin_ns` nanoseconds, then appends `tag` to `log`.
extern "C" cudaError_t kt_append_tag(cudaStream_t stream, uint32_t* log, uint32_t tag, uint64_t spin_ns) {
  append_tag<<<1, 1, 0, stream>>>(log, tag, spin_ns);
  return cudaGetLastError();
}
