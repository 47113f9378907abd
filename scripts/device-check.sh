#!/usr/bin/env bash
# scripts/device-check.sh PHASE [--dry-run]: what ringzero checks on a GPU machine, cut to
# the device tool's lease (one call runs at most 600 s, a task has 15 minutes of device
# time in all, a machine start costs 1-2 of them, at most 8 files come back from $OUT).
# Made for a 16-core H200 machine with nvcc, CMake, ninja and python3 + PyTorch but no
# package registry: the header-only dependencies and a static libcrypto travel in .deps/
# (scripts/carry-deps.sh).
#
#   correct  (at most 280 s, about 210 planned)  configure + build (Release, sm_$CUDA_ARCH,
#            no -Werror: the device's compiler is not ours; NCCL required, found from
#            PyTorch's wheel where the toolkit has none), then, with RINGZERO_CUDA_SYNC=1 so
#            an error names its kernel: the quick GPU tests (CTest label "gpu", 4 at a time);
#            the cuBLASLt conformance program (which configurations the real library offers
#            no algorithm for goes into the summary); then three things side by side: the slow
#            GPU tests (label "gpu_slow": multi-rank jobs, killed ranks, CPU references of
#            large batches), compute-sanitizer memcheck on the op test where the tool runs
#            ("not exercised" where it is missing or refuses the device), and a 30-step
#            `train --device cuda` of d12 in bf16 on text the repository ships (README.md and
#            docs/*.md through the shipped GPT-2 tokenizer) whose loss must fall and whose
#            first loss must match a one-step CPU run's within bf16 tolerance, a save and a
#            resume, `sample` on the GPU. On a lease a GPU test that skips is a failure: it
#            means no device, or a part missing from the build.
#   fast     (at most 180 s)  bench-step --device cuda (d12 bf16 T=1024 B=16, then flash),
#            comm-bench on GPU ranks (nccl, one rank per GPU; the ring's cuda transport, 2
#            ranks on GPU 0) and the PyTorch peer (bench/torch_gpt2_step.py). Meant to run
#            right after correct on the same (warm) machine, whose build it reuses.
#   build    configure + build + check that every binary the phases run loads; no GPU
#            needed, no lease: its budget is an hour (scripts/fresh-machine-check.sh
#            --device-shaped runs it in CI on 2 cores).
#
# Start (1-2 min) + correct + a rerun of correct (about 2 min warm: nothing to build) +
# fast fits the 15 minutes with about 2 minutes to spare. Every step runs under `timeout`
# with the smaller of its own share and what is left of the phase's budget, so a phase
# cannot overrun whatever the device does; a step that would not finish in what is left
# (its expected time) is skipped and says so, rather than started and cut off. All logs go into one archive, $OUT/device-check-PHASE.tar.gz (out/device-check/
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
case "$PHASE" in correct) BUDGET=280 ;; fast) BUDGET=180 ;; build) BUDGET=3600 ;; esac
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
# Skipped (status 125) when what is left is less than the step's expected time (EXPECT,
# the estimate for a 16-core H200 machine): a step that cannot finish is not started.
# ALLOW_RC=N (or any): that exit status is left for the caller to judge (not marked FAILED).
limit_for() {  # SHARE -> the limit, or nothing when the step would not finish
  local share=$1 left=$((DEADLINE - $(now) - GRACE)) need=${EXPECT:-5}
  [ "$need" -ge 5 ] || need=5
  if [ "$left" -lt "$need" ]; then return 1; fi
  [ "$left" -lt "$share" ] && share=$left
  echo "$share"
}
skip_row() {  # NAME SHARE LOG
  row "$1" "skipped (needs about ${EXPECT:-5}s, $((DEADLINE - $(now) - GRACE))s left of ${BUDGET}s)" 0 "$2" "$3"
  echo "== $1: skipped, not enough time left"
}
status_of() {  # RC LIMIT -> ok / TIMEOUT / FAILED
  if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then echo "TIMEOUT (${2}s)"; elif [ "$1" -ne 0 ]; then echo "FAILED (rc $1)"; else echo ok; fi
}
step() {
  local name=$1 share=$2 log=$3
  shift 3
  local limit
  if ! limit=$(limit_for "$share"); then skip_row "$name" "$share" "$log"; return 125; fi
  if [ "$DRY" = 1 ]; then
    local expect=${EXPECT:-$limit}
    [ "$expect" -le "$limit" ] || expect=$limit
    printf '%4ss  %-34s expect %3ss  limit %3ss  %s\n' "$SIM" "$name" "$expect" "$limit" "$*"
    row "$name" "dry run (expect ${expect}s)" "$expect" "$limit" "$log"
    SIM=$((SIM + expect))
    return 0
  fi
  echo "== $name ($(($(now) - START))s in, limit ${limit}s)"
  local t0 rc status
  t0=$(now)
  timeout -k "$GRACE" "$limit" "$@" >"$LOGS/$log" 2>&1
  rc=$?
  status=$(status_of $rc "$limit")
  if [ $rc -ne 0 ] && [ "${ALLOW_RC:-}" != any ] && [ "$rc" != "${ALLOW_RC:-}" ]; then FAILED=1; fi
  row "$name" "$status" "$(($(now) - t0))" "$limit" "$log"
  tail -n 4 "$LOGS/$log"
  return $rc
}

# Steps side by side: step_bg starts one in the background (the same rules as step);
# wait_bg waits for every one started and adds their rows. In a dry run a background step
# takes no time on the pretend clock until wait_bg, which moves it to the latest end.
declare -a BG_PIDS=() BG_NAMES=() BG_T0=() BG_LIMITS=() BG_LOGS=() BG_ALLOW=()
BG_SIM_END=0
step_bg() {
  local name=$1 share=$2 log=$3
  shift 3
  local limit
  if ! limit=$(limit_for "$share"); then skip_row "$name" "$share" "$log"; return 125; fi
  if [ "$DRY" = 1 ]; then
    local expect=${EXPECT:-$limit}
    [ "$expect" -le "$limit" ] || expect=$limit
    printf '%4ss  %-34s expect %3ss  limit %3ss  (background) %s\n' "$SIM" "$name" "$expect" "$limit" "$*"
    row "$name" "dry run (expect ${expect}s, side by side)" "$expect" "$limit" "$log"
    [ $((SIM + expect)) -le "$BG_SIM_END" ] || BG_SIM_END=$((SIM + expect))
    return 0
  fi
  echo "== $name ($(($(now) - START))s in, limit ${limit}s, in the background)"
  timeout -k "$GRACE" "$limit" "$@" >"$LOGS/$log" 2>&1 &
  BG_PIDS+=($!)
  BG_NAMES+=("$name")
  BG_T0+=("$(now)")
  BG_LIMITS+=("$limit")
  BG_LOGS+=("$log")
  BG_ALLOW+=("${ALLOW_RC:-}")
  return 0
}
# After wait_bg: BG_RC[name] is each background step's exit status.
declare -A BG_RC=()
wait_bg() {
  if [ "$DRY" = 1 ]; then
    [ "$BG_SIM_END" -le "$SIM" ] || SIM=$BG_SIM_END
    return 0
  fi
  local i rc
  for i in "${!BG_PIDS[@]}"; do
    wait "${BG_PIDS[$i]}"
    rc=$?
    BG_RC["${BG_NAMES[$i]}"]=$rc
    if [ $rc -ne 0 ] && [ "${BG_ALLOW[$i]}" != any ] && [ "$rc" != "${BG_ALLOW[$i]}" ]; then FAILED=1; fi
    local status
    status="$(status_of $rc "${BG_LIMITS[$i]}") (side by side)"
    [ "${BG_ALLOW[$i]}" = any ] && [ $rc -ne 0 ] && status="ended with rc $rc (side by side; judged below)"
    row "${BG_NAMES[$i]}" "$status" "$(($(now) - ${BG_T0[$i]}))" "${BG_LIMITS[$i]}" "${BG_LOGS[$i]}"
    echo "== ${BG_NAMES[$i]}: $(status_of $rc "${BG_LIMITS[$i]}")"
    tail -n 4 "$LOGS/${BG_LOGS[$i]}"
  done
  BG_PIDS=()
}

# On a lease a skipped GPU test is a failure: "no device" is what a skip says.
fail_on_skips() {  # NAME LOG
  [ "$DRY" = 1 ] && return
  local skipped
  skipped=$(grep -cE "\*\*\*Skipped|Not Run" "$LOGS/$2" 2>/dev/null)
  if [ "${skipped:-0}" -gt 0 ]; then
    note "$1" "FAILED: $skipped GPU test(s) skipped on a lease: no device seen, or a part missing from the build ($2)"
    FAILED=1
  fi
}

machine_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: not usable here"
  nvcc --version 2>&1 | tail -n 2
  cmake --version 2>&1 | head -n 1
  echo "host: $(nproc) cores, $(uname -r)"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -n 1
}

# The build every phase uses: its flags and targets are what device-check runs, no more.
GPU_TESTS=(test_backend_ops test_model_cuda test_comm_gpu test_comm_cuda_ring_gpu test_zero_gpu test_train_cuda
           test_cublaslt_conformance)
TARGETS=(ringzero "${GPU_TESTS[@]}")
configure_and_build() {
  if [ ! -d .deps/usr ] && [ "$DRY" = 0 ]; then
    note configure "FAILED: .deps/usr is missing (run scripts/carry-deps.sh where the Debian packages are, and carry .deps)"
    FAILED=1
    return 1
  fi
  EXPECT=$([ "$PHASE" = fast ] && echo 3 || echo 15) step configure 60 configure.log \
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGZERO_WERROR=OFF -DRINGZERO_CUDA=ON -DRINGZERO_PTXAS_VERBOSE=ON \
    -DRINGZERO_NCCL=ON -DRINGZERO_CUEMU=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_PREFIX_PATH="$ROOT/.deps/usr" \
    -DOPENSSL_ROOT_DIR="$ROOT/.deps/usr" -DOPENSSL_USE_STATIC_LIBS=TRUE --no-warn-unused-cli || return 1
  # One line each for oneDNN, MPI, CUDA and NCCL: which was found, or why none.
  [ "$DRY" = 1 ] || grep -h '^-- ringzero: ' "$LOGS/configure.log" | sed 's/^-- //' >"$LOGS/configure-parts.txt"
  # fast expects the machine correct left warm: ninja then has nothing to do.
  local share=180 expect=80
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

# compute-sanitizer memcheck over the op test's fp32 cases (Catch2 names them "... - float"),
# in the background (memcheck_start), judged by memcheck_judge once it has ended: "not
# exercised", not a failure, where the tool is missing or refuses this GPU or driver (its
# own error, not one in ringzero); its own report of an error (exit 99) fails the phase.
MEMCHECK=""
memcheck_start() {
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ "$DRY" = 0 ] && [ ! -x "$cs" ]; then
    note "memcheck test_backend_ops" "not exercised: no compute-sanitizer in PATH or /usr/local/cuda/bin"
    return
  fi
  MEMCHECK="memcheck test_backend_ops"
  # Every status but 0 and 99 is judged below (ALLOW_RC names one: the judge re-marks the rest).
  EXPECT=40 ALLOW_RC=any step_bg "$MEMCHECK" 90 memcheck.log \
    env RINGZERO_CUDA_SYNC=1 "$cs" --tool memcheck --error-exitcode 99 --leak-check no \
    "$BUILD/tests/test_backend_ops" "*float" || MEMCHECK=""
}
memcheck_judge() {
  [ "$DRY" = 0 ] && [ -n "$MEMCHECK" ] || return
  local rc=${BG_RC[$MEMCHECK]:-0}
  [ "$rc" -eq 0 ] && return
  if [ "$rc" -ne 99 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
     grep -qiE "not supported|unable to|Target application terminated before first instrumented API|device not found|no CUDA-capable device|insufficient driver" \
       "$LOGS/memcheck.log" 2>/dev/null; then
    note "$MEMCHECK" "not exercised: compute-sanitizer refused here, rc $rc (memcheck.log)"
  else
    note "$MEMCHECK" "FAILED: rc $rc$([ "$rc" -eq 99 ] && echo ', memcheck reported errors') (memcheck.log)"
    FAILED=1
  fi
}

phase_correct() {
  configure_and_build || return
  local ctest=(ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j 4)
  EXPECT=40 step "gpu tests (quick, 4 at a time)" 90 gpu-tests.log \
    env RINGZERO_CUDA_SYNC=1 "${ctest[@]}" -L '^gpu$' -E '^test_cublaslt_conformance$'
  fail_on_skips "gpu tests (quick)" gpu-tests.log
  [ "$DRY" = 1 ] || cp "$BUILD/Testing/Temporary/LastTest.log" "$LOGS/gpu-tests-all-output.log" 2>/dev/null
  EXPECT=3 step "cuBLASLt conformance" 30 conformance.log "$BUILD/tests/test_cublaslt_conformance"
  # Side by side from here: the slow tests and memcheck in the background, the d12 run here.
  EXPECT=70 step_bg "gpu tests (slow, 4 at a time)" 150 gpu-slow-tests.log \
    env RINGZERO_CUDA_SYNC=1 "${ctest[@]}" -L '^gpu_slow$'
  memcheck_start
  local rz=$BUILD/ringzero
  rm -rf "$WORK/text" "$WORK/ckpt"
  EXPECT=2 step "prepare text (gpt2)" 30 prepare.log \
    "$rz" prepare --input README.md docs/*.md --tokenizer gpt2 --gpt2-dir "$ROOT/data/gpt2" \
    --out "$WORK/text" --val-fraction 0 --quiet
  EXPECT=15 step "cpu d12 bf16, 1 step" 45 train-cpu.log \
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
  wait_bg
  fail_on_skips "gpu tests (slow)" gpu-slow-tests.log
  memcheck_judge
}

phase_fast() {
  configure_and_build || return
  local rz=$BUILD/ringzero
  local bench=(bench-step --device cuda --model d12 --precision bf16 --seq 1024 --batch 16 --threads 8 --untimed-steps 2
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
  grep -h -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Skipped|\*\*\*Timeout|Not Run" "$LOGS/gpu-tests.log" \
    "$LOGS/gpu-slow-tests.log" 2>/dev/null | head -n 12
  grep -h -E "^on |cuBLASLt offered|no algorithm|NOT_SUPPORTED|FAILED|passed|failed" "$LOGS/conformance.log" 2>/dev/null | head -n 12
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
