// Kernels launched from Rust through cuda-stream's typed launch (`cuda_stream::kernel!`): each
// is `extern "C" __global__`, so its host stub has a C name that Rust declares and passes to
// `cudaLaunchKernelEx`. They write what the launch attributes change where the host can read
// it: %globaltimer timestamps, %smid, the cluster registers.
// The sm_90 features (programmatic dependent launch, clusters) are compiled only for sm_90 and
// later; a build for older architectures (or PTX of one, JIT-compiled) reports them absent
// through `cs_sm90_features`. No cooperative-groups header (it needs CCCL, which the pinned
// toolkit wheels do not carry): the registers are read with inline PTX.
#include <stdint.h>

namespace {
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
}  // namespace

// What one block saw: when it began and ended (%globaltimer ns) and on which SM.
struct cs_block_stamp {
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t sm;
  uint32_t value;
};

extern "C" {

// Does nothing: the typed launch's benchmark kernel.
__global__ void cs_empty_ex() {}

// y[i] = a * x[i] + y[i]: the typed launch's first example.
__global__ void cs_saxpy(float a, const float* x, float* y, uint32_t n) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Arguments of three sizes (1, 2 and 8 bytes) and a struct by value: what the signature check
// compares. Writes their sum.
struct cs_pair {
  uint32_t first;
  uint32_t second;
};
__global__ void cs_mixed_args(uint8_t small, uint16_t middle, uint64_t large, cs_pair pair,
                              uint64_t* out) {
  *out = small + middle + large + pair.first + pair.second;
}

// 1 where this build has the sm_90 features (the PDL and cluster kernels below), else 0.
__global__ void cs_sm90_features(uint32_t* out) {
#if __CUDA_ARCH__ >= 900
  *out = 1;
#else
  *out = 0;
#endif
}

// Each block spins for `ns`, then stamps. `trigger_at_start`: the block first signals that a
// programmatically dependent launch may begin (cudaTriggerProgrammaticLaunchCompletion).
__global__ void cs_stamped_spin(cs_block_stamp* stamps, uint64_t ns, uint32_t trigger_at_start) {
  uint64_t start = now_ns();
#if __CUDA_ARCH__ >= 900
  if (trigger_at_start) cudaTriggerProgrammaticLaunchCompletion();
#endif
  while (now_ns() - start < ns) {
  }
  __syncthreads();
  if (threadIdx.x == 0) stamps[blockIdx.x] = {start, now_ns(), sm_id(), 0};
}

// A dependent kernel: stamps when it began (its prologue, which may overlap the previous
// kernel under programmatic dependent launch), then waits for the previous kernel's grid
// (cudaGridDependencySynchronize) and stamps again; `value` is what the previous kernel wrote
// at `*seen` by then.
__global__ void cs_dependent_stamps(cs_block_stamp* stamps, const uint32_t* seen) {
  uint64_t start = now_ns();
#if __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
  if (threadIdx.x == 0) stamps[blockIdx.x] = {start, now_ns(), sm_id(), *(volatile const uint32_t*)seen};
}

// Per block: the cluster's size in blocks (1 without clusters), the block's rank in it, and
// whether the blocks of its cluster share memory: each block writes its rank into its shared
// memory, the cluster syncs, and each block reads its neighbour's through distributed shared
// memory. out[3 * block ..]: size, rank, neighbour's rank (0xffffffff without clusters).
__global__ void cs_cluster_shape(uint32_t* out) {
  uint32_t size = 1, rank = 0, neighbour = 0xffffffffu;
#if __CUDA_ARCH__ >= 900
  __shared__ uint32_t mine;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) mine = rank;
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
  if (size > 1) {
    uint32_t local = (uint32_t)__cvta_generic_to_shared(&mine), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"((rank + 1) % size));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(neighbour) : "r"(remote) : "memory");
  }
  // No block leaves while another may still read its shared memory.
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
#endif
  if (threadIdx.x == 0) {
    out[3 * blockIdx.x] = size;
    out[3 * blockIdx.x + 1] = rank;
    out[3 * blockIdx.x + 2] = neighbour;
  }
}

// A grid-wide exchange through a barrier of its own in `slots[0]`, for cooperative launches
// only (every block resident at once, so spinning on the barrier cannot hang): each block
// writes its index to slots[1 + block], waits for every block, then reads the next block's
// into out[block].
__global__ void cs_grid_exchange(uint32_t* slots, uint32_t* out) {
  if (threadIdx.x != 0) return;
  ((volatile uint32_t*)slots)[1 + blockIdx.x] = blockIdx.x;
  __threadfence();
  atomicAdd(&slots[0], 1);
  while (((volatile uint32_t*)slots)[0] < gridDim.x) {
  }
  __threadfence();
  out[blockIdx.x] = ((volatile uint32_t*)slots)[1 + (blockIdx.x + 1) % gridDim.x];
}

// Fills `words` words of dynamic shared memory (the block's own, `extern __shared__`) with
// their indices, then thread 0 sums them into out[0]: every word written and read back.
__global__ void cs_dynamic_shared_sum(uint64_t* out, uint32_t words) {
  extern __shared__ uint32_t shared[];
  for (uint32_t i = threadIdx.x; i < words; i += blockDim.x) shared[i] = i;
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < words; ++i) sum += shared[i];
  out[0] = sum;
}

}  // extern "C"
