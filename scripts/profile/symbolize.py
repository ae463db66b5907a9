#!/usr/bin/env python3
"""Reads a profile that scripts/profile/sampler.c wrote ($PROF_OUT) and the unstripped binary it
sampled (built with line tables: CARGO_PROFILE_BENCH_DEBUG=line-tables-only), and prints where the
samples fell: the share of each leaf (a library, or the binary's innermost function with its
inlined callers), and with --under NAME only the samples whose stack has a frame whose function
name contains NAME.

    python3 scripts/profile/symbolize.py BINARY PROFILE [--under NAME]
"""
import collections
import re
import subprocess
import sys


def segments(binary):
    """The binary's loadable segments: (file offset, virtual address, size in the file)."""
    out = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == "LOAD":
            found.append((int(fields[1], 16), int(fields[2], 16), int(fields[4], 16)))
    return found


def read_profile(path):
    samples_text, maps_text = open(path).read().split("MAPS\n", 1)
    samples = [[int(word, 16) for word in line.split()] for line in samples_text.splitlines() if line.strip()]
    maps = []
    for line in maps_text.splitlines():
        fields = line.split()
        if len(fields) >= 6:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            maps.append((start, end, int(fields[2], 16), fields[5]))
    return samples, maps


def main():
    args = sys.argv[1:]
    under = None
    if "--under" in args:
        at = args.index("--under")
        under = args[at + 1]
        del args[at : at + 2]
    binary, profile = args

    def is_binary(library):
        # The sampled program itself (carried under any name); libraries end in .so(.N).
        return ".so" not in library and library not in ("?", "[vdso]")

    segs = segments(binary)
    samples, maps = read_profile(profile)

    def virtual(offset):
        for file_offset, vaddr, size in segs:
            if (file_offset & ~0xFFF) <= offset <= file_offset + size:
                return offset + vaddr - file_offset
        return offset

    def place(address):
        for start, end, offset, path in maps:
            if start <= address < end:
                return path.split("/")[-1], address - start + offset
        return "?", 0

    stacks = []
    for sample in samples:
        frames = []
        for depth, address in enumerate(sample):
            # Return addresses point after the call: step back into it (not for the leaf).
            library, offset = place(address if depth == 0 else address - 1)
            frames.append((library, virtual(offset)))
        # The sampler's own frames and the signal trampoline.
        while frames and frames[0][0] == "libsampler.so":
            frames.pop(0)
        if frames and frames[0][0].startswith("libc"):
            frames.pop(0)
        stacks.append(frames)
    wanted = sorted({vaddr for frames in stacks for library, vaddr in frames if is_binary(library)})
    functions = {}
    out = subprocess.run(
        ["addr2line", "-a", "-f", "-i", "-C", "-e", binary] + [hex(a) for a in wanted], capture_output=True, text=True
    ).stdout.splitlines()
    current = None
    for line in out:
        if re.fullmatch(r"0x[0-9a-f]+", line):
            current = int(line, 16)
            functions[current] = []
        elif current is not None and not line.startswith(("/", "??:")) and ":" not in line[:3]:
            functions[current].append(line)

    def names(frame):
        library, vaddr = frame
        if is_binary(library):
            return [re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", f)) for f in functions.get(vaddr, ["?"])]
        return [library]

    picked = [s for s in stacks if s and (under is None or any(under in n for f in s for n in names(f)))]
    leaves = collections.Counter()
    for frames in picked:
        leaf = names(frames[0])
        crate = [n for f in frames for n in names(f) if "cuda_stream" in n][:2]
        leaves[" < ".join(leaf[:1] + crate)] += 1
    total = len(picked)
    print(f"{profile}: {total} samples" + (f" under {under}" if under else "") + f" (of {len(stacks)})")
    libraries = collections.Counter(frames[0][0] for frames in picked)
    print("by the leaf's library: " + ", ".join(f"{lib} {100 * c / max(total, 1):.1f}%" for lib, c in libraries.most_common(6)))
    for leaf, count in leaves.most_common(40):
        print(f"{100 * count / max(total, 1):5.1f}%  {leaf[:200]}")


if __name__ == "__main__":
    main()
