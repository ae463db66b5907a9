// Kernels for conditional graph nodes (tests/graph/conditional.rs, benches/conditional.rs,
// examples/conditional_while.rs), launched from Rust through `cuda_stream::kernel!`: each is
// `extern "C" __global__`, and the ones that steer a conditional node take its
// `cudaGraphConditionalHandle` (a 64-bit value) and call `cudaGraphSetConditional` (declared in
// cuda_device_runtime_api.h, which cuda_runtime.h includes; the driver resolves it when the
// module loads, like printf: no -rdc, no cudadevrt; compiled for sm_90 and for PTX of
// compute_75 alike). Every kernel here runs as one thread (<<<1, 1>>>), so no two threads set a
// condition at once (undefined in CUDA).
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {

// One iteration of a while loop: counts the run in *runs, decrements *counter (never below
// zero), and keeps the loop going while it stays above zero.
__global__ void cs_cond_countdown(cudaGraphConditionalHandle handle, uint32_t* counter, uint32_t* runs) {
  uint32_t left = *counter;
  if (left > 0) left -= 1;
  *counter = left;
  *runs += 1;
  cudaGraphSetConditional(handle, left > 0 ? 1u : 0u);
}

// Sets the condition to *value: an if's flag or a switch's case, read from device memory.
__global__ void cs_cond_set_from(cudaGraphConditionalHandle handle, const uint32_t* value) {
  cudaGraphSetConditional(handle, *value);
}

// Sets the condition to `value`.
__global__ void cs_cond_set(cudaGraphConditionalHandle handle, uint32_t value) {
  cudaGraphSetConditional(handle, value);
}

// Records that a branch ran: appends `tag` to log[1 ..= capacity] (log[0] counts the entries,
// also those past the capacity).
__global__ void cs_cond_mark(uint32_t* log, uint32_t capacity, uint32_t tag) {
  uint32_t at = atomicAdd(&log[0], 1u);
  if (at < capacity) log[1 + at] = tag;
}

// *target = value: resets a counter at the start of a graph or a host loop.
__global__ void cs_cond_store(uint32_t* target, uint32_t value) { *target = value; }

// The host loop's step (benches/conditional.rs): decrements *counter (never below zero) and
// writes to *keep_going (mapped host memory) whether it is still above zero, as
// cs_cond_countdown sets its condition.
__global__ void cs_cond_step(uint32_t* counter, volatile uint32_t* keep_going) {
  uint32_t left = *counter;
  if (left > 0) left -= 1;
  *counter = left;
  *keep_going = left > 0 ? 1u : 0u;
  __threadfence_system();
}

}  // extern "C"
