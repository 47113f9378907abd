#!/usr/bin/env bash
# Issue 29's check of --precision auto: the main job (scripts/run.sh's training command:
# configs/tiny.toml, 2 ranks, ZeRO-2) once in fp32 and once in auto, the same steps and data,
# and their validation losses side by side. On a CPU with AVX512_BF16 or AMX-BF16 auto is bf16;
# elsewhere both runs are fp32 and must agree exactly. Usage:
#   bash bench/precision_auto.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, build/precision-auto)
# Extra flags for both runs: EXTRA="--seed 2" bash bench/precision_auto.sh
set -euo pipefail
B=${1:-build}
OUT=${2:-build/precision-auto}
D=${DATA:-build/data/fortunes}
mkdir -p "$OUT"
grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/^/bf16 flags: /;s/$/\n/'
for P in fp32 auto; do
  echo "### $B/ringzero train configs/tiny.toml --nproc-per-node 2 --strategy zero2 --precision $P" \
       "--eval-every 250 --sample-every 0 ${EXTRA:-}"
  "$B/ringzero" train configs/tiny.toml --nproc-per-node 2 --strategy zero2 --precision "$P" \
    --data "$D/train_*.bin" --val-data "$D/val_*.bin" --eval-every 250 --sample-every 0 \
    --metrics "$OUT/$P.jsonl" ${EXTRA:-} 2>&1 | grep -E '^precision|val ' | sed 's/ | lr.*| val/ | val/'
done
python3 - "$OUT/fp32.jsonl" "$OUT/auto.jsonl" <<'PY'
import json, sys
def vals(path):
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(path)) if r.get("val_loss") is not None}
a, b = vals(sys.argv[1]), vals(sys.argv[2])
print("| step | fp32 val | auto val | auto - fp32 |\n|---:|---:|---:|---:|")
for s in sorted(a):
    print(f"| {s} | {a[s]:.4f} | {b[s]:.4f} | {b[s] - a[s]:+.4f} |")
PY
