#!/usr/bin/env bash
# Configures and builds ringzero into build/ (Release, warnings as errors, -march=native).
# The CUDA backend is built when nvcc is found (on PATH or in /usr/local/cuda/bin).
#
#   bash scripts/build.sh                                  # everything (every test too)
#   bash scripts/build.sh --target ringzero                # only the named targets
#   bash scripts/build.sh --target ringzero --target test_base -DRINGZERO_CUDA=OFF
# Arguments other than --target go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) [ $# -ge 2 ] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
              targets+=(--target "$2"); shift 2 ;;
    --target=*) targets+=(--target "${1#--target=}"); shift ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
source scripts/ccache.sh
launcher=("${rz_ccache_launcher[@]}")
[ ${#launcher[@]} -eq 0 ] || launcher+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# Configure's own output is kept out of the way, but its "ringzero: ..." lines say which
# optional parts (oneDNN, MPI, CUDA, NCCL) this build has, and why not where not.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGZERO_WERROR=ON -DRINGZERO_NATIVE=ON \
     "${launcher[@]}" "${cmake_args[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  echo "build.sh: configure failed (the CMake output is above)" >&2
  exit 1
fi
grep -E '^-- ringzero: ' "$log" | sed 's/^-- //' || true
cmake --build build --parallel "$(nproc)" "${targets[@]}"
