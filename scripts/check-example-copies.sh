#!/usr/bin/env bash
# Every example is a crate of its own once copied out of the workspace, as a new user copies it:
# examples/NAME.rs becomes src/main.rs, examples/kernels/NAME.cu (if the example has kernels)
# goes to kernels/ with the documented build.rs, and the dependencies are the published crates
# (cuda-stream with its `testing` feature for the GPU gate; cudarc or libloading where the
# example uses them). Each copy is built in target/example-copies/NAME (sharing
# target/kernel-tests with templates/kernel-tests). An example that uses the workspace's private
# test crate fails here.
#   scripts/check-example-copies.sh [NAME...]   (default: every example)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=$repo/target/example-copies
export CARGO_TARGET_DIR=$repo/target/kernel-tests CUDA_STREAM_ARCHS=90
unset CUDA_COMPUTE_CAP


names=("$@")
if [ ${#names[@]} = 0 ]; then
  for example in "$repo"/examples/*.rs; do names+=("$(basename "$example" .rs)"); done
fi

status=0
for name in "${names[@]}"; do
  source=$repo/examples/$name.rs
  if grep -q 'cuda_stream_tests' "$source"; then
    echo "FAILED: $name uses the workspace's private test crate (cuda_stream_tests)"; status=1; continue
  fi
  crate=$root/$name
  rm -rf "$crate" && mkdir -p "$crate/src"
  cp "$source" "$crate/src/main.rs"
  features='"testing"'
  extra=""
  if grep -q 'cudarc' "$source"; then
    features='"testing", "cudarc"'
    extra+='cudarc = { version = "0.19", default-features = false, features = ["driver", "std", "cuda-13000", "dynamic-loading"] }'$'\n'
  fi
  if grep -q 'libloading' "$source"; then
    extra+='libloading = "0.8"'$'\n'
  fi
  {
    printf '[package]\nname = "%s"\nversion = "0.1.0"\nedition = "2024"\npublish = false\n' "${name//_/-}"
    printf '[dependencies]\ncuda-stream = { path = "%s/cuda-stream", features = [%s] }\n%s' "$repo" "$features" "$extra"
  } >"$crate/Cargo.toml"
  if [ -e "$repo/examples/kernels/$name.cu" ]; then
    mkdir -p "$crate/kernels"
    cp "$repo/examples/kernels/$name.cu" "$crate/kernels/"
    printf '[build-dependencies]\ncuda-stream-build = { path = "%s/cuda-stream-build" }\n' "$repo" >>"$crate/Cargo.toml"
    printf 'fn main() {\n    cuda_stream_build::Kernels::from_dir("kernels").compile("kernels");\n}\n' >"$crate/build.rs"
  fi
  echo '[workspace]' >>"$crate/Cargo.toml"
  cp "$repo/Cargo.lock" "$crate/"
  if output=$(cd "$crate" && cargo build --quiet 2>&1); then
    echo "ok: $name builds as a crate of its own"
  else
    echo "FAILED: $name"; tail -30 <<<"$output" | sed 's/^/  | /'; status=1
  fi
done
exit $status
