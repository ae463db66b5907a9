/* Host stubs of examples/kernels/device_controls.cu for a toolkit without nvcc: the example
 * links, and its first launch fails (no kernel image). */
#include <stdint.h>
void device_controls_shared_sum(uint64_t* out, uint32_t words) { (void)out; (void)words; }
void device_controls_spin(uint64_t ns) { (void)ns; }
