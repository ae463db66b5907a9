#!/usr/bin/env bash
# Builds every test, example and benchmark binary in release mode into target/gpu-bundle/, with
# run.sh, for a GPU host that has a driver but no Rust and no toolkit (cudart is linked
# statically). Tests are built in both default-stream modes: bin/legacy/ and bin/per-thread/.
# Kernels are built for sm_90 (the H100 and H200 hosts), unless CUDA_STREAM_ARCHS says otherwise.
#   scripts/gpu-bundle.sh              the bundle
#   scripts/gpu-bundle.sh --ptx-only   also bin/ptx/: the tests that build kernels (the
#                                      workspace's and templates/kernel-tests') with PTX only
#                                      (compute_75, no SASS), which every GPU from Turing on runs
#                                      through the driver's JIT: `run.sh --only ptx/` on a GPU
#                                      other than the one the bundle was built for
set -euo pipefail
cd "$(dirname "$0")/.."
ptx=0
for argument in "$@"; do
  case "$argument" in
    --ptx-only) ptx=1 ;;
    *) echo "unknown argument $argument" >&2; exit 2 ;;
  esac
done
export CUDA_STREAM_ARCHS=${CUDA_STREAM_ARCHS:-90}
bundle=target/gpu-bundle
rm -rf "$bundle"
mkdir -p "$bundle/bin/legacy" "$bundle/bin/per-thread" "$bundle/bin/cuda12" "$bundle/bin/examples" "$bundle/bin/benches"

# Copies the executables of the target kinds $2 (comma-separated) that a cargo
# --message-format=json build reports into $1.
collect() {
  python3 -c '
import json, os, re, shutil, sys
dest, kinds = sys.argv[1], set(sys.argv[2].split(","))
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    exe = msg.get("executable") if msg.get("reason") == "compiler-artifact" else None
    if not exe or not kinds.intersection(msg["target"]["kind"]):
        continue
    if msg["target"]["name"] == "compile_fail":
        continue  # runs the compiler (trybuild): a CI job, not one for the GPU host
    name = msg["target"]["name"].replace("-", "_")
    if "lib" in msg["target"]["kind"]:
        name = "unit_" + name
    shutil.copy2(exe, os.path.join(dest, name))
    print("  " + os.path.join(dest, name))
' "$1" "$2"
}

echo "building tests (legacy default stream)..."
cargo test --workspace --release --no-run --message-format=json --quiet | collect "$bundle/bin/legacy" lib,test
echo "building tests (per-thread default stream)..."
cargo test --workspace --release --no-run --features per-thread-default-stream --message-format=json --quiet \
  | collect "$bundle/bin/per-thread" lib,test
echo "building templates/kernel-tests (both modes)..."
(cd templates/kernel-tests && CARGO_TARGET_DIR=../../target/kernel-tests cargo test --release --no-run \
  --message-format=json --quiet) | collect "$bundle/bin/legacy" test
(cd templates/kernel-tests && CARGO_TARGET_DIR=../../target/kernel-tests cargo test --release --no-run \
  --features per-thread-default-stream --message-format=json --quiet) | collect "$bundle/bin/per-thread" test
if [ -n "${CUDA12_ROOT:-}" ]; then
  echo "building cuda-stream's own tests against CUDA 12 ($CUDA12_ROOT)..."
  CUDA_PATH="$CUDA12_ROOT" CARGO_TARGET_DIR=target/cuda12 cargo test -p cuda-stream -p cuda-stream-sys --release \
    --no-run --message-format=json --quiet | collect "$bundle/bin/cuda12" lib,test
fi
if [ $ptx = 1 ]; then
  # Their own target directory: switching CUDA_STREAM_ARCHS back and forth in one would rebuild
  # the kernel packages each time.
  echo "building the kernel tests with PTX only (compute_75), for the driver's JIT..."
  mkdir -p "$bundle/bin/ptx"
  CUDA_STREAM_ARCHS=compute_75 CARGO_TARGET_DIR=target/ptx cargo test -p cuda-stream-tests --release --no-run \
    --message-format=json --quiet | python3 scripts/kernel-archs.py --expect compute_75 --pass \
    | collect "$bundle/bin/ptx" lib,test
  (cd templates/kernel-tests && CUDA_STREAM_ARCHS=compute_75 CARGO_TARGET_DIR=../../target/ptx cargo test --release \
    --no-run --message-format=json --quiet) | python3 scripts/kernel-archs.py --expect compute_75 --pass \
    | collect "$bundle/bin/ptx" test
fi
echo "building examples and benchmarks..."
cargo build --workspace --release --examples --message-format=json --quiet | collect "$bundle/bin/examples" example
cargo bench --workspace --no-run --message-format=json --quiet | collect "$bundle/bin/benches" bench
echo "building the documented build.rs in every crate shape..."
scripts/check-crate-shapes.sh --bundle "$bundle/bin/shapes"
# The stand-in NVTX tool of tests/profiling/nvtx.rs, which run.sh names to it.
echo "building the Python exchange tests' extension (both modes)..."
scripts/build-python-ext.sh
mkdir -p "$bundle/bin/python"
cp -r target/pyext/legacy target/pyext/per-thread tests/python/test_exchange.py tests/python/bench_exchange.py \
  "$bundle/bin/python/"
for mode in legacy per-thread; do
  printf '#!/usr/bin/env bash\n# The Python exchange tests against the %s build of the extension.\ncd "$(dirname "$0")" && exec python3 test_exchange.py "$PWD/%s"\n' \
    "$mode" "$mode" > "$bundle/bin/python/exchange_${mode//-/_}"
  chmod +x "$bundle/bin/python/exchange_${mode//-/_}"
done
mkdir -p "$bundle/bin/lib"
cp "$(ls -t target/release/build/cuda-stream-tests-*/out/libnvtx_recorder.so | head -1)" "$bundle/bin/lib/"
cp scripts/bundle-run.sh "$bundle/run.sh"
chmod +x "$bundle/run.sh"
strip "$bundle"/bin/{legacy,per-thread,cuda12,ptx,examples,benches,shapes}/* 2>/dev/null || true
# Packed: the carried folder must stay under 64 MiB, and statically linked binaries share most
# of their bytes (cudart). run.sh unpacks it on the GPU host.
echo "packing $(du -sh "$bundle/bin" | cut -f1) of binaries..."
tar -C "$bundle" -cf - bin | xz -T0 -6 > "$bundle/bin.tar.xz"
rm -rf "$bundle/bin"
echo "bundle: $bundle ($(du -sh "$bundle" | cut -f1))"
