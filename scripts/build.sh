#!/usr/bin/env bash
# Configures and builds ringzero into build/ (Release, warnings as errors, -march=native).
# The CUDA backend is built when nvcc is found (on PATH or in /usr/local/cuda/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGZERO_WERROR=ON -DRINGZERO_NATIVE=ON "$@" >/dev/null
cmake --build build --parallel "$(nproc)"
