// The kernel of examples/conditional_while.rs. It steers a conditional graph node from device
// code with `cudaGraphSetConditional` (declared in cuda_device_runtime_api.h, which
// cuda_runtime.h includes; the driver resolves it when the module loads: no -rdc, no cudadevrt).
// It runs as one thread (<<<1, 1>>>): no two threads set the condition at once.
#include <cuda_runtime.h>
#include <stdint.h>

// One iteration of the while loop: counts the run in *runs, decrements *counter (never below
// zero), and keeps the loop going while it stays above zero.
extern "C" __global__ void conditional_while_countdown(cudaGraphConditionalHandle handle, uint32_t* counter,
                                                       uint32_t* runs) {
  uint32_t left = *counter;
  if (left > 0) left -= 1;
  *counter = left;
  *runs += 1;
  cudaGraphSetConditional(handle, left > 0 ? 1u : 0u);
}
