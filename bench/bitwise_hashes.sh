#!/usr/bin/env bash
# Fingerprints of training results, for a change that must not change them (a refactor):
# run it before and after on the same machine and compare the lines. Each line is one run:
# a sha256 over its per-step losses, grad norms and validation losses (the metrics' numbers
# as printed, all 17 digits), one over its final checkpoint's model.bin and rank states,
# and one over the generated sample text.
#   main  configs/tiny.toml (the README's main job), 2 ranks, zero2, 40 steps
#   d12   the GPT-2 d12 shape (byte vocabulary), B4 T64, 2 ranks, 3 steps, each strategy
#
#   bash bench/bitwise_hashes.sh [BUILD_DIR]   # default build; writes under a temp dir
#   BITWISE_WORK=/tmp/other bash bench/bitwise_hashes.sh    # another work directory
#   MAIN_EXTRA="--warmup 10" bash bench/bitwise_hashes.sh   # flags for the main run only (to match
#                                                         # a checkout whose configs/tiny.toml differs)
set -euo pipefail
cd "$(dirname "$0")/.."
rz=${1:-build}/ringzero
[ -x "$rz" ] || { echo "bitwise_hashes: no $rz (bash scripts/build.sh --target ringzero)" >&2; exit 1; }
# A fixed work directory: checkpoints record nothing of their path, but a fixed one keeps
# every input the same between the two runs anyway.
work=${BITWISE_WORK:-/tmp/ringzero-bitwise}  # BITWISE_WORK: another, for runs side by side
rm -rf "$work"
mkdir -p "$work"
f=/usr/share/games/fortunes
"$rz" prepare --input "$f/literature" "$f/science" "$f/computers" "$f/wisdom" --split-fortunes \
  --tokenizer byte --val-fraction 0.05 --out "$work/data" >/dev/null

fingerprint() {  # NAME: prints NAME and the three hashes of $work/NAME
  local d=$work/$1 ck
  ck=$(ls -d "$d"/ckpt/step_* | tail -n 1)
  printf '%-12s metrics %s  checkpoint %s  sample %s\n' "$1" \
    "$(grep -oE '"(loss|grad_norm|val_loss)":[^,}]*' "$d/metrics.jsonl" | sha256sum | cut -c1-16)" \
    "$(cat "$ck/model.bin" "$ck"/rank_*.state | sha256sum | cut -c1-16)" \
    "$(sed -n '/^---- sample/,/^--------$/p' "$d/log" | sha256sum | cut -c1-16)"
}

run() {  # NAME ARGS...: one training run into $work/NAME
  local name=$1; shift
  mkdir -p "$work/$name"
  "$rz" train "$@" --data "$work/data/train_*.bin" --val-data "$work/data/val_*.bin" \
    --save-dir "$work/$name/ckpt" --metrics "$work/$name/metrics.jsonl" >"$work/$name/log" 2>&1 ||
    { tail -n 5 "$work/$name/log" >&2; echo "bitwise_hashes: run $name failed" >&2; exit 1; }
  fingerprint "$name"
}

run main configs/tiny.toml --nproc-per-node 2 --strategy zero2 --steps 40 --eval-every 20 --sample-every 40 ${MAIN_EXTRA:-}
for s in ddp zero1 zero2 zero3; do
  run "d12-$s" --model d12 --batch 4 --seq 64 --steps 3 --nproc-per-node 2 --strategy "$s" \
    --eval-every 3 --eval-batches 1 --sample-every 3 --sample-tokens 16
done
