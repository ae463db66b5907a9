#!/usr/bin/env bash
# Runs every binary of the GPU bundle with CUDA_STREAM_REQUIRE_GPU=1 (a missing GPU fails).
#   run.sh                        tests (both modes), examples and the Python exchange tests
#                                 (python/: the extension of each build, driven by python3 with
#                                 the host's PyTorch, CuPy, cuda.core); benchmarks with --bench
#   run.sh --sanitize TOOL        the same under compute-sanitizer --tool TOOL (memcheck,
#                                 racecheck, synccheck, initcheck); its errors count as failures
#   run.sh --bench                also the benchmarks (their JSON goes to $BENCH_OUT or ./)
#   run.sh --only PATTERN         only binaries whose path matches PATTERN (legacy/, per-thread/,
#                                 cuda12/, examples/, shapes/: the programs of the documented
#                                 build.rs in each crate shape, ptx/: the kernel tests built as PTX only,
#                                 when the bundle has them, run through the driver's JIT)
#   run.sh --gpus N               multi-GPU tests fail instead of skipping with fewer than N GPUs
#   run.sh --repeat N             run each binary N times (races that show once in many runs);
#                                 every run counts, a crash in any fails it. The API fuzzer
#                                 runs new programs each round: round R starts its seeds at
#                                 (R - 1) x CUDA_STREAM_FUZZ_PROGRAMS (default 1,000) past
#                                 CUDA_STREAM_FUZZ_FIRST (default 0)
# Test binaries run under the test harness's default threads, as `cargo test` runs them.
# BIN_TIMEOUT (seconds, default 900) stops one binary that hangs; it then counts as failed.
# Last line: "N passed, N failed" (tests, examples and benchmarks each count as one or more).
cd "$(dirname "$0")"
if [ ! -d bin ]; then
  # The binaries travel packed; unpack them next to a copy of this script.
  unpacked=${BUNDLE_DIR:-/tmp/cuda-stream-bundle}
  rm -rf "$unpacked" && mkdir -p "$unpacked"
  xz -dc bin.tar.xz | tar -C "$unpacked" -xf -
  cd "$unpacked" || exit 2
fi
export CUDA_STREAM_REQUIRE_GPU=1
# The stand-in NVTX tool of tests/profiling/nvtx.rs, carried beside the binaries.
[ -e bin/lib/libnvtx_recorder.so ] && export CUDA_STREAM_NVTX_RECORDER=$PWD/bin/lib/libnvtx_recorder.so
# NVLink multicast stays off on shared multi-GPU hosts (a program that uses it can take the
# host's GPUs out of service): NCCL, PyTorch and NVSHMEM each have a switch.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# NCCL for tests/interop/nccl.rs and the multi_gpu_nccl example: CUDA_STREAM_NCCL, else the
# nvidia-nccl-cu13 wheel of python3 (PyTorch's CUDA 13 wheels bring it). Found, it is required.
if [ -z "${CUDA_STREAM_NCCL:-}" ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl_dir" ] && [ -e "$nccl_dir/libnccl.so.2" ] && export CUDA_STREAM_NCCL="$nccl_dir/libnccl.so.2"
fi
[ -n "${CUDA_STREAM_NCCL:-}" ] && export CUDA_STREAM_REQUIRE_NCCL=1
echo "NCCL: ${CUDA_STREAM_NCCL:-not found (its tests skip)}"
sanitize="" benches=0 only="" repeat=1
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=$2; shift 2 ;;
    --bench) benches=1; shift ;;
    --only) only=$2; shift 2 ;;
    --gpus) export CUDA_STREAM_REQUIRE_GPUS=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "$sanitize" ]; then
  export CUDA_STREAM_SANITIZER=$sanitize
  # API errors are not reported: the tests provoke many on purpose and check them as values.
  # --require-cuda-init no: a binary whose tests make no CUDA call (unit tests of pure Rust) is
  # not an error of the sanitizer's; every other non-zero exit is.
  wrapper=(compute-sanitizer --tool "$sanitize" --error-exitcode 86 --target-processes all --report-api-errors no
    --require-cuda-init no)
else
  wrapper=()
fi
passed=0 failed=0
logs=${LOG_DIR:-/tmp/cuda-stream-bundle-logs}
mkdir -p "$logs"

run_one() {
  local bin=$1; shift
  local name=${bin#bin/}; local log="$logs/${name//\//_}.log"
  [ "$repeat" != 1 ] && log="$logs/${name//\//_}.$round.log"
  [ -n "$only" ] && [[ "$bin" != *$only* ]] && return
  local start=$SECONDS
  timeout "${BIN_TIMEOUT:-900}" "${wrapper[@]}" "./$bin" "$@" >"$log" 2>&1
  local rc=$?
  local p f errors=0
  p=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
  f=$(grep -Eo '; [0-9]+ failed' "$log" | awk '{s+=$2} END {print s+0}')
  if [ -n "$sanitize" ]; then
    errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$log" | awk '{s+=$3} END {print s+0}')
  fi
  if ! grep -q '^test result:' "$log"; then
    # Not a libtest binary (an example or a benchmark): one result by exit status.
    if [ $rc = 0 ]; then p=1; else f=1; fi
  elif [ $rc != 0 ] && [ "$f" = 0 ]; then
    f=1  # any non-zero exit fails: a crash, an abort, or the sanitizer (86) after the tests it reported
  fi
  if [ "$errors" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
  local status=ok; [ "$f" != 0 ] && status=FAILED
  printf '%-7s %-45s %4d passed %3d failed %s(%ds, exit %d)\n' "$status" "$name" "$p" "$f" \
    "$([ -n "$sanitize" ] && echo "$errors sanitizer errors ")" $((SECONDS - start)) $rc
  if [ "$status" = FAILED ]; then
    grep -E 'panicked|FAILED|failed|ERROR|error' "$log" | head -20 | sed 's/^/    | /'
  fi
}

fuzz_first=${CUDA_STREAM_FUZZ_FIRST:-0}
for round in $(seq "$repeat"); do
  [ "$repeat" != 1 ] && echo "== round $round of $repeat =="
  export CUDA_STREAM_FUZZ_FIRST=$((fuzz_first + (round - 1) * ${CUDA_STREAM_FUZZ_PROGRAMS:-1000}))
  for bin in bin/legacy/* bin/per-thread/* bin/cuda12/* bin/ptx/*; do [ -e "$bin" ] && run_one "$bin" --nocapture; done
  for bin in bin/examples/* bin/shapes/*; do [ -e "$bin" ] && run_one "$bin"; done
  # The Python exchange tests (PyTorch, CuPy, cuda.core of the host's python3), each build.
  for bin in bin/python/exchange_*; do [ -e "$bin" ] && run_one "$bin"; done
done
if [ $benches = 1 ]; then
  for bin in bin/benches/*; do [ -e "$bin" ] && run_one "$bin"; done
fi
echo "logs: $logs"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
