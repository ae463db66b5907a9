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
# target that uses it; the library and the workspace member are used by a binary of another
# package, which links the kernels through its dependency. Each program scales floats on the
# GPU and checks them.
#   scripts/check-crate-shapes.sh               build them (CI: no GPU needed)
#   scripts/check-crate-shapes.sh --bundle DIR  also copy the programs and the eager test into
#                                               DIR, for the GPU host (gpu-bundle.sh)
set -euo pipefail
bundle=""
if [ "${1:-}" = --bundle ]; then bundle=$2; fi
repo=$(cd "$(dirname "$0")/.." && pwd)
root=$repo/target/crate-shapes
rm -rf "$root" && mkdir -p "$root"
export CARGO_TARGET_DIR=$repo/target/kernel-tests CUDA_STREAM_ARCHS=90
unset CUDA_COMPUTE_CAP CUDA_MODULE_LOADING

# manifest DIR NAME WORKSPACE DEPENDENCIES: DIR/Cargo.toml of the package NAME with the
# dependency tables DEPENDENCIES; its own workspace unless WORKSPACE is "member".
manifest() {
  local dir=$1 name=$2 workspace=$3 dependencies=$4
  mkdir -p "$dir"
  printf '[package]\nname = "%s"\nversion = "0.1.0"\nedition = "2024"\npublish = false\n%s\n' \
    "$name" "$dependencies" >"$dir/Cargo.toml"
  [ "$workspace" = own ] && echo '[workspace]' >>"$dir/Cargo.toml"
  return 0
}

# package DIR NAME [WORKSPACE]: a package named NAME in DIR with the documented build.rs and one
# kernel; its own workspace unless WORKSPACE is "member".
package() {
  local dir=$1 name=$2 workspace=${3:-own}
  mkdir -p "$dir/kernels"
  manifest "$dir" "$name" "$workspace" "[dependencies]
cuda-stream = { path = \"$repo/cuda-stream\" }
[build-dependencies]
cuda-stream-build = { path = \"$repo/cuda-stream-build\" }"
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

/// Scales `values` by `by` on device 0 through a device buffer, and copies them back.
///
/// # Errors
/// CUDA's errors (no GPU among them).
pub fn scale_on_gpu(values: &[f32], by: f32) -> cuda_stream::Result<Vec<f32>> {
    let device = cuda_stream::Device::new(0)?;
    let stream = cuda_stream::Stream::new(device, cuda_stream::StreamOptions::non_blocking())?;
    let mut buffer = cuda_stream::DeviceBuffer::from_slice(&stream, values)?;
    let (x, n) = (buffer.as_mut_ptr(), buffer.len() as u32);
    // SAFETY: `x` holds the buffer's `n` floats, used on its home stream, and the buffer lives
    // until `to_vec` has waited for the kernel.
    unsafe { scale(&stream, x, by, n)? };
    buffer.to_vec()
}
EOF
}

# A `main` that scales floats on the GPU through CRATE's `scale_on_gpu` (CRATE is `crate` in
# the crate's own binary) and says so as NAME.
main_code() {
  local crate=$1 name=$2
  cat <<EOF
fn main() {
    let values: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let scaled = ${crate}::scale_on_gpu(&values, 2.0).expect("a GPU runs the kernel");
    assert!(scaled.iter().zip(&values).all(|(s, v)| *s == 2.0 * v), "scaled on the GPU");
    println!("$name: scaled {} floats on the GPU", values.len());
}
EOF
}

# user DIR NAME DEPENDENCY PATH [WORKSPACE]: a binary package NAME in DIR, with no build
# script, that uses the package DEPENDENCY at PATH; its own workspace unless WORKSPACE is
# "member".
user() {
  local dir=$1 name=$2 dependency=$3 path=$4 workspace=${5:-own}
  mkdir -p "$dir/src"
  manifest "$dir" "$name" "$workspace" "[dependencies]
$dependency = { path = \"$path\" }"
  main_code "${dependency//-/_}" "$name" >"$dir/src/main.rs"
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
user "$root/library-user" shape-library-user shape-library ../library
cp "$repo/templates/kernel-tests/Cargo.lock" "$root/library-user/"
build 'a binary using the library' "$root/library-user" cargo build --quiet

bin=$root/binary
package "$bin" shape-binary
mkdir -p "$bin/src"
{ launcher_code; main_code crate shape-binary; } >"$bin/src/main.rs"
build 'a binary' "$bin" cargo build --quiet --all-targets

both=$root/library-with-binaries
package "$both" shape-library-with-binaries
mkdir -p "$both/src/bin"
launcher_code >"$both/src/lib.rs"
main_code shape_library_with_binaries shape-library-with-binaries >"$both/src/bin/tool.rs"
build 'a library with binaries' "$both" cargo build --quiet --all-targets

examples=$root/examples-only
package "$examples" shape-examples-only
mkdir -p "$examples/src" "$examples/examples"
launcher_code >"$examples/src/lib.rs"
main_code shape_examples_only shape-examples-only >"$examples/examples/demo.rs"
build 'a crate with only examples' "$examples" cargo build --quiet --all-targets

ws=$root/workspace
mkdir -p "$ws"
printf '[workspace]\nmembers = ["member", "runner"]\nresolver = "3"\n' >"$ws/Cargo.toml"
package "$ws/member" shape-member member
mv "$ws/member/Cargo.lock" "$ws/"
mkdir -p "$ws/member/src"
launcher_code >"$ws/member/src/lib.rs"
user "$ws/runner" shape-member-runner shape-member ../member member
build 'a workspace member (and a member using it)' "$ws" cargo build --quiet --all-targets

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
tested_binary=$(cd "$tested" && cargo test --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["executable"])')
# The tests folder removed: the build script runs again, and the link argument for tests goes.
rm -r "$tested/tests"
build 'the same library once its tests are gone' "$tested" cargo build --quiet --all-targets
if [ -n "$bundle" ] && [ $status = 0 ]; then
  mkdir -p "$bundle"
  out=$CARGO_TARGET_DIR/debug
  cp "$out/shape-binary" "$out/tool" "$out/examples/demo" "$out/shape-library-user" "$out/shape-member-runner" "$bundle/"
  cp "$tested_binary" "$bundle/shape_library_with_tests_eager"
  echo "crate shapes' programs: $(ls "$bundle" | tr '\n' ' ')"
fi
exit $status
