// Test kernels for the cuda-stream integration tests and benchmarks.
//
// Each kernel has an extern "C" launcher that takes the stream to launch on and returns the
// launch error (cudaGetLastError right after the launch), so Rust calls them through plain FFI.
#include <cuda_runtime.h>
#include <stdint.h>

#include "test_kernels.h"

// Nanoseconds from the GPU's global timer.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void spin_for(uint64_t ns) {
  uint64_t start = global_ns();
  while (global_ns() - start < ns) {
  }
}

__global__ void cs_spin_kernel(uint64_t ns) { spin_for(ns); }

__global__ void cs_tag_kernel(cs_tag_log* log, uint32_t tag, uint64_t spin_ns) {
  uint64_t start = global_ns();
  spin_for(spin_ns);
  uint64_t end = global_ns();
  uint32_t slot = atomicAdd(&log->count, 1u);
  if (slot < log->capacity) {
    cs_tag_entry* entry = &log->entries[slot];
    entry->tag = tag;
    entry->start_ns = start;
    entry->end_ns = end;
  }
  __threadfence_system();
}

__global__ void cs_wait_flag_kernel(const volatile uint32_t* flag, uint64_t timeout_ns,
                                    uint32_t* outcome) {
  uint64_t start = global_ns();
  while (*flag == 0) {
    if (global_ns() - start > timeout_ns) {
      *outcome = CS_FLAG_TIMED_OUT;
      __threadfence_system();
      return;
    }
  }
  *outcome = CS_FLAG_SEEN;
  __threadfence_system();
}

__global__ void cs_spin_copy_kernel(const uint32_t* src, uint32_t* dst, uint64_t n, uint64_t spin_ns) {
  spin_for(spin_ns);
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    dst[i] = src[i];
  }
}

__global__ void cs_empty_kernel() {}

__global__ void cs_fault_kernel() {
  // An address no allocation owns: the launch succeeds, the kernel raises
  // cudaErrorIllegalAddress, which poisons the context.
  *(volatile uint32_t*)(uintptr_t)0x10 = 1;
}

extern "C" cudaError_t cs_launch_spin(cudaStream_t stream, uint64_t ns, uint32_t blocks,
                                      uint32_t threads) {
  (void)cudaGetLastError();  // report this launch, not an earlier call\'s error
  cs_spin_kernel<<<blocks, threads, 0, stream>>>(ns);
  return cudaGetLastError();
}

extern "C" cudaError_t cs_launch_tag(cudaStream_t stream, cs_tag_log* log, uint32_t tag,
                                     uint64_t spin_ns) {
  (void)cudaGetLastError();  // report this launch, not an earlier call\'s error
  cs_tag_kernel<<<1, 1, 0, stream>>>(log, tag, spin_ns);
  return cudaGetLastError();
}

extern "C" cudaError_t cs_launch_wait_flag(cudaStream_t stream, const uint32_t* flag,
                                           uint64_t timeout_ns, uint32_t* outcome) {
  (void)cudaGetLastError();  // report this launch, not an earlier call\'s error
  cs_wait_flag_kernel<<<1, 1, 0, stream>>>(flag, timeout_ns, outcome);
  return cudaGetLastError();
}

extern "C" cudaError_t cs_launch_spin_copy(cudaStream_t stream, const uint32_t* src, uint32_t* dst,
                                           uint64_t n, uint64_t spin_ns) {
  (void)cudaGetLastError();  // report this launch, not an earlier call\'s error
  cs_spin_copy_kernel<<<1, 256, 0, stream>>>(src, dst, n, spin_ns);
  return cudaGetLastError();
}

extern "C" cudaError_t cs_launch_empty(cudaStream_t stream) {
  (void)cudaGetLastError();  // report this launch, not an earlier call\'s error
  cs_empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

extern "C" cudaError_t cs_launch_fault(cudaStream_t stream) {
  (void)cudaGetLastError();  // report this launch, not an earlier call\'s error
  cs_fault_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

// Loads every test kernel into the current device's context now. With CUDA's lazy module
// loading (the default since 12.2) the first launch of a kernel loads it, and that load can wait
// for kernels already running on the device: a test that parks a device on the wait-flag kernel
// and then launches a kernel never used there before would stall until the flag times out.
extern "C" cudaError_t cs_preload_kernels(void) {
  cudaFuncAttributes attributes;
  const void* kernels[] = {(const void*)cs_spin_kernel, (const void*)cs_tag_kernel,
                           (const void*)cs_wait_flag_kernel, (const void*)cs_empty_kernel,
                           (const void*)cs_fault_kernel, (const void*)cs_spin_copy_kernel};
  for (const void* kernel : kernels) {
    cudaError_t error = cudaFuncGetAttributes(&attributes, kernel);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}
