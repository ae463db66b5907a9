// A "foreign" C library: it creates and destroys its own stream, and enqueues work on a stream
// it is handed. The tests use it to hand streams across the Rust/C boundary both ways.
#include <cuda_runtime.h>

#include "test_kernels.h"

extern "C" cudaError_t cs_foreign_stream_create(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking);
}

extern "C" cudaError_t cs_foreign_stream_destroy(cudaStream_t stream) {
  return cudaStreamDestroy(stream);
}

extern "C" cudaError_t cs_foreign_stream_tag(cudaStream_t stream, cs_tag_log* log, uint32_t tag) {
  return cs_launch_tag(stream, log, tag, 0);
}
