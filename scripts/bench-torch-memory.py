"""PyTorch's side of the device-memory benchmark (benches/memory_peers.rs), in its own process:
`torch.empty` + `del` of 4 KiB (the caching allocator), `Tensor.record_stream` on a second
stream and on two, pinned copies in flight (1, 16, 256 non-blocking copies of 4 KiB, then a
synchronize) and the chunked pipeline (16 chunks of 4 MiB on 4 streams: a copy in, `add_(1)`,
a copy back), ns per operation as medians of 7 repetitions. Same sizes and counts as the Rust
rows.

    python3 scripts/bench-torch-memory.py        # a CUDA GPU and PyTorch required

Writes its rows to $BENCH_OUT/bench-torch-memory.json (default target/) for
scripts/plot-memory.py.
"""
import json
import os
import statistics
import time

import torch

ITERS = 20_000
REPETITIONS = 7


def measure(body, iters=ITERS):
    body(max(iters // 10, 1))
    samples = sorted(body(iters) for _ in range(REPETITIONS))
    return statistics.median(samples), samples[0], samples[-1]


def alloc_free(n):
    start = time.perf_counter_ns()
    for _ in range(n):
        x = torch.empty(4096, dtype=torch.uint8, device="cuda")
        del x
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / n


side = torch.cuda.Stream()
kept = torch.empty(4096, dtype=torch.uint8, device="cuda")


def record_stream(n):
    start = time.perf_counter_ns()
    for _ in range(n):
        kept.record_stream(side)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / n


third = torch.cuda.Stream()


def two_readers(n):
    start = time.perf_counter_ns()
    for _ in range(n):
        kept.record_stream(side)
        kept.record_stream(third)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / n


def pinned_in_flight(count):
    host = torch.zeros(4096, dtype=torch.uint8).pin_memory()
    device = torch.empty(4096 * count, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream()

    def body(n):
        start = time.perf_counter_ns()
        for _ in range(n):
            for k in range(count):
                device[k * 4096:(k + 1) * 4096].copy_(host, non_blocking=True)
            stream.synchronize()
        return (time.perf_counter_ns() - start) / (n * count)

    return body


CHUNKS, CHUNK_BYTES = 16, 4 << 20
pipeline_streams = [torch.cuda.Stream() for _ in range(4)]
pipeline_host = [torch.zeros(CHUNK_BYTES, dtype=torch.uint8).pin_memory() for _ in range(CHUNKS)]
pipeline_device = torch.zeros(CHUNKS * CHUNK_BYTES, dtype=torch.uint8, device="cuda")


def pipeline(n):
    start = time.perf_counter_ns()
    for _ in range(n):
        for k in range(CHUNKS):
            with torch.cuda.stream(pipeline_streams[k % 4]):
                chunk = pipeline_device[k * CHUNK_BYTES:(k + 1) * CHUNK_BYTES]
                chunk.copy_(pipeline_host[k], non_blocking=True)
                chunk.add_(1)
                pipeline_host[k].copy_(chunk, non_blocking=True)
        torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / n


def empty_loop(n):
    start = time.perf_counter_ns()
    for _ in range(n):
        pass
    return (time.perf_counter_ns() - start) / n


print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}, {REPETITIONS} repetitions, ns per operation")
rows = []
for name, body, iters in [
    ("torch.empty + del, 4 KiB (caching allocator)", alloc_free, ITERS),
    ("Tensor.record_stream on a 2nd stream", record_stream, ITERS),
    ("record_stream on two streams (two readers)", two_readers, ITERS),
    *[(f"pinned H2D 4 KiB x {count} in flight, per copy", pinned_in_flight(count), max(4096 // count, 16))
      for count in (1, 16, 256)],
    (f"pipeline {CHUNKS} x 4 MiB on 4 streams, end to end", pipeline, 20),
    ("the Python loop alone", empty_loop, ITERS),
]:
    median, low, high = measure(body, iters)
    print(f"{name:<58} {median:>9.0f}   {low:.0f}..{high:.0f}")
    rows.append({"op": name, "ns": {"median": median, "min": low, "max": high}})
path = os.path.join(os.environ.get("BENCH_OUT", "target"), "bench-torch-memory.json")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as out:
    json.dump({"rows": rows}, out)
print(f"json: {path}")
