#!/usr/bin/env bash
# Issue 28's training comparison: the main job's shape (configs/tiny.toml, ZeRO-2) in bf16,
# its gradient buckets reduced in bf16 (rounded at every ring hop) or in fp32 (rounded once),
# at N = 2 (B = 16, the main job) and N = 8 (B = 4: the same 2048 tokens per step), one run
# each, then the four loss curves on one plot. Usage:
#   bash bench/precision_training.sh [BUILD_DIR] [OUT_DIR]    (defaults: build, build/precision-train)
# Extra flags for every run: EXTRA="--seed 2" bash bench/precision_training.sh; NS="8": only N = 8.
set -euo pipefail
B=${1:-build}
OUT=${2:-build/precision-train}
D=${DATA:-build/data/fortunes}
mkdir -p "$OUT"
for N in ${NS:-2 8}; do
  batch=$((32 / N))
  for R in bf16 fp32; do
    name="n${N}-${R}"
    echo "### ringzero train configs/tiny.toml --nproc-per-node $N --batch $batch --precision bf16 --grad-reduce-dtype $R" \
         "--eval-every 250 --sample-every 0 ${EXTRA:-}"
    /usr/bin/time -f "$name: %e s wall, %U s user, %S s sys" \
      "$B/ringzero" train configs/tiny.toml --nproc-per-node "$N" --batch "$batch" --precision bf16 \
      --grad-reduce-dtype "$R" --data "$D/train_*.bin" --val-data "$D/val_*.bin" --eval-every 250 \
      --sample-every 0 --metrics "$OUT/$name.jsonl" ${EXTRA:-} 2>&1 | grep -E "^step .*(/|val)|val |error|s wall" | tail -8
  done
done
[ "${NS:-2 8}" = "2 8" ] || exit 0
"$B/ringzero" plot loss --metrics "$OUT/n2-bf16.jsonl" "$OUT/n2-fp32.jsonl" "$OUT/n8-bf16.jsonl" "$OUT/n8-fp32.jsonl" \
  --label "N=2, bf16 reduction" --label "N=2, fp32 reduction" --label "N=8, bf16 reduction" \
  --label "N=8, fp32 reduction" --title "configs/tiny.toml in bf16, zero2: gradient reduction dtype" \
  --out "$OUT/loss.png"
