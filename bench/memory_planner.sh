#!/usr/bin/env bash
# bench/memory_planner.sh: the numbers of bench/results/memory-planner-2026-11-30.md.
#   1. the planner's peak next to the tracker's measured per-rank peak (test_train_memory_plan);
#   2. activation bytes of none / gelu / layer (`ringzero memory`) on d4 (B8 T256), the main
#      job's shape (configs/tiny.toml: L4 C128 B8 T128) and d12 (B8 T1024);
#   3. CPU time of a short training run per recompute mode, layer and gelu against none,
#      alternating runs (farm-bench --vs).
# Run from the repository root after scripts/build.sh. Needs farm-bench for part 3.
set -euo pipefail
RZ=build/ringzero
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

echo "## planner vs measured"
ctest --test-dir build -R test_train_memory_plan --output-on-failure -V | grep -E "rank [0-9]: measured" || true

echo "## activation bytes"
for shape in "--model d4 --vocab 257 --max-seq 256 --batch 4 --seq 256" \
             "--model d4 --layers 4 --channels 128 --heads 4 --vocab 257 --max-seq 128 --batch 8 --seq 128"; do
  echo "### $shape"
  $RZ memory $shape --nranks 2 --strategy zero2 --recompute all --precision fp32 | grep -E "activations|peak"
done
$RZ memory --model d12 --batch 8 --seq 1024 --nranks 8 --strategy zero2 --recompute all --precision bf16 --device cuda | grep -E "activations|peak"

echo "## step time (one process, --threads 1, whole process: start-up included)"
mkdir -p "$W/text"
for i in $(seq 1 4000); do echo "rank $((i % 7)) reduces bucket $(((i * 13) % 11)) of the ring."; done > "$W/text/doc.txt"
$RZ prepare --input "$W/text" --tokenizer byte --val-fraction 0.1 --out "$W/data" >/dev/null
run() {  # SHAPE MODE
  echo "$RZ train $1 --vocab 257 --threads 1 --warmup 1 --data $W/data/train_*.bin --recompute $2"
}
for shape in "--model d4 --max-seq 256 --batch 4 --seq 256 --steps 3" \
             "--model d4 --layers 4 --channels 128 --heads 4 --max-seq 128 --batch 8 --seq 128 --steps 10"; do
  for mode in layer gelu; do
    echo "### $shape: $mode vs none"
    farm-bench -n 3 --timeout 900 --vs "$(run "$shape" none)" -- $(run "$shape" $mode)
  done
done
