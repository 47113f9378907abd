#!/usr/bin/env bash
# The README's main job: installs what is missing, builds Release, prepares the fortunes
# corpus (once), then trains configs/tiny.toml on 2 CPU processes with ZeRO-2: the loss
# going down, a memory table comparing what each rank holds, and generated text at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh

data=build/data/fortunes
if [ ! -f "$data/train_000000.bin" ] || [ ! -f "$data/tokenizer.bin" ]; then
  # Debian's fortunes package: the literature, science, computers and wisdom files.
  f=/usr/share/games/fortunes
  build/ringzero prepare --input "$f/literature" "$f/science" "$f/computers" "$f/wisdom" \
    --split-fortunes --tokenizer byte --val-fraction 0.05 --out "$data"
fi
exec build/ringzero train configs/tiny.toml --nproc-per-node 2 --strategy zero2 \
  --data "$data/train_*.bin" --val-data "$data/val_*.bin" \
  --metrics build/runs/tiny/metrics.jsonl --memory-report build/runs/tiny/memory.json \
  --save-dir build/runs/tiny/ckpt --keep 1 "$@"
