"""The declared minimum Rust version (rust-version = 1.85, the first with edition 2024) against
what no toolchain here can check: clippy's `incompatible_msrv` catches library APIs newer than
it, not language features. The one such feature this code base reaches for is the let chain
(`if a && let Some(b) = c`, Rust 1.88): fails on any, in the published crates' sources and
build scripts. (The `cudarc` feature needs 1.88 anyway: cudarc 0.19 depends on libloading 0.9.)"""
import os, re, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
CRATES = ['cuda-stream-sys', 'cuda-stream', 'cuda-stream-build']
LET_CHAIN = re.compile(r'&&\s*let\b|\b(?:if|while)\s+let\b[^{;]*?&&')
found = []
for crate in CRATES:
    for directory, _, files in os.walk(os.path.join(root, crate)):
        if os.sep + 'target' in directory or os.sep + 'tests' in directory:
            continue
        for name in files:
            if not name.endswith('.rs'):
                continue
            path = os.path.join(directory, name)
            source = re.sub(r'//[^\n]*', '', open(path).read())
            for match in LET_CHAIN.finditer(source):
                line = source.count('\n', 0, match.start()) + 1
                found.append(f'{os.path.relpath(path, root)}:{line}')
if found:
    print('error: let chains need Rust 1.88; the crates declare rust-version 1.85 (nest the ifs):', file=sys.stderr)
    for place in found:
        print('  ' + place, file=sys.stderr)
    sys.exit(1)
print(f'ok: no let chains in {", ".join(CRATES)} (rust-version 1.85)')
