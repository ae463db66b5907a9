#!/usr/bin/env bash
# Builds tests/python/ext (the PyO3 extension of the Python exchange tests) in both
# default-stream modes, into target/pyext/{legacy,per-thread}/cuda_stream_ext.abi3.so.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo/tests/python/ext"
for mode in legacy per-thread; do
  features=()
  [[ $mode == per-thread ]] && features=(--features per-thread-default-stream)
  CARGO_TARGET_DIR="$repo/target/python-ext-$mode" cargo build --release --quiet "${features[@]}"
  mkdir -p "$repo/target/pyext/$mode"
  cp "$repo/target/python-ext-$mode/release/libcuda_stream_ext.so" "$repo/target/pyext/$mode/cuda_stream_ext.abi3.so"
done
