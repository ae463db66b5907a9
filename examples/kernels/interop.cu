// The kernel of examples/interop.rs, and the "C library" it works with: a library that creates
// and destroys streams of its own, and enqueues its work on any stream it is handed (ours too).
#include <cuda_runtime.h>
#include <stdint.h>

// Spins for `spin_ns` nanoseconds, then appends `tag` to `log` (mapped host memory): log[0]
// counts the entries, log[1 ..= capacity] holds them in the order the GPU ran the kernels.
extern "C" __global__ void interop_tag(uint32_t* log, uint32_t capacity, uint32_t tag, uint64_t spin_ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < spin_ns);
  uint32_t slot = atomicAdd(&log[0], 1u);
  if (slot < capacity) log[1 + slot] = tag;
  __threadfence_system();
}

// The C library: a new non-blocking stream of the current device, its own.
extern "C" cudaError_t interop_c_stream_create(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking);
}

// The C library: destroys a stream it created.
extern "C" cudaError_t interop_c_stream_destroy(cudaStream_t stream) { return cudaStreamDestroy(stream); }

// The C library: enqueues a tag (no spin) on `stream`, any stream of the current device, and
// returns the launch's error.
extern "C" cudaError_t interop_c_tag(cudaStream_t stream, uint32_t* log, uint32_t capacity, uint32_t tag) {
  (void)cudaGetLastError();  // report this launch, not an earlier call's error
  interop_tag<<<1, 1, 0, stream>>>(log, capacity, tag, 0);
  return cudaGetLastError();
}
