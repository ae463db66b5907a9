/* Built instead of the .cu files when the toolkit has no nvcc (NVIDIA's CUDA 12 runtime wheel,
 * say): every launcher reports cudaErrorNotSupported, and the GPU tests that need kernels say
 * they are skipped (src/gpu.rs checks KERNELS_BUILT) before any of these is called. */
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "../test_kernels.h"

cudaError_t cs_launch_spin(cudaStream_t s, uint64_t ns, uint32_t b, uint32_t t) {
  (void)s; (void)ns; (void)b; (void)t;
  return cudaErrorNotSupported;
}
cudaError_t cs_launch_tag(cudaStream_t s, cs_tag_log* log, uint32_t tag, uint64_t ns) {
  (void)s; (void)log; (void)tag; (void)ns;
  return cudaErrorNotSupported;
}
cudaError_t cs_launch_wait_flag(cudaStream_t s, const uint32_t* f, uint64_t ns, uint32_t* o) {
  (void)s; (void)f; (void)ns; (void)o;
  return cudaErrorNotSupported;
}
cudaError_t cs_launch_spin_copy(cudaStream_t s, const uint32_t* src, uint32_t* dst, uint64_t n, uint64_t ns) {
  (void)s; (void)src; (void)dst; (void)n; (void)ns;
  return cudaErrorNotSupported;
}
cudaError_t cs_launch_empty(cudaStream_t s) { (void)s; return cudaErrorNotSupported; }
cudaError_t cs_launch_fault(cudaStream_t s) { (void)s; return cudaErrorNotSupported; }
cudaError_t cs_preload_kernels(void) { return cudaErrorNotSupported; }
cudaError_t cs_foreign_stream_create(cudaStream_t* s) { (void)s; return cudaErrorNotSupported; }
cudaError_t cs_foreign_stream_destroy(cudaStream_t s) { (void)s; return cudaErrorNotSupported; }
cudaError_t cs_foreign_stream_tag(cudaStream_t s, cs_tag_log* log, uint32_t tag) {
  (void)s; (void)log; (void)tag;
  return cudaErrorNotSupported;
}
double cs_floor(int op, int iters, cudaStream_t a, cudaStream_t b, cudaEvent_t e, int p) {
  (void)op; (void)iters; (void)a; (void)b; (void)e; (void)p;
  return -1.0;
}
int cs_floor_driver_has(int op) { (void)op; return 0; }
double cs_floor_driver(int op, int iters, cudaStream_t a, cudaStream_t b, cudaEvent_t e) {
  (void)op; (void)iters; (void)a; (void)b; (void)e;
  return -1.0;
}
cudaError_t cs_bench_launch_empty(cudaStream_t s) { (void)s; return cudaErrorNotSupported; }
cudaError_t cs_bench_launch_halve_add(cudaStream_t s, float* data, int n) {
  (void)s; (void)data; (void)n;
  return cudaErrorNotSupported;
}
void cs_bench_noop_host_fn(void* data) { (void)data; }
void cs_bench_set_flag_host_fn(void* flag) { (void)flag; }
int cs_floor_event_synchronize(cudaEvent_t e, double* wall_ns, double* cpu_ns) {
  (void)e;
  *wall_ns = 0;
  *cpu_ns = 0;
  return (int)cudaErrorNotSupported;
}
int cs_floor_first_use(int n, double* step_cpu_ns) {
  (void)n; (void)step_cpu_ns;
  return (int)cudaErrorNotSupported;
}
void cs_bench_increment(void) {}
void cs_bench_chunk_add(void) {}
void cs_bench_three_buffers(void) {}
double cs_floor_memory(int op, int iters, int count, size_t bytes, int blocks, const cudaStream_t* streams,
                       int nstreams) {
  (void)op; (void)iters; (void)count; (void)bytes; (void)blocks; (void)streams; (void)nstreams;
  return -1.0;
}
int cs_scale_floor_has(int op, int api) { (void)op; (void)api; return 0; }
double cs_scale_floor(int op, int api, const cudaStream_t* s, int per_thread, const cudaEvent_t* e, int iters,
                      int threads) {
  (void)op; (void)api; (void)s; (void)per_thread; (void)e; (void)iters; (void)threads;
  return -1.0;
}
/* The kernels of launch_kernels.cu: only their addresses are taken (by cuda_stream::kernel!). */
void cs_empty_ex(void) {}
void cs_saxpy(void) {}
void cs_mixed_args(void) {}
void cs_sm90_features(void) {}
void cs_stamped_spin(void) {}
void cs_dependent_stamps(void) {}
void cs_cluster_shape(void) {}
void cs_grid_exchange(void) {}
void cs_dynamic_shared_sum(void) {}
/* The kernels of conditional_kernels.cu: only their addresses are taken (by cuda_stream::kernel!). */
void cs_cond_countdown(void) {}
void cs_cond_set_from(void) {}
void cs_cond_set(void) {}
void cs_cond_mark(void) {}
void cs_cond_store(void) {}
void cs_cond_step(void) {}
