"""PyTorch's side of the device-memory benchmark, in its own process: `torch.empty` + `del` of
4 KiB (the caching allocator) and `Tensor.record_stream` on a second stream, ns per operation
as medians of 7 repetitions. Same sizes and counts as the overhead benchmark's memory rows.

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


def measure(body):
    body(ITERS // 10)
    samples = sorted(body(ITERS) for _ in range(REPETITIONS))
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


def empty_loop(n):
    start = time.perf_counter_ns()
    for _ in range(n):
        pass
    return (time.perf_counter_ns() - start) / n


print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}, {REPETITIONS} repetitions, ns per operation")
rows = []
for name, body in [
    ("torch.empty + del, 4 KiB (caching allocator)", alloc_free),
    ("Tensor.record_stream on a 2nd stream", record_stream),
    ("the Python loop alone", empty_loop),
]:
    median, low, high = measure(body)
    print(f"{name:<58} {median:>9.0f}   {low:.0f}..{high:.0f}")
    rows.append({"op": name, "ns": {"median": median, "min": low, "max": high}})
path = os.path.join(os.environ.get("BENCH_OUT", "target"), "bench-torch-memory.json")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as out:
    json.dump({"rows": rows}, out)
print(f"json: {path}")
