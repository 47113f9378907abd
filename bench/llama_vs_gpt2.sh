#!/usr/bin/env bash
# bench/llama_vs_gpt2.sh [PAIRS] [EXTRA...]: the main job's GPT-2 (configs/tiny.toml) against the
# Llama of about its parameter count (configs/tiny-llama.toml), on the same data, tokens and
# schedule, run in turn (GPT-2, Llama, GPT-2, Llama, ...: PAIRS pairs, default 2) so that a
# drift in the machine's speed falls on both. Each run: 2 ranks, zero2, the config's 1500
# steps (3.1M tokens), validation at steps 500, 1000, 1500. Prints per run the final
# validation loss, the median tokens/s of its steps (the progress line's tok/s: tokens of the
# step over its wall time, the same on every rank) and its wall seconds; EXTRA goes to both
# runs (--precision fp32 by default: the configs' own). Results:
# bench/results/llama-2026-12-07.md. Data: scripts/run.sh prepares build/data/fortunes.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs="${1:-2}"
shift || true
rz=build/ringzero
data=build/data/fortunes
if [ ! -f "$data/train_000000.bin" ]; then
  f=/usr/share/games/fortunes
  "$rz" prepare --input "$f/literature" "$f/science" "$f/computers" "$f/wisdom" \
    --split-fortunes --tokenizer byte --val-fraction 0.05 --out "$data" >/dev/null
fi
out=build/runs/llama_vs_gpt2
mkdir -p "$out"
grep -o -m1 'avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '; nproc; uptime
for p in $(seq 1 "$pairs"); do
  for which in gpt2 llama; do
    cfg=configs/tiny.toml
    [ "$which" = llama ] && cfg=configs/tiny-llama.toml
    m="$out/$which-$p.jsonl"
    start=$(date +%s.%N)
    "$rz" train "$cfg" --data "$data/train_*.bin" --val-data "$data/val_*.bin" --sample-every 0 \
      --metrics "$m" "$@" > "$out/$which-$p.log" 2>&1
    end=$(date +%s.%N)
    python3 - "$m" "$which" "$p" "$start" "$end" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
val = [r["val_loss"] for r in rows if "val_loss" in r]
tps = statistics.median(r["tokens_per_s"] for r in rows)
print("%-5s run %s: val loss %.4f (steps 500/1000/1500: %s), median %.0f tokens/s, wall %.0f s" % (
    sys.argv[2], sys.argv[3], val[-1], " ".join("%.4f" % v for v in val), tps, float(sys.argv[5]) - float(sys.argv[4])))
PY
  done
done
