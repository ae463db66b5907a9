// The kernels of examples/graph_memory.rs: NVIDIA's simpleCudaGraphs reduction, in two steps.

#include <cstdint>

// Each block sums its grid-strided share of `input` into `partial[blockIdx.x]`
// (blockDim.x must be a power of two, at most 1024).
extern "C" __global__ void graph_memory_reduce(const float* input, float* partial, uint64_t n) {
    __shared__ float sums[1024];
    float sum = 0.0f;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        sum += input[i];
    }
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

// One block sums the `n` partial sums into `*result`.
extern "C" __global__ void graph_memory_reduce_final(const float* partial, float* result, uint64_t n) {
    __shared__ float sums[1024];
    float sum = 0.0f;
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) sum += partial[i];
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) *result = sums[0];
}
