#!/usr/bin/env bash
# cuda-stream's documentation as docs.rs builds it: no toolkit (DOCS_RS: cuda-stream-sys's
# committed bindings), the features and rustdoc arguments of its [package.metadata.docs.rs]
# (`--cfg docsrs`, which turns on `feature(doc_cfg)`: docs.rs builds with nightly, and
# RUSTC_BOOTSTRAP=cuda_stream lets this stable rustdoc do the same for that crate alone), no
# warning; then the feature badges of the cudarc and testing items are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
{ read -r features; read -r rustdoc_args; } < <(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
package = next(p for p in json.load(sys.stdin)["packages"] if p["name"] == "cuda-stream")
docs_rs = package["metadata"]["docs"]["rs"]
print(",".join(docs_rs.get("features", [])))
print(" ".join(docs_rs.get("rustdoc-args", [])))')
env -u CUDA_PATH DOCS_RS=1 RUSTC_BOOTSTRAP=cuda_stream RUSTDOCFLAGS="$rustdoc_args -D warnings" \
  CARGO_TARGET_DIR=target/docsrs cargo doc -p cuda-stream --no-deps --quiet --features "$features"
status=0
for page_feature in struct.BorrowedStream.html:cudarc struct.StreamRef.html:cudarc testing/index.html:testing \
    macro.gpu_or_skip.html:testing profiling/fn.range.html:nvtx python/index.html:python; do
  page=${page_feature%%:*} feature=${page_feature##*:}
  if grep -qF "Available on <strong>crate feature <code>$feature</code></strong> only" "target/docsrs/doc/cuda_stream/$page"; then
    echo "ok: $page says it needs the feature $feature"
  else
    echo "FAILED: $page does not say that it needs the feature $feature"; status=1
  fi
done
exit $status
