#!/usr/bin/env bash
# Regenerates cuda-stream-sys's bindings with the pinned toolkit and compares them with the ones
# committed in cuda-stream-sys/prebuilt/ (used without a toolkit, e.g. on docs.rs).
#   scripts/check-bindings.sh            fail on any difference (CI)
#   scripts/check-bindings.sh --update   write the regenerated ones
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for mode in legacy per-thread; do
  features=() file=cuda-stream-sys/prebuilt/bindings-13000.rs
  if [ $mode = per-thread ]; then
    features=(--features per-thread-default-stream) file=cuda-stream-sys/prebuilt/bindings-13000-per-thread.rs
  fi
  out_dir=$(cargo build -p cuda-stream-sys "${features[@]}" --message-format=json --quiet | python3 -c '
import json, sys
dirs = [m["out_dir"] for m in map(json.loads, sys.stdin)
        if m.get("reason") == "build-script-executed" and "cuda-stream-sys" in m["package_id"]]
print(dirs[-1])')
  version=$(grep -m1 'pub const CUDART_VERSION' "$out_dir/bindings.rs" | grep -o '[0-9]*;' | tr -d ';')
  if [ "$version" != 13000 ]; then
    echo "error: the toolkit found is CUDA $version; the committed bindings are from 13.0 (set CUDA_PATH)" >&2
    exit 1
  fi
  if [ "${1:-}" = --update ]; then
    cp "$out_dir/bindings.rs" "$file"
    echo "updated $file"
  elif ! diff -q "$out_dir/bindings.rs" "$file" >/dev/null; then
    echo "error: $file differs from the bindings bindgen generates now; run scripts/check-bindings.sh --update" >&2
    diff "$out_dir/bindings.rs" "$file" | head -20 >&2
    status=1
  else
    echo "ok: $file matches the generated bindings ($mode)"
  fi
done
exit $status
