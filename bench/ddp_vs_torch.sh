#!/usr/bin/env bash
# bench/ddp_vs_torch.sh: 2 ranks x 1 thread, ringzero (zero2 by default) against PyTorch DDP over
# gloo (bench/torch_peer_step.py --ddp), alternated round by round, both measured the same way:
# rank 0's process CPU time inside its timed step (all its threads: compute and comm; Python's
# time.process_time(), ringzero's CLOCK_PROCESS_CPUTIME_ID), median over 10 steps after 2
# warm-up steps, and the median wall time of a step beside it.
#   bench/ddp_vs_torch.sh ROUNDS SEQ BATCH [STRATEGY]
# ringzero: `ringzero bench-strategies --config configs/tiny.toml` (the main job's model, its
# bucket size; synthetic tokens) at --seq SEQ --batch BATCH. PyTorch: the same model shape
# (L4 C128 NH4 V257), DDP's default 25 MB buckets.
# WHOLE_JOB=1 adds the earlier method's column: the whole `ringzero train` job's CPU
# (/usr/bin/time, both ranks, launcher, start-up, data loader) at 22 steps minus at 2 steps,
# over 20 steps and 2 ranks (needs build/data/fortunes: scripts/run.sh prepares it).
# Prints uptime around it. Environment: RZ (the binary, default build/ringzero).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS SEQ BATCH [STRATEGY]" >&2; exit 2; }
rounds=$1 seq=$2 batch=$3 strategy=${4:-zero2}
rz=${RZ:-build/ringzero}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
torch_round() {  # prints "CPU_MS WALL_MS" of rank 0
  local port=$((29600 + RANDOM % 300)) r
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port /usr/bin/python3 bench/torch_peer_step.py \
      --layers 4 --channels 128 --heads 4 --vocab 257 --seq "$seq" --batch "$batch" --threads 1 --steps 10 --ddp \
      >"$tmp/torch$r.txt" 2>&1 &
  done
  wait
  python3 -c 'import json, sys; d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(d["step_cpu_ms_median"], d["step_ms_median"])' "$tmp/torch0.txt"
}
rz_round() {  # prints "CPU_MS WALL_MS RANK_CPU_MS..." of rank 0
  "$rz" bench-strategies --config configs/tiny.toml --nproc 2 --strategy "$strategy" --seq "$seq" --batch "$batch" \
    --steps 10 --untimed-steps 2 >"$tmp/rz.txt" 2>&1 || { cat "$tmp/rz.txt" >&2; exit 1; }
  awk '/ step_cpu_ms / { for (i = 1; i <= NF; ++i) { if ($i == "step_ms") w = $(i + 1); if ($i == "step_cpu_ms") c = $(i + 1) }
        sub(/.*\(ranks /, ""); sub(/\).*/, ""); print c, w, $0 }' "$tmp/rz.txt"
}
rz_job_cpu() {  # whole `train` job CPU seconds at $1 steps
  /usr/bin/time -f '%U %S' -o "$tmp/time.txt" "$rz" train configs/tiny.toml --nproc-per-node 2 --threads 1 \
    --strategy "$strategy" --seq "$seq" --batch "$batch" --steps "$1" --eval-every 0 --sample-every 0 \
    --val-data "" --save-dir= >"$tmp/job.txt" 2>&1 || { cat "$tmp/job.txt" >&2; exit 1; }
  awk '{print $1 + $2}' "$tmp/time.txt"
}
uptime
if [ "${WHOLE_JOB:-0}" = 1 ]; then
  echo "| round | PyTorch DDP step CPU ms (rank 0) | ringzero $strategy step CPU ms (rank 0; both ranks) | PyTorch / ringzero | PyTorch wall ms | ringzero wall ms | whole job per-rank CPU ms (old method) |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
else
  echo "| round | PyTorch DDP step CPU ms (rank 0) | ringzero $strategy step CPU ms (rank 0; both ranks) | PyTorch / ringzero | PyTorch wall ms | ringzero wall ms |"
  echo "|---|---:|---:|---:|---:|---:|"
fi
for i in $(seq "$rounds"); do
  read -r tc tw < <(torch_round)
  read -r rc rw ranks < <(rz_round)
  old=""
  if [ "${WHOLE_JOB:-0}" = 1 ]; then
    c22=$(rz_job_cpu 22)
    c2=$(rz_job_cpu 2)
    old=$(awk -v a="$c22" -v b="$c2" 'BEGIN { printf " (%.2f - %.2f) / 40 = %.1f |", a, b, (a - b) / 40 * 1000 }')
  fi
  awk -v i="$i" -v tc="$tc" -v tw="$tw" -v rc="$rc" -v rw="$rw" -v ranks="$ranks" -v old="$old" \
    'BEGIN { printf "| %d | %.1f | %.1f (%s) | %.2f | %.1f | %.1f |%s\n", i, tc, rc, ranks, tc / rc, tw, rw, old }'
done
uptime
