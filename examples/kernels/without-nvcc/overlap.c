/* Host stubs of examples/kernels/overlap.cu for a toolkit without nvcc: the example links,
 * and its first launch fails (no kernel image). */
#include <stdint.h>
void overlap_spin(uint64_t ns) { (void)ns; }
