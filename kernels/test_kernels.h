// Shared between the kernels, the C stream library and (by hand, in src/lib.rs) Rust.
#pragma once
#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// One entry of the device-side log: which kernel, and when it ran (%globaltimer ns).
typedef struct {
  uint32_t tag;
  uint32_t reserved;
  uint64_t start_ns;
  uint64_t end_ns;
} cs_tag_entry;

// The log the tag kernel appends to through an atomic counter. Lives in mapped pinned memory.
typedef struct {
  uint32_t count;
  uint32_t capacity;
  cs_tag_entry entries[];
} cs_tag_log;

enum { CS_FLAG_PENDING = 0, CS_FLAG_SEEN = 1, CS_FLAG_TIMED_OUT = 2 };

cudaError_t cs_launch_spin(cudaStream_t stream, uint64_t ns, uint32_t blocks, uint32_t threads);
cudaError_t cs_launch_tag(cudaStream_t stream, cs_tag_log* log, uint32_t tag, uint64_t spin_ns);
cudaError_t cs_launch_wait_flag(cudaStream_t stream, const uint32_t* flag, uint64_t timeout_ns,
                                uint32_t* outcome);
cudaError_t cs_launch_spin_copy(cudaStream_t stream, const uint32_t* src, uint32_t* dst, uint64_t n,
                                uint64_t spin_ns);
cudaError_t cs_launch_empty(cudaStream_t stream);
cudaError_t cs_launch_fault(cudaStream_t stream);
cudaError_t cs_preload_kernels(void);

cudaError_t cs_foreign_stream_create(cudaStream_t* stream);
cudaError_t cs_foreign_stream_destroy(cudaStream_t stream);
cudaError_t cs_foreign_stream_tag(cudaStream_t stream, cs_tag_log* log, uint32_t tag);

#ifdef __cplusplus
}
#endif
