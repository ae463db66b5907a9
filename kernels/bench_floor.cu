// The floors of the overhead benchmark (benches/overhead.rs: each stream operation in a raw C++
// loop on the CUDA runtime, and on the driver's entry points) and of the scale benchmark
// (benches/scale.rs: the same operations across many streams and threads), timed here, in the
// same process as the Rust measurements.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <cuda.h>
#include <cuda_runtime.h>
#include <mutex>
#include <thread>
#include <vector>

#include "test_kernels.h"

namespace {
__global__ void floor_empty_kernel() {}
void floor_noop_host_fn(void*) {}

// The kernel of the copy-kernel-copy graph: each of the `n` floats halved plus one (the values
// stay finite however often the graph replays).
__global__ void floor_halve_add_kernel(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 0.5f + 1.0f;
}
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
  AllocFree = 16,
  PinnedCopy = 17,
  PinnedCopyBack = 18,
  LaunchEx = 19,
  GraphReplayCopyKernelCopy = 20,
};

// The bytes of one stream-ordered allocation (AllocFree) and of one pinned copy (PinnedCopy).
static const size_t kAllocBytes = 4096;
static const size_t kPinnedCopyBytes = 64u << 20;
// The floats of the copy-kernel-copy graph (16 KiB each way: launch overhead dominates), and
// the threads per block of its kernel.
static const int kCopyKernelCopyFloats = 4096;
static const int kCopyKernelCopyThreads = 256;

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

// Launches the copy-kernel-copy graph's kernel over `n` floats at `data` on `stream`.
void launch_halve_add(float* data, int n, cudaStream_t stream) {
  int blocks = (n + kCopyKernelCopyThreads - 1) / kCopyKernelCopyThreads;
  floor_halve_add_kernel<<<blocks, kCopyKernelCopyThreads, 0, stream>>>(data, n);
}

// The copy-kernel-copy graph of GraphReplayCopyKernelCopy, captured on `a`: a host-to-device
// copy out of page-locked memory (cudaHostAlloc), the kernel over the device buffer (a
// stream-ordered allocation, made before the capture), the device-to-host copy back into the
// page-locked memory; instantiated and uploaded on `a`. What the safe side builds by capture
// with `Capture::copy_from_pinned`, `Capture::use_on` and `Capture::copy_to_pinned`.
struct CopyKernelCopy {
  float* pinned = nullptr;
  float* device = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStream_t stream = nullptr;

  // Everything made, or false (what was made is freed by the destructor).
  bool make(cudaStream_t a) {
    stream = a;
    const size_t bytes = kCopyKernelCopyFloats * sizeof(float);
    if (cudaHostAlloc(reinterpret_cast<void**>(&pinned), bytes, cudaHostAllocDefault) != cudaSuccess) {
      pinned = nullptr;
      return false;
    }
    for (int i = 0; i < kCopyKernelCopyFloats; ++i) pinned[i] = 0.0f;
    if (cudaMallocAsync(reinterpret_cast<void**>(&device), bytes, a) != cudaSuccess) {
      device = nullptr;
      return false;
    }
    if (cudaStreamSynchronize(a) != cudaSuccess) return false;
    cudaGraph_t graph;
    if (cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return false;
    bool ok = cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, a) == cudaSuccess;
    launch_halve_add(device, kCopyKernelCopyFloats, a);
    ok = cudaGetLastError() == cudaSuccess && ok;
    ok = cudaMemcpyAsync(pinned, device, bytes, cudaMemcpyDeviceToHost, a) == cudaSuccess && ok;
    // Ended whatever failed (a failure may have invalidated the capture: then no graph).
    if (cudaStreamEndCapture(a, &graph) != cudaSuccess) return false;
    if (!ok) {
      cudaGraphDestroy(graph);
      return false;
    }
    ok = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (!ok) exec = nullptr;
    ok = cudaGraphDestroy(graph) == cudaSuccess && ok;
    return ok && cudaGraphUpload(exec, a) == cudaSuccess && cudaStreamSynchronize(a) == cudaSuccess;
  }

  // Frees everything made; false if a call failed.
  bool release() {
    bool ok = true;
    if (exec) ok = cudaGraphExecDestroy(exec) == cudaSuccess && ok;
    if (device) ok = cudaFreeAsync(device, stream) == cudaSuccess && ok;
    if (device) ok = cudaStreamSynchronize(stream) == cudaSuccess && ok;
    if (pinned) ok = cudaFreeHost(pinned) == cudaSuccess && ok;
    exec = nullptr;
    device = nullptr;
    pinned = nullptr;
    return ok;
  }

  ~CopyKernelCopy() { release(); }
};
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
  CopyKernelCopy copy_kernel_copy;
  if (op == GraphReplayCopyKernelCopy && !copy_kernel_copy.make(a)) return -1.0;
  void* pinned = nullptr;
  void* device = nullptr;
  if (op == PinnedCopy || op == PinnedCopyBack) {
    ok(cudaMallocHost(&pinned, kPinnedCopyBytes));
    ok(cudaMalloc(&device, kPinnedCopyBytes));
    if (failed != cudaSuccess) return -1.0;
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
      case EventSynchronize: ok(cudaEventSynchronize(e)); break;
      case LaunchEmpty:
        floor_empty_kernel<<<1, 1, 0, a>>>();
        ok(cudaGetLastError());
        break;
      case LaunchEx: {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(1);
        config.blockDim = dim3(1);
        config.stream = a;
        ok(cudaLaunchKernelEx(&config, floor_empty_kernel));
        break;
      }
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
      case GraphReplayCopyKernelCopy:
        ok(cudaGraphLaunch(copy_kernel_copy.exec, a));
        ok(cudaStreamSynchronize(a));
        break;
      case DirectLaunch100:
        for (int k = 0; k < 100; ++k) floor_empty_kernel<<<1, 1, 0, a>>>();
        ok(cudaGetLastError());
        ok(cudaStreamSynchronize(a));
        break;
      case AllocFree: {
        void* p;
        ok(cudaMallocAsync(&p, kAllocBytes, a));
        ok(cudaFreeAsync(p, a));
        break;
      }
      case PinnedCopy:
        ok(cudaMemcpyAsync(device, pinned, kPinnedCopyBytes, cudaMemcpyHostToDevice, a));
        ok(cudaStreamSynchronize(a));
        break;
      case PinnedCopyBack:
        ok(cudaMemcpyAsync(pinned, device, kPinnedCopyBytes, cudaMemcpyDeviceToHost, a));
        ok(cudaStreamSynchronize(a));
        break;
    }
  }
  if (op == LaunchEmpty || op == LaunchEx || op == EventRecord || op == RecordWaitEvent || op == AllocFree) ok(cudaDeviceSynchronize());
  auto end = std::chrono::steady_clock::now();
  if (exec) ok(cudaGraphExecDestroy(exec));
  if (!copy_kernel_copy.release()) failed = cudaErrorUnknown;
  if (pinned) ok(cudaFreeHost(pinned));
  if (device) ok(cudaFree(device));
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
    case EventSynchronize: case HostFnRoundTrip: case GraphReplay100: case GraphReplayCopyKernelCopy: return 1;
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
  CopyKernelCopy copy_kernel_copy;
  if (op == GraphReplayCopyKernelCopy && !copy_kernel_copy.make(a)) return -1.0;
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
      case GraphReplayCopyKernelCopy:
        ok(d.graph_launch(copy_kernel_copy.exec, sa));
        ok(d.stream_synchronize(sa));
        break;
    }
  }
  if (op == EventRecord || op == RecordWaitEvent) ok(cudaDeviceSynchronize() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  auto end = std::chrono::steady_clock::now();
  if (exec) ok(cudaGraphExecDestroy(exec) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  if (!copy_kernel_copy.release()) failed = CUDA_ERROR_UNKNOWN;
  if (failed != CUDA_SUCCESS) return -1.0;
  return std::chrono::duration<double, std::nano>(end - start).count() / iters;
}

// The operations of the scale benchmark, numbered as in benches/scale.rs (enum ScaleOp).
enum ScaleOp {
  ScaleRecord = 0,
  ScaleWaitStream = 1,
  ScaleQuery = 2,
  ScalePool = 3,
  ScaleCurrent = 4,
};

// Which floor: the runtime API, or the driver's entry points (`cs_floor_driver`'s).
enum ScaleApi {
  ScaleRuntime = 0,
  ScaleDriver = 1,
};

namespace {
// A start line that threads spin on, so that they leave it within a cache-line transfer of
// each other (a futex barrier wakes them tens of microseconds apart: they would not contend).
// benches/scale.rs starts its threads with the same kind (cuda_stream_tests::bench::SpinBarrier).
class SpinBarrier {
 public:
  explicit SpinBarrier(int threads) : waiting_(threads) {}
  void wait() {
    waiting_.fetch_sub(1, std::memory_order_acq_rel);
    while (waiting_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  }

 private:
  std::atomic<int> waiting_;
};

// What a typical C++ stream pool does: a free list of handles behind a std::mutex.
class MutexPool {
 public:
  MutexPool(const cudaStream_t* streams, int n) : free_(streams, streams + n) {}
  // A free stream, or nullptr when all are taken.
  cudaStream_t acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) return nullptr;
    cudaStream_t stream = free_.back();
    free_.pop_back();
    return stream;
  }
  void release(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(stream);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaStream_t> free_;
};

// What a typical C++ current-stream guard does (c10::cuda::CUDAStreamGuard's shape): the
// current stream of each device in a thread-local, saved, set, and restored on exit.
thread_local cudaStream_t current_stream[64];

class CurrentStreamGuard {
 public:
  CurrentStreamGuard(cudaStream_t stream, int device) : device_(device), previous_(current_stream[device]) {
    current_stream[device] = stream;
  }
  ~CurrentStreamGuard() { current_stream[device_] = previous_; }

 private:
  int device_;
  cudaStream_t previous_;
};
}  // namespace

// Whether `cs_scale_floor` has a loop for `op` on `api`.
extern "C" int cs_scale_floor_has(int op, int api) {
  switch (op) {
    case ScaleRecord: case ScaleWaitStream: case ScaleQuery: return api == ScaleRuntime || api == ScaleDriver;
    case ScalePool: case ScaleCurrent: return api == ScaleRuntime;
    default: return 0;
  }
}

// The floor of the scale benchmark: `threads` threads started together, each running `op`
// `iters` times round-robin over its own `per_thread` streams (thread t owns
// `streams[t * per_thread ..]` and the event `events[t]`): operation i records `events[t]` on
// stream i (ScaleRecord); records it on stream i and makes stream i + 1 wait for it
// (ScaleWaitStream: the raw `wait_stream`); queries stream i (ScaleQuery); makes stream i
// current in a guard (ScaleCurrent). ScalePool: the threads share one MutexPool of all
// `threads * per_thread` handles and acquire + release one each time. Before the start each
// thread runs the operation once, which binds the runtime's context to the thread. Returns the
// mean over threads of ns per operation; -1 if a call failed or the pool ran dry; -2 if
// `cs_scale_floor_has(op, api)` is 0.
extern "C" double cs_scale_floor(int op, int api, const cudaStream_t* streams, int per_thread,
                                 const cudaEvent_t* events, int iters, int threads) {
  if (!cs_scale_floor_has(op, api)) return -2.0;
  const DriverFloor& d = driver_floor();
  if (api == ScaleDriver && !d.loaded) return -1.0;
  MutexPool pool(streams, op == ScalePool ? threads * per_thread : 0);
  SpinBarrier start(threads);
  std::atomic<bool> failed{false};
  std::vector<double> ns(threads);
  auto run = [&](int t) {
    const cudaStream_t* own = streams + static_cast<size_t>(t) * per_thread;
    cudaEvent_t event = events[t];
    bool ok = true;
    auto rt = [&](cudaError_t code) { ok = ok && (code == cudaSuccess || code == cudaErrorNotReady); };
    auto drv = [&](CUresult code) { ok = ok && (code == CUDA_SUCCESS || code == CUDA_ERROR_NOT_READY); };
    volatile cudaStream_t sink = nullptr;
    auto once = [&](int i) {
      cudaStream_t a = own[i % per_thread], b = own[(i + 1) % per_thread];
      switch (op * 2 + api) {
        case ScaleRecord * 2 + ScaleRuntime: rt(cudaEventRecord(event, a)); break;
        case ScaleRecord * 2 + ScaleDriver: drv(d.event_record(event, a)); break;
        case ScaleWaitStream * 2 + ScaleRuntime:
          rt(cudaEventRecord(event, a));
          rt(cudaStreamWaitEvent(b, event, 0));
          break;
        case ScaleWaitStream * 2 + ScaleDriver:
          drv(d.event_record(event, a));
          drv(d.stream_wait_event(b, event, 0));
          break;
        case ScaleQuery * 2 + ScaleRuntime: rt(cudaStreamQuery(a)); break;
        case ScaleQuery * 2 + ScaleDriver: drv(d.stream_query(a)); break;
        case ScalePool * 2 + ScaleRuntime: {
          cudaStream_t leased = pool.acquire();
          ok = ok && leased;
          sink = leased;
          if (leased) pool.release(leased);
          break;
        }
        case ScaleCurrent * 2 + ScaleRuntime: {
          CurrentStreamGuard guard(a, 0);
          std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the set and the restore
          sink = current_stream[0];
          break;
        }
      }
    };
    once(0);
    start.wait();
    auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) once(i);
    auto end = std::chrono::steady_clock::now();
    ns[t] = std::chrono::duration<double, std::nano>(end - begin).count() / iters;
    if (!ok) failed = true;
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(run, t);
  for (auto& worker : workers) worker.join();
  if (op == ScaleRecord || op == ScaleWaitStream) {
    if (cudaDeviceSynchronize() != cudaSuccess) failed = true;
  }
  if (failed) return -1.0;
  double sum = 0;
  for (double v : ns) sum += v;
  return sum / threads;
}

// An empty kernel launch for the Rust sides of the benchmark (same kernel shape).
extern "C" cudaError_t cs_bench_launch_empty(cudaStream_t stream) {
  floor_empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

// The copy-kernel-copy graph's kernel over `n` floats at `data`, for the safe side of the
// overhead benchmark's copy-kernel-copy row (launched inside its capture, as the floor's).
extern "C" cudaError_t cs_bench_launch_halve_add(cudaStream_t stream, float* data, int n) {
  launch_halve_add(data, n, stream);
  return cudaGetLastError();
}

// The raw C host function the FFI side enqueues.
extern "C" void cs_bench_noop_host_fn(void*) {}

// The raw host function of the completion-latency benchmark (benches/completion_latency.rs):
// sets the flag (an `int`) that its waiting thread spins on.
extern "C" void cs_bench_set_flag_host_fn(void* flag) {
  __atomic_store_n(static_cast<int*>(flag), 1, __ATOMIC_RELEASE);
}

// The floor of the effects benchmark's event-synchronize rows: cudaEventSynchronize on `event`
// (recorded by the caller after a kernel that is still running), timed on the wall and in this
// thread's CPU time (ns), as the Rust side times Event::synchronize. Returns the CUDA result.
extern "C" int cs_floor_event_synchronize(cudaEvent_t event, double* wall_ns, double* cpu_ns) {
  timespec cpu0, cpu1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
  auto start = std::chrono::steady_clock::now();
  cudaError_t code = cudaEventSynchronize(event);
  auto end = std::chrono::steady_clock::now();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
  *wall_ns = std::chrono::duration<double, std::nano>(end - start).count();
  *cpu_ns = (cpu1.tv_sec - cpu0.tv_sec) * 1e9 + (cpu1.tv_nsec - cpu0.tv_nsec);
  return (int)code;
}

// asyncAPI's kernel: adds `value` to each element. Launched by both sides of the first-use
// benchmark (benches/first_use.rs).
extern "C" __global__ void cs_bench_increment(int* data, int value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  data[i] += value;
}

// The first use of NVIDIA's asyncAPI pattern in this process, on the legacy stream: pinned and
// device memory and two events made (untimed, the context with them), then the five timed
// calls, each in this thread's CPU time (ns) into step_cpu_ns[0..5]: record, host-to-device
// copy, launch, device-to-host copy, record. `n` must be a multiple of 256. Waits, checks that
// every element was incremented, frees. Returns the CUDA result (an unincremented element:
// cudaErrorUnknown).
extern "C" int cs_floor_first_use(int n, double* step_cpu_ns) {
  int *host = nullptr, *device = nullptr;
  cudaEvent_t start, stop;
  cudaError_t code = cudaMallocHost(&host, n * sizeof(int));
  if (code == cudaSuccess) code = cudaMalloc(&device, n * sizeof(int));
  if (code == cudaSuccess) code = cudaMemset(device, 0, n * sizeof(int));
  if (code == cudaSuccess) code = cudaEventCreate(&start);
  if (code == cudaSuccess) code = cudaEventCreate(&stop);
  if (code == cudaSuccess) code = cudaDeviceSynchronize();
  if (code != cudaSuccess) return (int)code;
  for (int i = 0; i < n; ++i) host[i] = 0;
  timespec t[6];
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t[0]);
  cudaError_t steps[5];
  steps[0] = cudaEventRecord(start, 0);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t[1]);
  steps[1] = cudaMemcpyAsync(device, host, n * sizeof(int), cudaMemcpyHostToDevice, 0);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t[2]);
  cs_bench_increment<<<n / 256, 256, 0, 0>>>(device, 1);
  steps[2] = cudaGetLastError();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t[3]);
  steps[3] = cudaMemcpyAsync(host, device, n * sizeof(int), cudaMemcpyDeviceToHost, 0);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t[4]);
  steps[4] = cudaEventRecord(stop, 0);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t[5]);
  for (int i = 0; i < 5; ++i) {
    step_cpu_ns[i] = (t[i + 1].tv_sec - t[i].tv_sec) * 1e9 + (t[i + 1].tv_nsec - t[i].tv_nsec);
    if (code == cudaSuccess) code = steps[i];
  }
  if (code == cudaSuccess) code = cudaEventSynchronize(stop);
  for (int i = 0; code == cudaSuccess && i < n; ++i) {
    if (host[i] != 1) code = cudaErrorUnknown;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(device);
  cudaFreeHost(host);
  return (int)code;
}

// The device-memory benchmark's kernel (benches/memory_peers.rs, both sides): adds 1 to each
// of a chunk's `n` bytes.
extern "C" __global__ void cs_bench_chunk_add(uint8_t* chunk, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    chunk[i] += 1;
  }
}

// The floors of the device-memory benchmark, numbered as in benches/memory_peers.rs (enum
// MemoryFloor): what hand-written CUDA does for the same work.
enum MemoryFloor {
  // A read of one buffer on each of two streams, after the buffer's write was waited for once:
  // each reader records its event (for the later writer and the free). ns per pair.
  TwoReaders = 0,
  // `count` copies of `bytes` from one pinned buffer into `count` disjoint parts of a device
  // buffer on the first stream, then a synchronize. ns per copy.
  PinnedInFlight = 1,
  // `count` chunks of `bytes` over the streams in turn: a copy in from pinned memory, the
  // kernel (`blocks` × 256), a copy back, then a device synchronize. ns per pipeline.
  Pipeline = 2,
  // A kernel of three buffer arguments (two read, one written) launched on the second stream,
  // then one event recorded after it (what a hand-written program records for a later use
  // elsewhere to wait on); a device synchronize at the end. ns per launch.
  ThreeBuffers = 3,
};

// Takes three buffers and touches none: a launch's cost with three buffer arguments.
extern "C" __global__ void cs_bench_three_buffers(const uint8_t* a, const uint8_t* b, uint8_t* c) {}

// Runs `iters` rounds of `op` on `streams` (`nstreams` of them); returns ns per operation as
// above, or -1 if a CUDA call failed.
extern "C" double cs_floor_memory(int op, int iters, int count, size_t bytes, int blocks, cudaStream_t* streams,
                                  int nstreams) {
  cudaError_t failed = cudaSuccess;
  auto ok = [&](cudaError_t code) {
    if (code != cudaSuccess) failed = code;
  };
  size_t total = op == TwoReaders || op == ThreeBuffers ? 4096 : bytes * (size_t)count;
  void* host = nullptr;
  uint8_t* device = nullptr;
  std::vector<cudaEvent_t> events(2, nullptr);
  ok(cudaMallocHost(&host, op == PinnedInFlight ? bytes : total));
  ok(cudaMalloc((void**)&device, total));
  for (auto& event : events) ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  ok(cudaDeviceSynchronize());
  if (failed != cudaSuccess) return -1.0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    switch (op) {
      case TwoReaders:
        ok(cudaEventRecord(events[0], streams[0]));
        ok(cudaEventRecord(events[1], streams[1]));
        break;
      case PinnedInFlight:
        for (int k = 0; k < count; ++k) {
          ok(cudaMemcpyAsync(device + k * bytes, host, bytes, cudaMemcpyHostToDevice, streams[0]));
        }
        ok(cudaStreamSynchronize(streams[0]));
        break;
      case ThreeBuffers:
        cs_bench_three_buffers<<<1, 1, 0, streams[1]>>>(device, device + 1024, device + 2048);
        ok(cudaGetLastError());
        ok(cudaEventRecord(events[0], streams[1]));
        break;
      case Pipeline:
        for (int k = 0; k < count; ++k) {
          cudaStream_t s = streams[k % nstreams];
          uint8_t* h = (uint8_t*)host + k * bytes;
          ok(cudaMemcpyAsync(device + k * bytes, h, bytes, cudaMemcpyHostToDevice, s));
          cs_bench_chunk_add<<<blocks, 256, 0, s>>>(device + k * bytes, bytes);
          ok(cudaGetLastError());
          ok(cudaMemcpyAsync(h, device + k * bytes, bytes, cudaMemcpyDeviceToHost, s));
        }
        ok(cudaDeviceSynchronize());
        break;
    }
  }
  if (op == TwoReaders || op == ThreeBuffers) ok(cudaDeviceSynchronize());
  auto end = std::chrono::steady_clock::now();
  for (auto event : events) ok(cudaEventDestroy(event));
  ok(cudaFree(device));
  ok(cudaFreeHost(host));
  if (failed != cudaSuccess) return -1.0;
  double per = op == PinnedInFlight ? (double)iters * count : (double)iters;
  return std::chrono::duration<double, std::nano>(end - start).count() / per;
}
