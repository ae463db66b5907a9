/* Host stubs of examples/kernels/priorities.cu for a toolkit without nvcc: the example links,
 * and its first launch fails (no kernel image). */
#include <stdint.h>
void priorities_spin(uint64_t ns) { (void)ns; }
void priorities_mark(unsigned* word, unsigned value) { (void)word; (void)value; }
