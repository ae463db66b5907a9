// The floor of the overhead benchmark: each stream operation in a raw C++ loop on the CUDA
// runtime, timed here, in the same process as the Rust measurements (benches/overhead.rs).
#include <chrono>
#include <cuda_runtime.h>

#include "test_kernels.h"

namespace {
__global__ void floor_empty_kernel() {}
void floor_noop_host_fn(void*) {}
}  // namespace

// The operations, numbered as in benches/overhead.rs (enum FloorOp).
enum FloorOp {
  CreateDestroyDefault = 0,
  CreateDestroyNonBlocking = 1,
  CreateDestroyPriority = 2,
  QueryIdle = 3,
  SynchronizeIdle = 4,
  GetPriority = 5,
  EventCreateDestroy = 6,
  EventRecord = 7,
  RecordWaitEvent = 8,
  EventQuery = 9,
  LaunchEmpty = 10,
  LaunchSync = 11,
  HostFnRoundTrip = 12,
  GraphReplay100 = 13,
  DirectLaunch100 = 14,
};

// Runs `iters` operations of `op` with streams `a`, `b` and event `e`; returns ns per operation,
// or -1 if a CUDA call failed.
extern "C" double cs_floor(int op, int iters, cudaStream_t a, cudaStream_t b, cudaEvent_t e, int priority) {
  cudaError_t failed = cudaSuccess;
  auto ok = [&](cudaError_t code) {
    if (code != cudaSuccess) failed = code;
  };
  cudaGraphExec_t exec = nullptr;
  if (op == GraphReplay100) {
    cudaGraph_t graph;
    ok(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < 100; ++k) floor_empty_kernel<<<1, 1, 0, a>>>();
    ok(cudaStreamEndCapture(a, &graph));
    ok(cudaGraphInstantiate(&exec, graph, 0));
    ok(cudaGraphDestroy(graph));
    ok(cudaGraphUpload(exec, a));
    ok(cudaStreamSynchronize(a));
  }
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    switch (op) {
      case CreateDestroyDefault: {
        cudaStream_t s;
        ok(cudaStreamCreate(&s));
        ok(cudaStreamDestroy(s));
        break;
      }
      case CreateDestroyNonBlocking: {
        cudaStream_t s;
        ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        ok(cudaStreamDestroy(s));
        break;
      }
      case CreateDestroyPriority: {
        cudaStream_t s;
        ok(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
        ok(cudaStreamDestroy(s));
        break;
      }
      case QueryIdle: ok(cudaStreamQuery(a)); break;
      case SynchronizeIdle: ok(cudaStreamSynchronize(a)); break;
      case GetPriority: {
        int p;
        ok(cudaStreamGetPriority(a, &p));
        break;
      }
      case EventCreateDestroy: {
        cudaEvent_t ev;
        ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        ok(cudaEventDestroy(ev));
        break;
      }
      case EventRecord: ok(cudaEventRecord(e, a)); break;
      case RecordWaitEvent:
        ok(cudaEventRecord(e, a));
        ok(cudaStreamWaitEvent(b, e, 0));
        break;
      case EventQuery: ok(cudaEventQuery(e)); break;
      case LaunchEmpty:
        floor_empty_kernel<<<1, 1, 0, a>>>();
        ok(cudaGetLastError());
        break;
      case LaunchSync:
        floor_empty_kernel<<<1, 1, 0, a>>>();
        ok(cudaGetLastError());
        ok(cudaStreamSynchronize(a));
        break;
      case HostFnRoundTrip:
        ok(cudaLaunchHostFunc(a, floor_noop_host_fn, nullptr));
        ok(cudaStreamSynchronize(a));
        break;
      case GraphReplay100:
        ok(cudaGraphLaunch(exec, a));
        ok(cudaStreamSynchronize(a));
        break;
      case DirectLaunch100:
        for (int k = 0; k < 100; ++k) floor_empty_kernel<<<1, 1, 0, a>>>();
        ok(cudaGetLastError());
        ok(cudaStreamSynchronize(a));
        break;
    }
  }
  if (op == LaunchEmpty || op == EventRecord || op == RecordWaitEvent) ok(cudaDeviceSynchronize());
  auto end = std::chrono::steady_clock::now();
  if (exec) ok(cudaGraphExecDestroy(exec));
  if (failed != cudaSuccess) return -1.0;
  return std::chrono::duration<double, std::nano>(end - start).count() / iters;
}

// An empty kernel launch for the Rust sides of the benchmark (same kernel shape).
extern "C" cudaError_t cs_bench_launch_empty(cudaStream_t stream) {
  floor_empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

// The raw C host function the FFI side enqueues.
extern "C" void cs_bench_noop_host_fn(void*) {}
