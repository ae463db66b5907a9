#!/usr/bin/env bash
# What a user's crate sees when something is wrong, checked end to end on a throwaway crate in
# target/user-errors (its build shares target/kernel-tests with templates/kernel-tests):
#   * gpu_or_skip! without cuda-stream's `testing` feature: an error that names the feature;
#   * a CUDA_STREAM_ARCHS that names no architecture: an error that names the variable;
#   * a kernel that nvcc cannot compile: nvcc's command line and its output.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
crate=$repo/target/user-errors
rm -rf "$crate" && mkdir -p "$crate/src" "$crate/tests" "$crate/kernels" "$crate/broken"
cat >"$crate/Cargo.toml" <<EOF
[package]
name = "user-errors"
version = "0.1.0"
edition = "2024"
publish = false
[dependencies]
cuda-stream = { path = "$repo/cuda-stream" }
[build-dependencies]
cuda-stream-build = { path = "$repo/cuda-stream-build" }
[workspace]
EOF
cat >"$crate/build.rs" <<'EOF'
fn main() {
    println!("cargo:rerun-if-env-changed=WITH_BROKEN_KERNEL");
    let mut kernels = cuda_stream_build::Kernels::from_dir("kernels");
    if std::env::var_os("WITH_BROKEN_KERNEL").is_some() {
        kernels.file("broken/broken.cu");
    }
    kernels.compile("user_errors");
}
EOF
echo '//! A crate with mistakes in it.' >"$crate/src/lib.rs"
echo '#[test] fn gated() { let _device = cuda_stream::gpu_or_skip!(); }' >"$crate/tests/gate.rs"
echo '__global__ void fine() {}' >"$crate/kernels/fine.cu"
echo '__global__ void broken() { int x = ; }' >"$crate/broken/broken.cu"
cp "$repo/templates/kernel-tests/Cargo.lock" "$crate/"
export CARGO_TARGET_DIR=$repo/target/kernel-tests
unset CUDA_COMPUTE_CAP WITH_BROKEN_KERNEL

status=0
# expect NAME TEXT... -- COMMAND: COMMAND must fail, and its output hold every TEXT.
expect() {
  local name=$1; shift
  local texts=()
  while [ "$1" != -- ]; do texts+=("$1"); shift; done
  shift
  local output
  if output=$(cd "$crate" && "$@" 2>&1); then
    echo "FAILED: $name (the build succeeded)"; status=1; return
  fi
  for text in "${texts[@]}"; do
    if ! grep -qF -- "$text" <<<"$output"; then
      echo "FAILED: $name (no '$text' in:)"; tail -30 <<<"$output" | sed 's/^/  | /'; status=1; return
    fi
  done
  echo "ok: $name"
}

expect 'gpu_or_skip! without the testing feature names the feature' \
  "\`gpu_or_skip!\` needs cuda-stream's \`testing\` feature" -- \
  env CUDA_STREAM_ARCHS=90 cargo check --quiet --tests
expect 'a CUDA_STREAM_ARCHS that is no architecture is refused by name' \
  'CUDA_STREAM_ARCHS="sm_9x": `sm_9x` is not a GPU architecture' -- \
  env CUDA_STREAM_ARCHS=sm_9x cargo check --quiet --lib
expect 'a failed nvcc shows its command line and its output' \
  'nvcc failed on broken/broken.cu' 'command: ' '/bin/nvcc' '-gencode=arch=compute_90,code=sm_90' \
  'broken/broken.cu -o ' 'error: expected an expression' -- \
  env CUDA_STREAM_ARCHS=90 WITH_BROKEN_KERNEL=1 cargo check --quiet --lib
exit $status
