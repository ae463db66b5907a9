#!/usr/bin/env bash
# The documented build.rs (`Kernels::from_dir("kernels").compile(..)`) in every shape a user's
# crate takes, built end to end from the crates' point of view in target/crate-shapes (its
# builds share target/kernel-tests with templates/kernel-tests):
#   * a library, a binary, a library with binaries, a crate with only examples, a workspace
#     member: none has an integration test, and each builds all its targets;
#   * a library with tests: its tests get eager module loading (a test reads
#     CUDA_MODULE_LOADING, set before `main` by the constructor the build script links; no GPU
#     needed).
# Each crate's code calls its kernel's launcher, so the kernels' library is linked into every
# target that uses it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=$repo/target/crate-shapes
rm -rf "$root" && mkdir -p "$root"
export CARGO_TARGET_DIR=$repo/target/kernel-tests CUDA_STREAM_ARCHS=90
unset CUDA_COMPUTE_CAP CUDA_MODULE_LOADING

# package DIR NAME [WORKSPACE]: a package named NAME in DIR with the documented build.rs and one
# kernel; its own workspace unless WORKSPACE is "member".
package() {
  local dir=$1 name=$2 workspace=${3:-own}
  mkdir -p "$dir/kernels"
  cat >"$dir/Cargo.toml" <<EOF
[package]
name = "$name"
version = "0.1.0"
edition = "2024"
publish = false
[dependencies]
cuda-stream = { path = "$repo/cuda-stream" }
[build-dependencies]
cuda-stream-build = { path = "$repo/cuda-stream-build" }
EOF
  [ "$workspace" = own ] && echo '[workspace]' >>"$dir/Cargo.toml"
  cat >"$dir/build.rs" <<'EOF'
fn main() {
    cuda_stream_build::Kernels::from_dir("kernels").compile("my_kernels");
}
EOF
  cat >"$dir/kernels/scale.cu" <<'EOF'
#include <cuda_runtime.h>
__global__ void scale(float* x, float by, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= by;
}
extern "C" cudaError_t launch_scale(cudaStream_t stream, float* x, float by, unsigned n) {
  scale<<<(n + 255) / 256, 256, 0, stream>>>(x, by, n);
  return cudaGetLastError();
}
EOF
  cp "$repo/templates/kernel-tests/Cargo.lock" "$dir/"
}

# The launcher's declaration and a function that launches it on a stream of the crate.
launcher_code() {
  cat <<'EOF'
use cuda_stream::{StreamRef, sys};

unsafe extern "C" {
    fn launch_scale(stream: sys::cudaStream_t, x: *mut f32, by: f32, n: u32) -> sys::cudaError_t;
}

/// Scales `n` floats at `x` by `by` on `stream`.
///
/// # Safety
/// `x` is device memory of `n` floats that lives until the kernel has run.
pub unsafe fn scale(stream: &StreamRef, x: *mut f32, by: f32, n: u32) -> cuda_stream::Result<()> {
    // SAFETY: the caller's contract; the launcher takes a live stream of the current device.
    stream.launch("launch_scale", |raw| unsafe { launch_scale(raw, x, by, n) })
}
EOF
}

status=0
# build NAME DIR COMMAND...: COMMAND, run in DIR, must succeed.
build() {
  local name=$1 dir=$2; shift 2
  local output
  if output=$(cd "$dir" && "$@" 2>&1); then
    echo "ok: $name"
  else
    echo "FAILED: $name"; tail -30 <<<"$output" | sed 's/^/  | /'; status=1
  fi
}

lib=$root/library
package "$lib" shape-library
mkdir -p "$lib/src"
launcher_code >"$lib/src/lib.rs"
build 'a library' "$lib" cargo build --quiet --all-targets

bin=$root/binary
package "$bin" shape-binary
mkdir -p "$bin/src"
{ launcher_code; echo 'fn main() { let _ = scale as unsafe fn(&StreamRef, *mut f32, f32, u32) -> cuda_stream::Result<()>; }'; } >"$bin/src/main.rs"
build 'a binary' "$bin" cargo build --quiet --all-targets

both=$root/library-with-binaries
package "$both" shape-library-with-binaries
mkdir -p "$both/src/bin"
launcher_code >"$both/src/lib.rs"
echo 'fn main() { let _ = shape_library_with_binaries::scale; }' >"$both/src/bin/tool.rs"
build 'a library with binaries' "$both" cargo build --quiet --all-targets

examples=$root/examples-only
package "$examples" shape-examples-only
mkdir -p "$examples/src" "$examples/examples"
launcher_code >"$examples/src/lib.rs"
echo 'fn main() { let _ = shape_examples_only::scale; }' >"$examples/examples/demo.rs"
build 'a crate with only examples' "$examples" cargo build --quiet --all-targets

ws=$root/workspace
mkdir -p "$ws"
printf '[workspace]\nmembers = ["member"]\nresolver = "3"\n' >"$ws/Cargo.toml"
package "$ws/member" shape-member member
mv "$ws/member/Cargo.lock" "$ws/"
mkdir -p "$ws/member/src"
launcher_code >"$ws/member/src/lib.rs"
build 'a workspace member' "$ws" cargo build --quiet --all-targets

tested=$root/library-with-tests
package "$tested" shape-library-with-tests
mkdir -p "$tested/src" "$tested/tests"
launcher_code >"$tested/src/lib.rs"
cat >"$tested/tests/eager.rs" <<'EOF'
#[test]
fn the_tests_load_modules_eagerly() {
    let _ = shape_library_with_tests::scale;
    assert_eq!(std::env::var("CUDA_MODULE_LOADING").as_deref(), Ok("EAGER"));
}
EOF
build 'a library with tests (loaded eagerly)' "$tested" cargo test --quiet
# The tests folder removed: the build script runs again, and the link argument for tests goes.
rm -r "$tested/tests"
build 'the same library once its tests are gone' "$tested" cargo build --quiet --all-targets
exit $status
