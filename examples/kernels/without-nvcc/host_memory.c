/* Host stubs of examples/kernels/host_memory.cu for a toolkit without nvcc: the example links,
 * and its first launch fails (no kernel image). */
#include <stdint.h>
void host_memory_double(float* values, uint32_t n) { (void)values; (void)n; }
