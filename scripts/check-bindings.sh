#!/usr/bin/env bash
# Regenerates cuda-stream-sys's bindings with the pinned toolkit (bindgen, forced by
# CUDA_STREAM_SYS_BINDGEN=1) and compares them with the ones committed in
# cuda-stream-sys/prebuilt/ (used for CUDA 13.0 without libclang, and without a toolkit).
#   scripts/check-bindings.sh            fail on any difference (CI)
#   scripts/check-bindings.sh --update   write the regenerated ones
# The build script runs outside Cargo (scripts/check-sys-build.py): nothing is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/check-sys-build.py --bindings "$@"
