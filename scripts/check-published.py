"""What crates.io and docs.rs users get, where no build here would notice a mistake:

* rust-version 1.85 (the first with edition 2024) is true: clippy's `incompatible_msrv` catches
  library APIs newer than it, not language features; the one this code base reaches for is the
  let chain (`if a && let Some(b) = c`, Rust 1.88), refused in the published crates' sources and
  build scripts. (The `cudarc` feature needs 1.88 anyway: cudarc 0.19 depends on libloading 0.9.)
* the crate READMEs, which crates.io shows away from the repository, link absolutely."""
import os, re, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
CRATES = ['cuda-stream-sys', 'cuda-stream', 'cuda-stream-build']
LET_CHAIN = re.compile(r'&&\s*let\b|\b(?:if|while)\s+let\b[^{;]*?&&')
LINK = re.compile(r'\]\(([^)\s]+)\)')
failures = []
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
                failures.append(f'{os.path.relpath(path, root)}:{line}: a let chain needs Rust 1.88 '
                                '(rust-version is 1.85): nest the ifs')
    readme = os.path.join(root, crate, 'README.md')
    for match in LINK.finditer(open(readme).read()):
        if not re.match(r'https?://|#', match.group(1)):
            failures.append(f'{crate}/README.md: the relative link {match.group(1)} breaks on crates.io')
for failure in failures:
    print('error: ' + failure, file=sys.stderr)
if failures:
    sys.exit(1)
print(f'ok: {", ".join(CRATES)}: no let chains (rust-version 1.85), README links absolute')
