# Sourced by ./dev: installs what a fresh Linux machine lacks, quietly when it is there.

# The CUDA wheels this project builds against; the GPU host's driver runs 13.0 and nothing newer
# (an unpinned nvvm pulls a newer one that ptxas rejects).
CUDA_WHEELS=('nvidia-cuda-nvcc==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*' 'nvidia-nvvm==13.0.*')

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "error: '$*' needs root, and sudo is not installed" >&2; return 1; fi
}

ensure_rust() {
  if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] || {
      echo "installing Rust (rustup, minimal profile)..." >&2
      curl -sSf https://sh.rustup.rs | sh -s -- -y -q --profile minimal -c rustfmt,clippy >&2
    }
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
}

ensure_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return
  # libclang itself (libclang.so or libclang-14.so), not libclang-cpp; ldconfig lives in /sbin,
  # which a non-root PATH lacks.
  local ldconfig; ldconfig=$(PATH="$PATH:/sbin:/usr/sbin" command -v ldconfig || true)
  [ -n "$ldconfig" ] && "$ldconfig" -p 2>/dev/null | grep -Eq 'libclang(-[0-9.]+)?\.so' && return
  echo "installing libclang (bindgen needs it)..." >&2
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq libclang-dev >/dev/null
}

# A toolkit the user already has wins (the same order cuda-stream-sys searches); otherwise the
# pinned wheels go into .toolkit/ in the repository.
ensure_toolkit() {
  if [ -n "${CUDA_PATH:-}${CUDA_HOME:-}${CUDA_ROOT:-}${CUDA_TOOLKIT_ROOT_DIR:-}" ] || command -v nvcc >/dev/null \
     || [ -e /usr/local/cuda/include/cuda_runtime_api.h ] || [ -e /opt/cuda/include/cuda_runtime_api.h ]; then
    return
  fi
  local root="$repo/.toolkit/py/nvidia/cu13"
  if [ ! -x "$root/bin/nvcc" ] || [ ! -e "$root/lib/libcudart_static.a" ]; then
    echo "installing the CUDA 13.0 toolkit from NVIDIA's PyPI wheels into .toolkit/ ..." >&2
    python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
      --target "$repo/.toolkit/py" --upgrade "${CUDA_WHEELS[@]}" >&2
  fi
  export CUDA_PATH="$root"
}

# NVIDIA's CUDA 12 wheels, for the build that proves CUDA 12 support: the runtime in its own
# root, the crt/ headers in the nvcc wheel (which has no nvcc).
CUDA12_WHEELS=('nvidia-cuda-runtime-cu12==12.9.*' 'nvidia-cuda-nvcc-cu12==12.9.*')

ensure_cuda12() {
  local site="$repo/.toolkit/cu12"
  if [ ! -e "$site/nvidia/cuda_runtime/include/cuda_runtime_api.h" ] || [ ! -d "$site/nvidia/cuda_nvcc/include/crt" ]; then
    echo "installing the CUDA 12.9 runtime wheels into .toolkit/cu12 ..." >&2
    python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
      --target "$site" --upgrade "${CUDA12_WHEELS[@]}" >&2
  fi
  CUDA12_ROOT="$site/nvidia/cuda_runtime"
}

ensure_all() {
  ensure_rust
  ensure_libclang
  ensure_toolkit
}
