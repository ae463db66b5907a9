#!/usr/bin/env bash
# Miri on the crate's pure-Rust parts (issue 40): the race model and its clocks, the mode switch,
# the live counts, an event's record-state word, the stream pool's lock-free free list and the
# buffers' ordering ledger with its model check. Their unit tests run under Miri's interpreter,
# which reports undefined behaviour, data races and (with weak-memory emulation, Miri's default)
# orderings too weak for what the code reads, once per seed: each seed picks other thread
# interleavings, other weak-memory outcomes and other allocation addresses. Tests too slow for
# the interpreter run fewer rounds under cfg(miri). Nothing here calls CUDA (Miri cannot); the
# fast-call shim's membarrier syscall is unsupported, so call::uncaptured_calls stays out (loom
# checks that protocol: tests/loom_fast_calls.rs).
#   ./dev miri                 the seeds below
#   MIRI_SEEDS="1 2" ./dev miri
#   MIRI_OPTIONAL=1 ./dev miri a machine that cannot install the toolchain says so and passes
# CI runs it after ./dev test and ./dev lint (.ci/run), three seeds, about five minutes on two
# cores after the toolchain's install (about a minute). The toolchain is a pinned nightly
# (MIRI_TOOLCHAIN), so that a new nightly's Miri cannot change the verdict on unchanged code.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

TOOLCHAIN=${MIRI_TOOLCHAIN:-nightly-2026-05-20}

# The pinned nightly with Miri and the standard library's source (Miri builds its own sysroot
# from it), installed once; a later run finds them and installs nothing.
ensure_miri() {
  local installed
  installed=$(rustup component list --toolchain "$TOOLCHAIN" --installed 2>/dev/null || true)
  if ! grep -q '^miri' <<<"$installed" || ! grep -q '^rust-src' <<<"$installed"; then
    echo "installing $TOOLCHAIN with miri and rust-src (for Miri)..." >&2
    rustup toolchain install "$TOOLCHAIN" --profile minimal -c miri,rust-src >&2 || return 1
  fi
  cargo "+$TOOLCHAIN" miri setup >/dev/null 2>&1 || cargo "+$TOOLCHAIN" miri setup >&2
}

# libtest filters (substrings of test paths).
TESTS=(
  call::race::                 # the race model, its vector clocks, PyTorch's tests ported
  call::mode_switch::          # the mode switch shared by sync-debug and the race detector
  call::live::                 # the live counts (and call::live_captures)
  event::record_state::        # an event's record-state word
  memory::ledger::tests::      # the buffers' ledger
  memory::ledger::model::every_conflicting_pair_of_uses_is_ordered_in_random_schedules
  memory::ledger::model::two_buffers_sharing_events_order_every_conflicting_pair
)
SEEDS=${MIRI_SEEDS:-"1 2 3"}

if ! ensure_miri; then
  if [ "${MIRI_OPTIONAL:-0}" = 1 ]; then
    echo "miri: SKIPPED: $TOOLCHAIN with miri could not be installed on this machine" >&2
    exit 0
  fi
  exit 1
fi
export CARGO_TARGET_DIR=${MIRI_TARGET_DIR:-"$repo/target/miri"}
cargo "+$TOOLCHAIN" miri test --quiet -p cuda-stream --lib --no-run
for seed in $SEEDS; do
  echo "-- Miri seed $seed --"
  MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-seed=$seed" \
    cargo "+$TOOLCHAIN" miri test --quiet -p cuda-stream --lib -- "${TESTS[@]}"
  # The pool's lock-free free list; its livelock test leaks its pool on purpose (Box::leak, for
  # a thread it may leave spinning), so Miri's leak check is off for these tests only.
  MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-seed=$seed -Zmiri-ignore-leaks" \
    cargo "+$TOOLCHAIN" miri test --quiet -p cuda-stream --lib -- stream::pool::
done
