#!/usr/bin/env bash
# bench/ddp_vs_torch.sh: 2 ranks x 1 thread, ringzero (train, zero2 by default) against PyTorch
# DDP over gloo (bench/torch_peer_step.py --ddp), alternated by hand, per-rank step CPU time.
#   bench/ddp_vs_torch.sh ROUNDS SEQ BATCH [STRATEGY]
# PyTorch: rank 0's step_cpu_ms_median (its process's CPU inside the timed step, gloo's threads
# included). ringzero: the whole 2-rank job's CPU (user + system, /usr/bin/time) at 22 steps
# minus at 2 steps, over 20 steps and 2 ranks (start-up, data loading and the comm threads
# included). Needs build/data/fortunes (scripts/run.sh prepares it). Prints uptime around it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS SEQ BATCH [STRATEGY]" >&2; exit 2; }
rounds=$1 seq=$2 batch=$3 strategy=${4:-zero2}
rz=${RZ:-build/ringzero}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
torch_round() {
  local port=$((29600 + RANDOM % 300)) r
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port /usr/bin/python3 bench/torch_peer_step.py \
      --layers 4 --channels 128 --heads 4 --vocab 257 --seq "$seq" --batch "$batch" --threads 1 --steps 10 --ddp \
      >"$tmp/torch$r.txt" 2>&1 &
  done
  wait
  grep -o '"step_cpu_ms_median": [0-9.]*' "$tmp/torch0.txt" | awk '{print $2}'
}
rz_cpu() {  # whole job CPU seconds at $1 steps
  /usr/bin/time -f '%U %S' -o "$tmp/time.txt" "$rz" train configs/tiny.toml --nproc-per-node 2 --threads 1 \
    --strategy "$strategy" --seq "$seq" --batch "$batch" --steps "$1" --eval-every 0 --sample-every 0 \
    --val-data "" --save-dir= >"$tmp/rz.txt" 2>&1 || { cat "$tmp/rz.txt" >&2; exit 1; }
  awk '{print $1 + $2}' "$tmp/time.txt"
}
uptime
echo "| round | PyTorch DDP step CPU ms (rank 0) | ringzero $strategy per-rank step CPU ms | PyTorch / ringzero |"
echo "|---|---:|---:|---:|"
for i in $(seq "$rounds"); do
  t=$(torch_round)
  c22=$(rz_cpu 22)
  c2=$(rz_cpu 2)
  awk -v i="$i" -v t="$t" -v a="$c22" -v b="$c2" \
    'BEGIN { r = (a - b) / 40 * 1000; printf "| %d | %.1f | (%.2f - %.2f) / 40 = %.1f | %.2f |\n", i, t, a, b, r, t / r }'
done
uptime
