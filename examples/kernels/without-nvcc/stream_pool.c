/* Host stubs of examples/kernels/stream_pool.cu for a toolkit without nvcc: the example links,
 * and its first launch fails (no kernel image). */
#include <stdint.h>
void stream_pool_spin(uint64_t ns) { (void)ns; }
