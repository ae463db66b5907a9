#!/usr/bin/env python3
"""Draws the device-memory comparison as two SVG bar charts, with the Python standard library
only: stream-ordered alloc+free of 4 KiB, and a buffer's use on a second stream, for the raw
C++ floor, cuda-stream, cudarc (event tracking on and off) and PyTorch, each in ns per
operation (median, with the min..max spread as a whisker).

    python3 scripts/plot-memory.py --dir DIR [--out docs/plots]

DIR holds bench-overhead.json (benches/overhead.rs), bench-memory-peers.json
(benches/memory_peers.rs) and bench-torch-memory.json (scripts/bench-torch-memory.py) of one
device call.
"""
import argparse
import json
import os


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["rows"] if isinstance(data, dict) else data


def cell(stats):
    return (stats["median"], stats["min"], stats["max"])


def bars(directory):
    overhead = {row["op"]: row for row in load(os.path.join(directory, "bench-overhead.json"))}
    peers = {row["op"]: row["ns"] for row in load(os.path.join(directory, "bench-memory-peers.json"))}
    torch = {row["op"]: row["ns"] for row in load(os.path.join(directory, "bench-torch-memory.json"))}
    alloc = overhead["buffer alloc+free 4 KiB (stream-ordered)"]
    use = overhead["buffer use on a 2nd stream (vs record+wait)"]
    return {
        "memory-alloc-free": ("alloc + free of 4 KiB, stream-ordered (ns)", [
            ("C++ cudaMallocAsync + cudaFreeAsync", cell(alloc["cpp_ns"])),
            ("cuda-stream DeviceBuffer", cell(alloc["safe_ns"])),
            ("cudarc CudaSlice, event tracking on", cell(peers["cudarc CudaSlice alloc+free 4 KiB (event tracking on)"])),
            ("cudarc CudaSlice, event tracking off", cell(peers["cudarc CudaSlice alloc+free 4 KiB (event tracking off)"])),
            ("PyTorch torch.empty + del (caching)", cell(torch["torch.empty + del, 4 KiB (caching allocator)"])),
        ]),
        "memory-use-on-second-stream": ("a buffer's use on a second stream (ns)", [
            ("C++ driver record + wait", cell(use["driver_ns"])),
            ("cuda-stream use_on (ordered)", cell(use["safe_ns"])),
            ("cudarc device_ptr, event tracking on", cell(peers["cudarc CudaSlice use on a 2nd stream (event tracking on)"])),
            ("cudarc device_ptr, tracking off (unordered)", cell(peers["cudarc CudaSlice use on a 2nd stream (event tracking off)"])),
            ("PyTorch Tensor.record_stream", cell(torch["Tensor.record_stream on a 2nd stream"])),
        ]),
    }


def svg(title, rows):
    width, left, bar, gap, top = 760, 300, 22, 10, 40
    scale = (width - left - 70) / max(high for _, (_, _, high) in rows)
    height = top + len(rows) * (bar + gap) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="22" font-size="14" font-weight="bold">{title}</text>']
    for i, (label, (median, low, high)) in enumerate(rows):
        y = top + i * (bar + gap)
        colour = "#2b6cb0" if label.startswith("cuda-stream") else "#a0aec0"
        out.append(f'<text x="{left - 8}" y="{y + bar * 0.7}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{max(median * scale, 1):.1f}" height="{bar}" fill="{colour}"/>')
        out.append(f'<line x1="{left + low * scale:.1f}" x2="{left + high * scale:.1f}" y1="{y + bar / 2}" y2="{y + bar / 2}" stroke="black"/>')
        out.append(f'<text x="{left + max(median, high) * scale + 6:.1f}" y="{y + bar * 0.7}">{median:.0f}</text>')
    out.append(f'<text x="{left}" y="{height - 8}" fill="#555">median, whisker min..max of 7 repetitions; one device call</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--out", default="docs/plots")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, (title, rows) in bars(args.dir).items():
        path = os.path.join(args.out, f"{name}.svg")
        with open(path, "w") as f:
            f.write(svg(title, rows))
        print(path)


if __name__ == "__main__":
    main()
