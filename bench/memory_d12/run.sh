#!/usr/bin/env bash
# bench/memory_d12/run.sh: the runs behind bench/results/memory-d12-2026-11-30.md (issue 12's
# benchmark on d12; d4 is in zero3-2026-11-30.md).
#   1. per-rank memory by tag after step 1 (train --memory-report) for ddp / zero1 / zero2 /
#      zero3 at N = 2 and 4, fp32 and bf16: d12 (L12 C768 NH12, maxT 1024) with the byte
#      vocabulary (V = 257), B1 T64 (model states do not depend on B and T; the planner gives
#      the activations), 1 MiB buckets;
#   2. step time of each strategy relative to ddp, all four in one bench-strategies run.
# RZ=path/to/ringzero (default build/ringzero); OUT=dir (default build/bench-memory-d12).
# Needs the fortunes data: ringzero prepare --input /usr/share/games/fortunes/{literature,science,computers,wisdom}
#   --split-fortunes --val-fraction 0.05 --tokenizer byte --out build/data/fortunes
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/bench-memory-d12}
rz=${RZ:-build/ringzero}
mkdir -p "$out"
if [ "${SKIP_MEMORY:-0}" != 1 ]; then
  for n in 2 4; do
    for p in fp32 bf16; do
      for s in ddp zero1 zero2 zero3; do
        echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg): train $s $p N=$n"
        /usr/bin/time -f "%e s wall, max RSS %M KiB (rank process with the largest RSS)" \
          $rz train --model d12 --data 'build/data/fortunes/train_*.bin' --steps 1 --batch 1 --seq 64 --bucket-mb 1 \
          --threads 1 --strategy $s --precision $p --nproc-per-node $n --memory-report "$out/mem_${s}_${p}_${n}.json" \
          > "$out/mem_${s}_${p}_${n}.log" 2>&1 || echo "FAILED: see $out/mem_${s}_${p}_${n}.log"
        tail -1 "$out/mem_${s}_${p}_${n}.log"
      done
    done
  done
fi
if [ "${SKIP_TIME:-0}" != 1 ]; then
  for n in ${TIME_N:-2 4}; do
    for p in ${TIME_P:-fp32 bf16}; do
      echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench-strategies $p N=$n"
      $rz bench-strategies --model d12 --vocab 257 --nproc $n --precision $p --batch 1 --seq 64 --steps 2 --untimed-steps 1 \
        --bucket-mb 1 --buckets-per-unit 2>&1 | grep -v AVX512 | tee "$out/bench_${p}_${n}.txt"
      echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg): done"
    done
  done
fi
