#!/usr/bin/env bash
# The README's main job: installs what is missing, builds build/ringzero (Release), prepares the fortunes
# corpus (once), then trains configs/tiny.toml on 2 CPU processes with ZeRO-2 in --precision
# auto (bf16 where the CPU has AVX512_BF16 or AMX-BF16, fp32 elsewhere; the table says which): the loss
# going down, a memory table comparing what each rank holds, and generated text at the end;
# then draws the loss curve and the memory picture (gnuplot) and prints their paths.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --target ringzero  # the main job needs the binary only, not the tests

data=build/data/fortunes
if [ ! -f "$data/train_000000.bin" ] || [ ! -f "$data/tokenizer.bin" ]; then
  # Debian's fortunes package: the literature, science, computers and wisdom files.
  f=/usr/share/games/fortunes
  build/ringzero prepare --input "$f/literature" "$f/science" "$f/computers" "$f/wisdom" \
    --split-fortunes --tokenizer byte --val-fraction 0.05 --out "$data"
fi
runs=build/runs/tiny
mkdir -p "$runs"
# A second run.sh starts afresh over the first's checkpoint (--overwrite), unless it is told to --resume.
fresh=(--overwrite)
for a in "$@"; do case "$a" in --resume*) fresh=() ;; esac; done
build/ringzero train configs/tiny.toml --nproc-per-node 2 --strategy zero2 --precision auto \
  --data "$data/train_*.bin" --val-data "$data/val_*.bin" \
  --metrics "$runs/metrics.jsonl" --memory-report "$runs/memory.json" \
  --save-dir "$runs/ckpt" --keep 1 "${fresh[@]}" "$@"

# The pictures: the loss curve, and what each rank holds -- the estimate for configs/tiny.toml's
# model (every strategy, N = 1, 2, 4, 8) beside what this run measured.
build/ringzero memory --layers 4 --channels 128 --heads 4 --vocab 257 --seq 64 --batch 16 --bucket-mb 0.25 \
  --precision auto --nranks 1 --nranks 2 --nranks 4 --nranks 8 --json > "$runs/memory-estimate.json"
build/ringzero plot loss --metrics "$runs/metrics.jsonl" --label "configs/tiny.toml, zero2, 2 ranks${*:+ $*}" \
  --out "$runs/loss.png" >/dev/null
build/ringzero plot memory --estimate "$runs/memory-estimate.json" --measured "$runs/memory.json" \
  --out "$runs/memory.png" >/dev/null
echo "pictures: $runs/loss.png (loss and validation loss), $runs/memory.png (bytes per rank by tag)"
