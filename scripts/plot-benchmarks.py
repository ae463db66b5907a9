#!/usr/bin/env python3
"""Draws the benchmarks' JSON as SVG line plots, with the Python standard library only.

Reads `bench-scale.json` and `bench-completion-latency.json` (from $BENCH_OUT, default
target/), and writes one plot per operation and load axis into docs/plots/: x is the load
(live streams or threads, log scale), y the cost in ns per operation, one line per variant (C++
runtime, C++ driver, cuda-stream) with its min..max spread as a bar at each point, and the
device named in the title.

A file is plotted if it is a JSON object with "rows" (or a list of rows) where each row has
"op", a numeric "load", optionally "axis", and one or more "<variant>_ns" cells of the form
{"median": ..., "min": ..., "max": ...}; "device" at the top names the GPU. benches/scale.rs
writes that shape. A file with "variants" of {"variant", "median_us", "min_us", "max_us"}
(benches/completion_latency.rs) is drawn as one horizontal bar per variant, its min..max as a
whisker, on a log scale, with the goal (a multiple of the first variant, the floor) as a line.
A missing file is skipped, a file of another shape is reported and skipped.

    python3 scripts/plot-benchmarks.py [--dir target] [--out docs/plots] [FILE.json ...]
"""

import argparse
import json
import math
import os
import re
import sys
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 760, 420
LEFT, RIGHT, TOP, BOTTOM = 80, 230, 48, 56
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
LABELS = {"cpp": "C++ runtime", "driver": "C++ driver", "ours": "cuda-stream", "ffi": "raw FFI", "safe": "cuda-stream"}
AXIS_LABELS = {"streams": "live streams (log scale)", "threads": "threads (log scale)"}


def load(path):
    """The parsed JSON at `path`, or None (said why) when it is missing or unreadable."""
    if not os.path.exists(path):
        print(f"{path}: not there, skipped")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        print(f"{path}: unreadable ({error}), skipped")
        return None


def is_cell(value):
    return isinstance(value, dict) and isinstance(value.get("median"), (int, float))


def figures(doc):
    """{(op, axis): {"rows": [...], "variants": [key, ...]}} of the rows that can be plotted."""
    rows = doc.get("rows") if isinstance(doc, dict) else doc
    groups = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("load"), (int, float)) or row["load"] <= 0:
            continue
        group = groups.setdefault((str(row.get("op", "?")), str(row.get("axis", "load"))), {"rows": [], "variants": []})
        group["rows"].append(row)
        for key, value in row.items():
            if key.endswith("_ns") and is_cell(value) and key not in group["variants"]:
                group["variants"].append(key)
    return groups


def label(key, rows):
    """The legend text of the variant `key` ("cpp_ns" -> "C++ runtime", with the floor's name when
    the rows say what it is)."""
    base = key[: -len("_ns")]
    text = LABELS.get(base, base)
    floors = {row.get("cpp_floor") for row in rows if base == "cpp" and row.get("cpp_floor")}
    if len(floors) == 1:
        floor = floors.pop()
        if floor.startswith("C++"):
            text = floor
    return text


def nice_step(span, ticks=5):
    raw = span / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def y_scale(values):
    """(to_unit, ticks, log): a map of ns to 0..1 and the tick values. Log when the values span
    more than 20x, else linear from 0."""
    low, high = min(values), max(values)
    if low > 0 and high / low > 20:
        lo, hi = math.floor(math.log10(low)), math.ceil(math.log10(high))
        hi = max(hi, lo + 1)
        ticks = [m * 10**e for e in range(lo, hi + 1) for m in (1, 2, 5) if low / 2 <= m * 10**e <= high * 2]
        ticks = [t for t in ticks if 10**lo <= t <= 10**hi]
        return (lambda v: (math.log10(max(v, 10**lo)) - lo) / (hi - lo)), ticks, True
    step = nice_step(high or 1)
    top = math.ceil(high / step) * step or step
    ticks = [i * step for i in range(int(round(top / step)) + 1)]
    return (lambda v: v / top), ticks, False


def fmt(value):
    if value >= 1000:
        return f"{value / 1000:g}k" if value < 1e6 else f"{value / 1e6:g}M"
    return f"{value:g}"


def svg(title, axis, rows, variants):
    """The SVG text of one figure."""
    loads = sorted({row["load"] for row in rows})
    values = [row[key][part] for row in rows for key in variants if is_cell(row.get(key)) for part in ("min", "max", "median")
              if isinstance(row[key].get(part), (int, float))]
    to_unit, y_ticks, log_y = y_scale([v for v in values if v > 0] or [1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    lo, hi = math.log2(loads[0]), math.log2(loads[-1])

    def x(load):
        return LEFT + (plot_w / 2 if hi == lo else (math.log2(load) - lo) / (hi - lo) * plot_w)

    def y(value):
        return TOP + plot_h * (1 - min(max(to_unit(value), 0), 1))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for tick in y_ticks:
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{fmt(tick)}</text>')
    for load in loads:
        out.append(f'<line x1="{x(load):.1f}" x2="{x(load):.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{x(load):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{load:,g}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 14}" text-anchor="middle">'
        f"{escape(AXIS_LABELS.get(axis, axis + ' (log scale)'))}</text>"
    )
    y_label = "ns per operation" + (" (log scale)" if log_y else "")
    out.append(
        f'<text transform="translate(18 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">{y_label}</text>'
    )
    for index, key in enumerate(variants):
        color = COLORS[index % len(COLORS)]
        points = sorted((row["load"], row[key]) for row in rows if is_cell(row.get(key)))
        if not points:
            continue
        path = " ".join(f"{'M' if i == 0 else 'L'}{x(load):.1f},{y(cell['median']):.1f}" for i, (load, cell) in enumerate(points))
        out.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for load, cell in points:
            cx, cy = x(load), y(cell["median"])
            if isinstance(cell.get("min"), (int, float)) and isinstance(cell.get("max"), (int, float)):
                out.append(
                    f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(cell["min"]):.1f}" y2="{y(cell["max"]):.1f}" '
                    f'stroke="{color}" stroke-width="1"/>'
                )
            out.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{color}">'
                f"<title>{escape(label(key, rows))}: {cell['median']:g} ns at {load:,g}</title></circle>"
            )
        ly = TOP + 8 + index * 20
        lx = LEFT + plot_w + 14
        out.append(f'<line x1="{lx}" x2="{lx + 22}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        text = label(key, rows)
        short = text if len(text) <= 28 else text[:27] + "\u2026"
        out.append(f'<text x="{lx + 28}" y="{ly + 4}">{escape(short)}<title>{escape(text)}</title></text>')
    note_y = TOP + 8 + len(variants) * 20 + 6
    out.append(f'<text x="{LEFT + plot_w + 14}" y="{note_y}" fill="#666" font-size="10">bars: min..max</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def bars_svg(title, variants, goal):
    """A horizontal bar per variant (median), min..max as a whisker, log-x µs, goal line."""
    row, left, right, top = 34, 330, 40, 48
    width, height = 900, top + row * len(variants) + 56
    values = [v for item in variants for v in (item["min_us"], item["max_us"], item["median_us"])]
    lo = 10 ** math.floor(math.log10(max(min(values), 1e-3)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    span = width - left - right

    def x(value):
        return left + span * (math.log10(max(value, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    decade = lo
    while decade <= hi * 1.0001:
        parts.append(f'<line x1="{x(decade):.1f}" y1="{top - 6}" x2="{x(decade):.1f}" y2="{height - 44}" stroke="#ddd"/>')
        parts.append(f'<text x="{x(decade):.1f}" y="{height - 28}" text-anchor="middle">{decade:g}</text>')
        decade *= 10
    parts.append(f'<text x="{left + span / 2}" y="{height - 8}" text-anchor="middle">µs from the work ending to the waiter seeing it (log scale; median, min..max)</text>')
    for i, item in enumerate(variants):
        y = top + i * row
        color = COLORS[i % len(COLORS)]
        parts.append(f'<text x="{left - 8}" y="{y + 17}" text-anchor="end">{escape(item["variant"])}</text>')
        parts.append(f'<rect x="{left}" y="{y + 6}" width="{x(item["median_us"]) - left:.1f}" height="16" fill="{color}" opacity="0.8"/>')
        mid = y + 14
        parts.append(f'<line x1="{x(item["min_us"]):.1f}" y1="{mid}" x2="{x(item["max_us"]):.1f}" y2="{mid}" stroke="black"/>')
        parts.append(f'<text x="{x(item["max_us"]) + 4:.1f}" y="{y + 17}">{item["median_us"]:.1f}</text>')
    if goal and variants:
        gx = x(variants[0]["median_us"] * goal)
        parts.append(f'<line x1="{gx:.1f}" y1="{top - 6}" x2="{gx:.1f}" y2="{height - 44}" stroke="#d62728" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{gx + 4:.1f}" y="{top - 10}" fill="#d62728">goal: {goal:g}× the floor</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def plot_bars(path, doc, out_dir):
    """Writes the bar chart of a file with "variants"; returns the files written."""
    variants = [v for v in doc["variants"] if all(isinstance(v.get(k), (int, float)) for k in ("median_us", "min_us", "max_us"))]
    if not variants:
        print(f"{path}: no variants with median_us, min_us and max_us, skipped")
        return []
    benchmark = re.sub(r"^bench-|\.json$", "", os.path.basename(path))
    title = f"{benchmark} ({doc.get('device', 'unknown device')})"
    os.makedirs(out_dir, exist_ok=True)
    name = os.path.join(out_dir, f"{slug(benchmark)}.svg")
    with open(name, "w", encoding="utf-8") as f:
        f.write(bars_svg(title, variants, doc.get("goal_over_floor")))
    return [name]


def plot(path, out_dir):
    """Writes the figures of the JSON at `path`; returns the files written."""
    doc = load(path)
    if doc is None:
        return []
    if isinstance(doc, dict) and isinstance(doc.get("variants"), list):
        return plot_bars(path, doc, out_dir)
    groups = figures(doc)
    if not groups:
        print(f"{path}: no rows with an op, a numeric load and <variant>_ns cells, skipped")
        return []
    device = doc.get("device", "unknown device") if isinstance(doc, dict) else "unknown device"
    benchmark = doc.get("benchmark") if isinstance(doc, dict) else None
    benchmark = benchmark or re.sub(r"^bench-|\.json$", "", os.path.basename(path))
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for (op, axis), group in groups.items():
        title = f"{op} by {axis} ({device})"
        name = os.path.join(out_dir, f"{slug(benchmark)}-{slug(op)}-{slug(axis)}.svg")
        with open(name, "w", encoding="utf-8") as f:
            f.write(svg(title, axis, group["rows"], group["variants"]))
        written.append(name)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=os.environ.get("BENCH_OUT", "target"), help="where the JSON files are")
    parser.add_argument("--out", default=os.path.join("docs", "plots"), help="where the SVG files go")
    parser.add_argument("files", nargs="*", help="JSON files (default: bench-scale.json, bench-completion-latency.json)")
    args = parser.parse_args()
    files = args.files or [os.path.join(args.dir, name) for name in ("bench-scale.json", "bench-completion-latency.json")]
    written = [name for path in files for name in plot(path, args.out)]
    for name in written:
        print(name)
    print(f"{len(written)} plots written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
