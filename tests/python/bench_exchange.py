"""What an exchange with PyTorch costs through cuda-stream's `python` feature, against PyTorch's
own DLPack calls, in one process on one GPU: per call, the median of 7 rounds of 2,000 calls,
and the spread of the rounds (min..max).

Run: python3 tests/python/bench_exchange.py EXT_DIR [JSON_OUT]
"""

import importlib
import json
import statistics
import sys
import time

ROUNDS, CALLS = 7, 2000


def measure(call):
    for _ in range(200):
        call()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        for _ in range(CALLS):
            call()
        rounds.append((time.perf_counter_ns() - start) / CALLS)
    return {"median_ns": statistics.median(rounds), "min_ns": min(rounds), "max_ns": max(rounds)}


def main(directory, out=None):
    import torch

    sys.path.insert(0, directory)
    ext = importlib.import_module("cuda_stream_ext")
    n = 1 << 10
    home = ext.new_stream(0)
    ours = ext.written_on_two_streams(home, n, 1.0, 2.0, 0)
    theirs = torch.ones(n, device="cuda")
    side = torch.cuda.Stream()
    stream = ext.new_stream(0)
    torch.cuda.synchronize()
    handle = side.cuda_stream
    rows = {}
    # Producer: one `__dlpack__` call for a consumer's stream, and its capsule dropped.
    with torch.cuda.stream(side):
        rows["__dlpack__(stream=side), ours"] = measure(lambda: ours.__dlpack__(stream=handle))
        rows["__dlpack__(stream=side), PyTorch's"] = measure(lambda: theirs.__dlpack__(stream=handle))
    # Export: torch.from_dlpack of our buffer, against a PyTorch tensor's own, with the tensor
    # dropped (its deleter), on PyTorch's default stream and on a side stream.
    rows["torch.from_dlpack + del, ours"] = measure(lambda: torch.from_dlpack(ours))
    rows["torch.from_dlpack + del, PyTorch's"] = measure(lambda: torch.from_dlpack(theirs))
    with torch.cuda.stream(side):
        rows["torch.from_dlpack + del on a side stream, ours"] = measure(lambda: torch.from_dlpack(ours))
        rows["torch.from_dlpack + del on a side stream, PyTorch's"] = measure(lambda: torch.from_dlpack(theirs))
    # Import: a PyTorch tensor into a buffer on our stream and dropped (handed back once its
    # uses completed: a wait), against torch.from_dlpack of the same tensor.
    api = "C exchange API" if hasattr(torch.Tensor, "__dlpack_c_exchange_api__") else "no C API: __dlpack__"
    rows[f"import + drop of a PyTorch tensor, ours ({api})"] = measure(lambda: ext.import_len(theirs, stream))
    rows["import + drop of a PyTorch tensor, ours (__dlpack__)"] = measure(
        lambda: ext.import_len(theirs, stream, "dlpack")
    )
    rows["torch.from_dlpack + del of a PyTorch tensor"] = measure(lambda: torch.from_dlpack(theirs))
    mode = "per-thread" if ext.PER_THREAD else "legacy"
    print(f"{'call (' + mode + ' build)':<60} {'median ns':>10} {'spread ns':>16}")
    for name, row in rows.items():
        print(f"{name:<60} {row['median_ns']:>10.0f} {row['min_ns']:>7.0f}..{row['max_ns']:<7.0f}")
    if out:
        with open(out, "w") as f:
            json.dump({"mode": mode, "torch": torch.__version__, "rounds": ROUNDS, "calls": CALLS, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
