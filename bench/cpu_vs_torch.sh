#!/usr/bin/env bash
# bench/cpu_vs_torch.sh: ringzero's fp32 step against PyTorch eager's (bench/torch_peer_step.py),
# 1 thread each, alternated by farm-bench, compared by the step's process CPU time (robust on
# a shared machine). Prints `uptime` before and after and one row per pair.
#   bench/cpu_vs_torch.sh NAME RUNS 'RINGZERO BENCH-STEP SHAPE ARGS' 'TORCH SHAPE ARGS'
# e.g. bench/cpu_vs_torch.sh tiny64 3 \
#   '--model tiny --layers 4 --channels 128 --heads 4 --vocab 257 --max-seq 128 --batch 16 --seq 64 --steps 10 --untimed-steps 2' \
#   '--layers 4 --channels 128 --heads 4 --vocab 257 --seq 64 --batch 16 --steps 10'
# Environment: RZ (the binary, default build/ringzero), TIMEOUT (farm-bench's, default 900).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: $0 NAME RUNS 'RINGZERO ARGS' 'TORCH ARGS'" >&2; exit 2; }
name=$1 runs=$2 rz_args=$3 torch_args=$4
rz=${RZ:-build/ringzero}
out=build/cmp
mkdir -p "$out"
rm -f "$out/$name-rz.txt" "$out/$name-torch.txt"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
uptime
farm-bench -n "$runs" --warmup 0 --timeout "${TIMEOUT:-900}" \
  --vs "sh -c 'exec /usr/bin/python3 bench/torch_peer_step.py $torch_args --threads 1 >>$out/$name-torch.txt 2>&1'" \
  -- sh -c "exec $rz bench-step $rz_args --threads 1 --precision fp32 >>$out/$name-rz.txt 2>&1"
uptime
# Pair i: the i-th PyTorch JSON line and the i-th ringzero table row (step CPU ms, column 5).
paste <(grep -o '"step_cpu_ms_median": [0-9.]*' "$out/$name-torch.txt" | awk '{print $2}') \
      <(grep -E '^\| [a-z0-9]+ \| fp32 \| 1 \|' "$out/$name-rz.txt" | awk -F'|' '{gsub(/ /, "", $6); print $6}') |
  awk 'BEGIN { print "| pair | PyTorch step CPU ms | ringzero step CPU ms | PyTorch / ringzero |\n|---|---:|---:|---:|" }
       { printf "| %d | %.1f | %.1f | %.2f |\n", NR, $1, $2, $1 / $2 }'
