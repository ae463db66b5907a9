/* Host stubs of examples/kernels/tour.cu for a toolkit without nvcc: the example links, and
 * its first launch fails (no kernel image). */
#include <stdint.h>
void tour_spin(uint64_t ns) { (void)ns; }
