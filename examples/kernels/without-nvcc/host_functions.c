/* Host stubs of examples/kernels/host_functions.cu for a toolkit without nvcc: the example
 * links, and its first launch fails (no kernel image). */
#include <stdint.h>
void host_functions_spin(uint64_t ns) { (void)ns; }
