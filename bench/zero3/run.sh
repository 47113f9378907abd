#!/usr/bin/env bash
# bench/zero3/run.sh: the runs behind bench/results/zero3-2026-11-30.md.
#   1. per-rank peak memory by tag after step 1 (train --memory-report) for ddp / zero1 /
#      zero2 / zero3 at N = 2 and 4, fp32 and bf16, d4 shape with the byte vocab (V = 257);
#   2. step time of each strategy relative to ddp (bench-strategies, same shape).
# Needs the fortunes data: ringzero prepare --input /usr/share/games/fortunes/{literature,science,computers,wisdom}
#   --split-fortunes --val-fraction 0.05 --tokenizer byte --out build/data/fortunes
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/bench-zero3}
mkdir -p "$out"
rz=build/ringzero
for n in 2 4; do
  for p in fp32 bf16; do
    for s in ddp zero1 zero2 zero3; do
      $rz train --model d4 --data 'build/data/fortunes/train_*.bin' --steps 1 --batch 4 --seq 128 --bucket-mb 1 \
        --threads 1 --strategy $s --precision $p --nproc-per-node $n --memory-report "$out/mem_${s}_${p}_${n}.json" \
        > "$out/mem_${s}_${p}_${n}.log" 2>&1
    done
  done
done
for n in 2 4; do
  for p in fp32 bf16; do
    $rz bench-strategies --model d4 --vocab 257 --nproc $n --precision $p --batch 4 --seq 128 --steps 5 --untimed-steps 1 \
      --bucket-mb 1 --buckets-per-unit 2>&1 | grep -v AVX512 | tee "$out/bench_${p}_${n}.txt"
  done
done
