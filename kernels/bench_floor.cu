// The floor of the overhead benchmark: each stream operation in a raw C++ loop on the CUDA
// runtime, timed here, in the same process as the Rust measurements (benches/overhead.rs).
#include <chrono>
#include <cuda.h>
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
  EventSynchronize = 15,
};

namespace {
// The graph of 100 empty kernels that the replay rows launch, instantiated and uploaded on `a`;
// nullptr if a call failed.
cudaGraphExec_t replay_graph(cudaStream_t a) {
  cudaGraph_t graph;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return nullptr;
  for (int k = 0; k < 100; ++k) floor_empty_kernel<<<1, 1, 0, a>>>();
  if (cudaStreamEndCapture(a, &graph) != cudaSuccess) return nullptr;
  bool ok = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  ok = cudaGraphDestroy(graph) == cudaSuccess && ok;
  ok = ok && cudaGraphUpload(exec, a) == cudaSuccess && cudaStreamSynchronize(a) == cudaSuccess;
  if (!ok && exec) cudaGraphExecDestroy(exec);
  return ok ? exec : nullptr;
}
}  // namespace

// Runs `iters` operations of `op` with streams `a`, `b` and event `e`; returns ns per operation,
// or -1 if a CUDA call failed.
extern "C" double cs_floor(int op, int iters, cudaStream_t a, cudaStream_t b, cudaEvent_t e, int priority) {
  cudaError_t failed = cudaSuccess;
  auto ok = [&](cudaError_t code) {
    if (code != cudaSuccess) failed = code;
  };
  cudaGraphExec_t exec = nullptr;
  if (op == GraphReplay100 && !(exec = replay_graph(a))) return -1.0;
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
      case EventSynchronize: ok(cudaEventSynchronize(e)); break;
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

namespace {
// The driver entry points of the driver floor, fetched through the runtime as the crate does.
struct DriverFloor {
  CUresult (*stream_query)(CUstream);
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*stream_wait_event)(CUstream, CUevent, unsigned);
  CUresult (*event_query)(CUevent);
  CUresult (*event_synchronize)(CUevent);
  CUresult (*launch_host_func)(CUstream, CUhostFn, void*);
  CUresult (*graph_launch)(CUgraphExec, CUstream);
  bool loaded = true;
};

template <class F>
void load(DriverFloor& d, F& slot, const char* symbol) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion(symbol, &f, 12000, cudaEnableDefault, &found) != cudaSuccess || !f) {
    d.loaded = false;
  }
  slot = reinterpret_cast<F>(f);
}

const DriverFloor& driver_floor() {
  static DriverFloor d = [] {
    DriverFloor d{};
    load(d, d.stream_query, "cuStreamQuery");
    load(d, d.stream_synchronize, "cuStreamSynchronize");
    load(d, d.event_record, "cuEventRecord");
    load(d, d.stream_wait_event, "cuStreamWaitEvent");
    load(d, d.event_query, "cuEventQuery");
    load(d, d.event_synchronize, "cuEventSynchronize");
    load(d, d.launch_host_func, "cuLaunchHostFunc");
    load(d, d.graph_launch, "cuGraphLaunch");
    return d;
  }();
  return d;
}
}  // namespace

// Whether `cs_floor_driver` has a loop for `op`: the operations with a driver entry point.
extern "C" int cs_floor_driver_has(int op) {
  switch (op) {
    case QueryIdle: case SynchronizeIdle: case EventRecord: case RecordWaitEvent: case EventQuery:
    case EventSynchronize: case HostFnRoundTrip: case GraphReplay100: return 1;
    default: return 0;
  }
}

// The driver floor: the operations that have a driver entry point, as the same loops through
// the driver API. Returns ns per operation; -1 if a call failed; -2 for an operation without
// a driver loop here.
extern "C" double cs_floor_driver(int op, int iters, cudaStream_t a, cudaStream_t b, cudaEvent_t e) {
  if (!cs_floor_driver_has(op)) return -2.0;
  const DriverFloor& d = driver_floor();
  if (!d.loaded) return -1.0;
  CUstream sa = a, sb = b;
  CUevent ev = e;
  CUresult failed = CUDA_SUCCESS;
  auto ok = [&](CUresult code) {
    if (code != CUDA_SUCCESS) failed = code;
  };
  CUgraphExec exec = nullptr;
  if (op == GraphReplay100 && !(exec = replay_graph(a))) return -1.0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    switch (op) {
      case QueryIdle: ok(d.stream_query(sa)); break;
      case SynchronizeIdle: ok(d.stream_synchronize(sa)); break;
      case EventRecord: ok(d.event_record(ev, sa)); break;
      case RecordWaitEvent:
        ok(d.event_record(ev, sa));
        ok(d.stream_wait_event(sb, ev, 0));
        break;
      case EventQuery: ok(d.event_query(ev)); break;
      case EventSynchronize: ok(d.event_synchronize(ev)); break;
      case HostFnRoundTrip:
        ok(d.launch_host_func(sa, floor_noop_host_fn, nullptr));
        ok(d.stream_synchronize(sa));
        break;
      case GraphReplay100:
        ok(d.graph_launch(exec, sa));
        ok(d.stream_synchronize(sa));
        break;
    }
  }
  if (op == EventRecord || op == RecordWaitEvent) ok(cudaDeviceSynchronize() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  auto end = std::chrono::steady_clock::now();
  if (exec) ok(cudaGraphExecDestroy(exec) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  if (failed != CUDA_SUCCESS) return -1.0;
  return std::chrono::duration<double, std::nano>(end - start).count() / iters;
}

// An empty kernel launch for the Rust sides of the benchmark (same kernel shape).
extern "C" cudaError_t cs_bench_launch_empty(cudaStream_t stream) {
  floor_empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

// The raw C host function the FFI side enqueues.
extern "C" void cs_bench_noop_host_fn(void*) {}

// The raw host function of the completion-latency benchmark (benches/completion_latency.rs):
// sets the flag (an `int`) that its waiting thread spins on.
extern "C" void cs_bench_set_flag_host_fn(void* flag) {
  __atomic_store_n(static_cast<int*>(flag), 1, __ATOMIC_RELEASE);
}
