/* Host stubs of examples/kernels/sm_partitions.cu for a toolkit without nvcc: the example
 * links, and its first launch fails (no kernel image). */
#include <stdint.h>
void sm_partitions_saxpy(float a, const float* x, float* y, uint32_t n) {
  (void)a;
  (void)x;
  (void)y;
  (void)n;
}
