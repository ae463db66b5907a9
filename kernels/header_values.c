/* The values of the header's pointer-cast macros, which bindgen drops: the tests compare the
 * hand-written constants of cuda-stream-sys with these. Plain C, compiled by the host compiler. */
#include <cuda_runtime_api.h>
#include <stdint.h>

const uintptr_t cs_header_stream_legacy = (uintptr_t)cudaStreamLegacy;
const uintptr_t cs_header_stream_per_thread = (uintptr_t)cudaStreamPerThread;
const int cs_header_cudart_version = CUDART_VERSION;
const unsigned cs_header_error_size = sizeof(cudaError_t);
