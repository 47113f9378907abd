#!/usr/bin/env bash
# scripts/device-check.sh: everything ringzero checks on a GPU, in one run of at most
# ~10 minutes on one H200 (the device tool lends 15 in all, start-up included; later
# steps are skipped when the clock says so), for a machine with an NVIDIA GPU, nvcc, CMake, ninja and
# python3 with PyTorch but no package registry:
#   1. build (Release, -Werror, sm_90 unless CUDA_ARCH says otherwise) with the
#      header-only dependencies from .deps/ (scripts/carry-deps.sh fills it, on a
#      machine that has the Debian packages; carry .deps along);
#   2. every GPU test (CTest label "gpu": the op table against the CPU backend, the whole
#      model on cuda vs cpu, nccl, the ring's cuda transport with 2 and 4 ranks on one GPU,
#      ddp == zero1 == zero2 bitwise on 2 GPU ranks), with RINGZERO_CUDA_SYNC=1 so an
#      error names its kernel;
#   3. the GPU step benchmark, `ringzero bench-step --device cuda` (GPT-2 d12, bf16,
#      T=1024, B=16, with --attention flash too, and, time permitting, B=32);
#   4. the PyTorch peer, bench/torch_gpt2_step.py (same shapes, torch.compile, bf16
#      autocast, fused AdamW), which also measures the bf16 GEMM rate for MFU;
#   5. `ringzero comm-bench --device cuda --comm nccl` on one rank per GPU (up to 4),
#      1 KiB to 256 MiB, with the copy bandwidth and bound columns (the GPU comm tests,
#      test_comm_gpu, run in step 2 with label "gpu"); about a minute; then the same with
#      `--comm ring` (its cuda transport) on 2 and on 4 ranks sharing GPU 0;
# and prints a summary table last. Logs go to $OUT (the device tool's folder) when set,
# else to out/device-check/. Each step has its own time limit; a failing step is
# recorded and the script goes on, so one run says as much as it can.
#
#   bash scripts/carry-deps.sh          # here, once (needs the Debian packages)
#   bash scripts/device-check.sh        # there
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
LOGS=${OUT:-$ROOT/out/device-check}
BUILD=$ROOT/build-gpu
ARCH=${CUDA_ARCH:-90}
mkdir -p "$LOGS"
START=$(date +%s)
declare -a ROWS=()

elapsed() { echo $(($(date +%s) - START)); }
# run_step NAME LIMIT_S LOGFILE CMD...: runs CMD with a time limit, logs its output,
# and records a summary row (status, seconds).
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local t0 rc
  t0=$(date +%s)
  echo "== $name ($(elapsed)s in)"
  timeout "$limit" "$@" >"$LOGS/$log" 2>&1
  rc=$?
  local status=ok
  if [ $rc -eq 124 ]; then status="TIMEOUT (${limit}s)"; elif [ $rc -ne 0 ]; then status="FAILED (rc $rc)"; fi
  ROWS+=("| $name | $status | $(($(date +%s) - t0)) | $log |")
  tail -n 5 "$LOGS/$log"
  return $rc
}

# --- 0. the machine
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
  command -v nvcc >/dev/null 2>&1 || export PATH=/usr/local/cuda/bin:$PATH
  nvcc --version | tail -n 2
  cmake --version | head -n 1
  python3 -c 'import torch; print("torch", torch.__version__)' 2>&1
} >"$LOGS/machine.txt" 2>&1
cat "$LOGS/machine.txt"
command -v nvcc >/dev/null 2>&1 || export PATH=/usr/local/cuda/bin:$PATH
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)

# --- 1. build
if [ ! -d .deps/usr ]; then
  echo "device-check: .deps/usr is missing: run scripts/carry-deps.sh where the Debian packages are, and carry .deps" >&2
  exit 1
fi
run_step configure 120 configure.log \
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGZERO_WERROR=ON -DRINGZERO_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_PREFIX_PATH="$ROOT/.deps/usr" \
  -Dtomlplusplus_DIR="$ROOT/.deps/usr/lib/x86_64-linux-gnu/cmake/tomlplusplus"
BUILT=0
if run_step build 300 build.log cmake --build "$BUILD" --parallel "$(nproc)" \
  --target ringzero test_backend_ops test_model_cuda; then
  BUILT=1
fi
# The GPU comm tests build on their own, so a failure there leaves the steps above intact.
if [ $BUILT = 1 ]; then
  run_step "build comm tests" 150 build-comm.log cmake --build "$BUILD" --parallel "$(nproc)" \
    --target test_comm_gpu test_comm_cuda_ring_gpu test_zero_gpu
fi
grep -E "spill (stores|loads)" "$LOGS/build.log" | grep -v " 0 bytes spill stores, 0 bytes spill loads" \
  >"$LOGS/ptxas-spills.txt" || true
export LD_LIBRARY_PATH=$ROOT/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}

# --- 2. GPU tests
if [ $BUILT = 1 ]; then
  run_step "gpu tests" 300 gpu-tests.log \
    env RINGZERO_CUDA_SYNC=1 ctest --test-dir "$BUILD" -L gpu --output-on-failure --no-tests=error
fi

# --- 3. ringzero's step benchmark on the GPU
BENCH=(bench-step --device cuda --model d12 --precision bf16 --seq 1024 --threads 8 --warmup 2 --steps 5)
if [ $BUILT = 1 ]; then
  run_step "ringzero bench-step B=16" 150 bench-b16.log "$BUILD/ringzero" "${BENCH[@]}" --batch 16
  # The flash-style attention (warp per row, no (T, T) matrix) at the same shape.
  if [ "$(elapsed)" -lt 280 ]; then
    run_step "ringzero bench-step B=16 flash" 120 bench-b16-flash.log "$BUILD/ringzero" "${BENCH[@]}" --batch 16 \
      --attention flash
  fi
  if [ "$(elapsed)" -lt 300 ]; then
    run_step "ringzero bench-step B=32" 120 bench-b32.log "$BUILD/ringzero" "${BENCH[@]}" --batch 32
  fi
fi

# --- 4. the PyTorch peer
TORCH_BATCH=16
if [ "$(elapsed)" -lt 330 ]; then TORCH_BATCH=16,32; fi
PYTHONUNBUFFERED=1 run_step "torch peer B=$TORCH_BATCH" 150 torch.log \
  python3 bench/torch_gpt2_step.py --model d12 --seq 1024 --batch "$TORCH_BATCH"

# --- 5. comm-bench on GPU ranks (--comm nccl: one rank per GPU, at most 4)
NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
[ "$NGPU" -le 4 ] || NGPU=4
if [ $BUILT = 1 ] && [ "$(elapsed)" -lt 600 ]; then
  for op in all_reduce reduce_scatter; do
    run_step "comm-bench nccl $op x$NGPU" 60 "comm-bench-nccl-$op.log" "$BUILD/ringzero" comm-bench \
      --device cuda --comm nccl --nproc "$NGPU" --op "$op" --min-bytes 1K --max-bytes 256M --iters 10 --warmup 3 \
      --comm-timeout 30
  done
fi
# --- 5b. the ring's own cuda transport: 2 and 4 ranks sharing GPU 0 (CUDA IPC between them)
for n in 2 4; do
  if [ $BUILT = 1 ] && [ "$(elapsed)" -lt 660 ]; then
    run_step "comm-bench ring all_reduce x$n on GPU 0" 90 "comm-bench-ring-x$n.log" "$BUILD/ringzero" comm-bench \
      --device cuda:0 --comm ring --nproc "$n" --op all_reduce --min-bytes 1K --max-bytes 256M --iters 10 --warmup 3 \
      --comm-timeout 30
  fi
done

# --- summary (last, so the device tool's reply carries it)
echo
echo "## device-check on ${GPU:-unknown GPU}, $(date -u +%Y-%m-%dT%H:%MZ), $(elapsed)s"
echo "| step | status | seconds | log |"
echo "|---|---|---:|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "ptxas spills (non-zero): $(wc -l <"$LOGS/ptxas-spills.txt" 2>/dev/null || echo '?') kernels"
grep -h -E "^\|.*(bf16|fp32).*\|" "$LOGS"/bench-b*.log 2>/dev/null | head -n 6
grep -h -E "GEMM|torch-step" "$LOGS/torch.log" 2>/dev/null
grep -h -E "test cases|tests passed|tests failed|Skipped|\*\*\*Failed" "$LOGS/gpu-tests.log" 2>/dev/null | head -n 8
for f in "$LOGS"/comm-bench-nccl-*.log "$LOGS"/comm-bench-ring-*.log; do
  [ -f "$f" ] && { echo "$(basename "$f"):"; grep -E "copy|^ +(1024|268435456) " "$f"; }
done
