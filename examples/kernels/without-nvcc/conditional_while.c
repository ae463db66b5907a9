/* Host stubs of examples/kernels/conditional_while.cu for a toolkit without nvcc: the example
 * links, and its first launch fails (no kernel image). */
#include <cuda_runtime_api.h>
#include <stdint.h>
void conditional_while_countdown(cudaGraphConditionalHandle handle, uint32_t* counter, uint32_t* runs) {
  (void)handle;
  (void)counter;
  (void)runs;
}
