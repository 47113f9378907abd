#!/usr/bin/env bash
# scripts/device-check.sh PHASE [--dry-run]: what ringzero checks on a GPU machine, cut to
# the device tool's lease (one call runs at most 600 s, a task has 15 minutes of device
# time in all, a machine start costs 1-2 of them, at most 8 files come back from $OUT).
# Made for a 16-core H200 machine with nvcc, CMake, ninja and python3 + PyTorch but no
# package registry: the header-only dependencies and a static libcrypto travel in .deps/
# (scripts/carry-deps.sh).
#
#   correct  (at most 240 s)  configure + build (Release, sm_$CUDA_ARCH, no -Werror: the
#            device's compiler is not ours), every GPU test (CTest label "gpu", with
#            RINGZERO_CUDA_SYNC=1 so an error names its kernel), a 30-step
#            `train --device cuda` of d12 in bf16 on text the repository ships (README.md
#            and docs/*.md through the shipped GPT-2 tokenizer) whose loss must fall and
#            whose first loss must match a one-step CPU run's within bf16 tolerance, a save
#            and a resume, `sample` on the GPU, and compute-sanitizer memcheck on the op
#            test where the tool runs ("not exercised" where it does not).
#   fast     (at most 180 s)  bench-step --device cuda (d12 bf16 T=1024 B=16, then flash),
#            comm-bench on GPU ranks (nccl, one rank per GPU; the ring's cuda transport, 2
#            ranks on GPU 0) and the PyTorch peer (bench/torch_gpt2_step.py). Meant to run
#            right after correct on the same (warm) machine, whose build it reuses.
#   build    configure + build + check that every binary the phases run loads; no GPU
#            needed, no lease: its budget is an hour (scripts/fresh-machine-check.sh
#            --device-shaped runs it in CI on 2 cores).
#
# Start + correct + a rerun of correct + fast fits the 15 minutes. Every step runs under
# `timeout` with the smaller of its own share and what is left of the phase's budget, so a
# phase cannot overrun whatever the device does; a step with no time left is skipped and
# says so. All logs go into one archive, $OUT/device-check-PHASE.tar.gz (out/device-check/
# without $OUT), beside $OUT/device-check-PHASE-summary.md, the table printed last: two
# files per call. --dry-run prints each step's command and limit and runs nothing.
# Exit status: 0 when every step that ran passed, 1 otherwise.
#
#   bash scripts/carry-deps.sh                 # here, once (needs the Debian packages)
#   bash scripts/device-check.sh correct       # there, one device call
#   bash scripts/device-check.sh fast          # there, the next call
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

PHASE=""
DRY=0
for a in "$@"; do
  case "$a" in
    correct|fast|build) PHASE=$a ;;
    --dry-run) DRY=1 ;;
    *) echo "device-check: unknown argument '$a' (usage: device-check.sh correct|fast|build [--dry-run])" >&2; exit 2 ;;
  esac
done
[ -n "$PHASE" ] || { echo "device-check: name a phase: correct, fast or build" >&2; exit 2; }
# The device phases' budgets fit a lease; `build` runs in CI on 2 cores, not on a lease.
case "$PHASE" in correct) BUDGET=240 ;; fast) BUDGET=180 ;; build) BUDGET=3600 ;; esac
BUDGET=${DEVICE_CHECK_BUDGET_S:-$BUDGET}  # a smaller one for trying the script out
RESERVE=8                                 # seconds kept for the archive and the summary
GRACE=3                                   # timeout's -k: a step that ignores SIGTERM is killed after this

BUILD=$ROOT/build-gpu
ARCH=${CUDA_ARCH:-90}
DEST=${OUT:-$ROOT/out/device-check}
LOGS=$ROOT/out/device-check/$PHASE-logs     # archived; never under $OUT (only the archive goes there)
WORK=$ROOT/out/device-check/work            # data and checkpoints: large, not archived
START=$(date +%s)
DEADLINE=$((START + BUDGET - RESERVE))
declare -a ROWS=()
FAILED=0
mkdir -p "$DEST"
rm -rf "$LOGS"
mkdir -p "$LOGS" "$WORK"
command -v nvcc >/dev/null 2>&1 || export PATH=/usr/local/cuda/bin:$PATH
NPROC=$(nproc)

# --dry-run keeps a pretend clock on which each step takes EXPECT seconds (set by the
# caller, `EXPECT=20 step ...`: the estimate for a 16-core H200 machine, docs/cuda.md) and
# prints the plan: when each step would start, its limit, and its worst case.
SIM=0
now() { if [ "$DRY" = 1 ]; then echo $((START + SIM)); else date +%s; fi; }
# row NAME STATUS SECONDS LIMIT LOG: one line of the summary table.
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 |"); }
# note NAME TEXT: a summary row with no command behind it (a comparison, a reason).
note() { row "$1" "$2" "" "" ""; echo "== $1: $2"; }
# step NAME SHARE LOG CMD...: CMD under timeout, limited to min(SHARE, what is left), its
# output in LOG; a row with ok / FAILED (rc) / TIMEOUT / skipped. Returns CMD's status.
step() {
  local name=$1 share=$2 log=$3
  shift 3
  local left=$((DEADLINE - $(now) - GRACE))
  local limit=$share
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    row "$name" "skipped (no time left in the ${BUDGET}s budget)" 0 "$share" "$log"
    echo "== $name: skipped, no time left"
    return 125
  fi
  if [ "$DRY" = 1 ]; then
    local expect=${EXPECT:-$limit}
    [ "$expect" -le "$limit" ] || expect=$limit
    printf '%4ss  %-34s expect %3ss  limit %3ss  %s\n' "$SIM" "$name" "$expect" "$limit" "$*"
    row "$name" "dry run (expect ${expect}s)" "$expect" "$limit" "$log"
    SIM=$((SIM + expect))
    return 0
  fi
  echo "== $name ($(($(now) - START))s in, limit ${limit}s)"
  local t0 rc status=ok
  t0=$(now)
  timeout -k "$GRACE" "$limit" "$@" >"$LOGS/$log" 2>&1
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status="TIMEOUT (${limit}s)"; elif [ $rc -ne 0 ]; then status="FAILED (rc $rc)"; fi
  [ $rc -eq 0 ] || FAILED=1
  row "$name" "$status" "$(($(now) - t0))" "$limit" "$log"
  tail -n 4 "$LOGS/$log"
  return $rc
}

machine_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: not usable here"
  nvcc --version 2>&1 | tail -n 2
  cmake --version 2>&1 | head -n 1
  echo "host: $(nproc) cores, $(uname -r)"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -n 1
}

# The build every phase uses: its flags and targets are what device-check runs, no more.
GPU_TESTS=(test_backend_ops test_model_cuda test_comm_gpu test_comm_cuda_ring_gpu test_zero_gpu)
TARGETS=(ringzero "${GPU_TESTS[@]}")
configure_and_build() {
  if [ ! -d .deps/usr ] && [ "$DRY" = 0 ]; then
    note configure "FAILED: .deps/usr is missing (run scripts/carry-deps.sh where the Debian packages are, and carry .deps)"
    FAILED=1
    return 1
  fi
  EXPECT=$([ "$PHASE" = fast ] && echo 3 || echo 15) step configure 60 configure.log \
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGZERO_WERROR=OFF -DRINGZERO_CUDA=ON -DRINGZERO_PTXAS_VERBOSE=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_PREFIX_PATH="$ROOT/.deps/usr" \
    -DOPENSSL_ROOT_DIR="$ROOT/.deps/usr" -DOPENSSL_USE_STATIC_LIBS=TRUE --no-warn-unused-cli || return 1
  # One line each for oneDNN, MPI, CUDA and NCCL: which was found, or why none.
  [ "$DRY" = 1 ] || grep -h '^-- ringzero: ' "$LOGS/configure.log" | sed 's/^-- //' >"$LOGS/configure-parts.txt"
  # fast expects the machine correct left warm: ninja then has nothing to do.
  local share=200 expect=75
  [ "$PHASE" = build ] && share=$BUDGET
  [ "$PHASE" = fast ] && expect=5
  EXPECT=$expect step build "$share" build.log cmake --build "$BUILD" --parallel "$NPROC" --target "${TARGETS[@]}" || return 1
  [ "$DRY" = 1 ] || grep -E "spill (stores|loads)" "$LOGS/build.log" |
    grep -v " 0 bytes spill stores, 0 bytes spill loads" >"$LOGS/ptxas-spills.txt"
  return 0
}

# --- the correct phase's pieces ---------------------------------------------------------
# d12 (GPT-2 124M) in bf16 on a small batch: the CPU's one step stays within ~20 s on 16
# cores, the GPU's 30 steps within seconds; both read the same shards with the same seed.
TRAIN=(train --model d12 --precision bf16 --batch 4 --seq 128 --lr 6e-4 --warmup 0 --seed 1337
       --data "$WORK/text/train_*.bin" --tokenizer gpt2 --gpt2-dir "$ROOT/data/gpt2")
# loss_in FILE first|last: the first or last step's "loss" in a --metrics JSONL file.
loss_in() {
  awk -v which="$2" 'match($0, /"loss": *[-0-9.eE+]+/) {
      v = substr($0, RSTART, RLENGTH); sub(/^"loss": */, "", v); if (first == "") first = v; last = v }
    END { print (which == "first" ? first : last) }' "$1"
}
# First loss on cuda vs cpu within bf16 tolerance (1% relative: the two sum 128*4 token
# losses of bf16 activations in different orders), and the loss falls by 10% in 30 steps.
check_losses() {
  local cpu gpu last
  cpu=$(loss_in "$LOGS/cpu-metrics.jsonl" first 2>/dev/null)
  gpu=$(loss_in "$LOGS/cuda-metrics.jsonl" first 2>/dev/null)
  last=$(loss_in "$LOGS/cuda-metrics.jsonl" last 2>/dev/null)
  if [ -z "$cpu" ] || [ -z "$gpu" ] || [ -z "$last" ]; then
    note "first loss cuda vs cpu" "FAILED: no loss to compare (cpu '${cpu}', cuda '${gpu}')"
    FAILED=1
    return
  fi
  if awk -v c="$cpu" -v g="$gpu" 'BEGIN { d = c - g; if (d < 0) d = -d; exit !(d <= 0.01 * c) }'; then
    note "first loss cuda vs cpu" "ok: cuda $gpu, cpu $cpu (|diff| <= 1%)"
  else
    note "first loss cuda vs cpu" "FAILED: cuda $gpu, cpu $cpu (|diff| > 1%)"
    FAILED=1
  fi
  if awk -v f="$gpu" -v l="$last" 'BEGIN { exit !(l <= 0.9 * f) }'; then
    note "loss falls in 30 steps" "ok: $gpu -> $last"
  else
    note "loss falls in 30 steps" "FAILED: $gpu -> $last (wanted at most 90% of the first)"
    FAILED=1
  fi
}

# compute-sanitizer memcheck over the op test's fp32 cases (Catch2 names them "... - float").
# "not exercised" when the tool is missing or refuses this GPU/driver (its own error, not
# an error in ringzero).
memcheck() {
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ "$DRY" = 0 ] && [ ! -x "$cs" ]; then
    note "memcheck test_backend_ops" "not exercised: no compute-sanitizer in PATH or /usr/local/cuda/bin"
    return
  fi
  EXPECT=40 step "memcheck test_backend_ops" 60 memcheck.log \
    env RINGZERO_CUDA_SYNC=1 "$cs" --tool memcheck --error-exitcode 99 --leak-check no \
    "$BUILD/tests/test_backend_ops" "*float"
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 99 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] &&
     grep -qiE "not supported|unable to|Target application terminated before first instrumented API|device not found" \
       "$LOGS/memcheck.log" 2>/dev/null; then
    note "memcheck test_backend_ops" "not exercised: compute-sanitizer refused here (memcheck.log)"
  fi
}

phase_correct() {
  configure_and_build || return
  EXPECT=45 step "gpu tests" 80 gpu-tests.log \
    env RINGZERO_CUDA_SYNC=1 ctest --test-dir "$BUILD" -L gpu --output-on-failure --no-tests=error
  local rz=$BUILD/ringzero
  rm -rf "$WORK/text" "$WORK/ckpt"
  EXPECT=2 step "prepare text (gpt2)" 30 prepare.log \
    "$rz" prepare --input README.md docs/*.md --tokenizer gpt2 --gpt2-dir "$ROOT/data/gpt2" \
    --out "$WORK/text" --val-fraction 0 --quiet
  EXPECT=12 step "cpu d12 bf16, 1 step" 40 train-cpu.log \
    "$rz" "${TRAIN[@]}" --device cpu --steps 1 --threads "$NPROC" --metrics "$LOGS/cpu-metrics.jsonl"
  EXPECT=20 step "cuda d12 bf16, 30 steps + save" 50 train-cuda.log \
    env RINGZERO_CUDA_SYNC=1 "$rz" "${TRAIN[@]}" --device cuda --steps 30 --save-dir "$WORK/ckpt" --keep 1 \
    --metrics "$LOGS/cuda-metrics.jsonl"
  [ "$DRY" = 1 ] || check_losses
  EXPECT=12 step "cuda resume to step 32" 35 train-resume.log \
    "$rz" "${TRAIN[@]}" --device cuda --steps 32 --save-dir "$WORK/ckpt" --keep 1 --resume \
    --metrics "$LOGS/resume-metrics.jsonl"
  if [ "$DRY" = 0 ] && [ -f "$LOGS/train-resume.log" ]; then
    if grep -q "resumed from .*step 30" "$LOGS/train-resume.log"; then note "resume" "ok: continued from step 30"
    else note "resume" "FAILED: train-resume.log does not say it resumed from step 30"; FAILED=1; fi
  fi
  local newest
  newest=$(find "$WORK/ckpt" -maxdepth 1 -name 'step_*' 2>/dev/null | sort | tail -n 1)
  EXPECT=8 step "sample on cuda" 25 sample.log \
    "$rz" sample --model "${newest:-$WORK/ckpt/step_00000032}" --tokenizer gpt2 --gpt2-dir "$ROOT/data/gpt2" --device cuda \
    --precision bf16 --tokens 32 --top-k 40 --prompt "The ring"
  memcheck
}

phase_fast() {
  configure_and_build || return
  local rz=$BUILD/ringzero
  local bench=(bench-step --device cuda --model d12 --precision bf16 --seq 1024 --batch 16 --threads 8 --warmup 2
               --steps 5)
  EXPECT=25 step "bench-step d12 B=16" 40 bench-b16.log "$rz" "${bench[@]}"
  EXPECT=20 step "bench-step d12 B=16 flash" 30 bench-b16-flash.log "$rz" "${bench[@]}" --attention flash
  local ngpu
  ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
  [ "$ngpu" -ge 1 ] 2>/dev/null || ngpu=1
  [ "$ngpu" -le 4 ] || ngpu=4
  EXPECT=15 step "comm-bench nccl all_reduce x$ngpu" 25 comm-bench-nccl.log "$rz" comm-bench --device cuda --comm nccl \
    --nproc "$ngpu" --op all_reduce --min-bytes 1K --max-bytes 256M --iters 10 --warmup 3 --comm-timeout 20
  EXPECT=15 step "comm-bench ring all_reduce x2 on GPU 0" 25 comm-bench-ring.log "$rz" comm-bench --device cuda:0 \
    --comm ring --nproc 2 --op all_reduce --min-bytes 1K --max-bytes 256M --iters 10 --warmup 3 --comm-timeout 20
  # torch.compile alone can take a minute: without that much left, the eager peer runs.
  local compile=()
  [ $((DEADLINE - $(now))) -ge 80 ] || compile=(--no-compile)
  EXPECT=70 PYTHONUNBUFFERED=1 step "torch peer d12 B=16${compile:+ (eager)}" 90 torch.log \
    python3 bench/torch_gpt2_step.py --model d12 --seq 1024 --batch 16 --warmup 3 --steps 5 "${compile[@]}"
}

# Every binary the phases run is linked, and loads: no library left unresolved.
phase_build() {
  configure_and_build || return
  [ "$DRY" = 1 ] && return
  local missing=0 f
  for f in "$BUILD/ringzero" "${GPU_TESTS[@]/#/$BUILD/tests/}"; do
    if [ ! -x "$f" ]; then echo "missing: $f"; missing=1
    elif ldd "$f" | grep -q "not found"; then echo "unresolved in $f:"; ldd "$f" | grep "not found"; missing=1
    fi
  done >"$LOGS/binaries.txt" 2>&1
  if [ $missing = 0 ]; then note "binaries load" "ok: ringzero and ${#GPU_TESTS[@]} GPU tests, every library resolved"
  else note "binaries load" "FAILED (binaries.txt)"; FAILED=1; fi
}

[ "$DRY" = 1 ] || { machine_info >"$LOGS/machine.txt" 2>&1; cat "$LOGS/machine.txt"; }
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
"phase_$PHASE"

# --- the summary (last, so the device tool's reply carries it) and the archive
summary=$DEST/device-check-$PHASE-summary.md
{
  echo "## device-check $PHASE on ${GPU:-no GPU found}, $(date -u +%Y-%m-%dT%H:%MZ), $(($(now) - START))s of ${BUDGET}s"
  echo
  echo "| step | status | seconds | limit | log |"
  echo "|---|---|---:|---:|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  [ -s "$LOGS/configure-parts.txt" ] && sed 's/^/    /' "$LOGS/configure-parts.txt"
  [ -f "$LOGS/ptxas-spills.txt" ] && echo "ptxas spills (non-zero): $(wc -l <"$LOGS/ptxas-spills.txt") kernels"
  grep -h -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Skipped|Not Run" "$LOGS/gpu-tests.log" 2>/dev/null | head -n 8
  grep -h -E "^\|.*(bf16|fp32).*\|" "$LOGS"/bench-b16*.log 2>/dev/null | head -n 4
  grep -h -E "GEMM|torch-step" "$LOGS/torch.log" 2>/dev/null | head -n 4
  grep -h -E "copy|^ +(1024|268435456) " "$LOGS"/comm-bench-*.log 2>/dev/null | head -n 8
  echo
  echo "logs: $(basename "$DEST")/device-check-$PHASE.tar.gz"
} >"$summary"
[ "$DRY" = 1 ] || tar -czf "$DEST/device-check-$PHASE.tar.gz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
echo
cat "$summary"
exit $FAILED
