#!/usr/bin/env bash
# bench/hf_interop.sh [WORKDIR]: ringzero and transformers on the same GPT-2 weights, both
# ways, by hand (bench/results/hf-interop-2026-12-07.md records a run). Needs a built
# build/ringzero, a Python with torch + transformers (PYTHON, default /work/venv/bin/python)
# and a text file (TEXT, default tinyshakespeare). Several GB in WORKDIR (default /tmp/hf_interop).
#   1. a random 124M-shaped transformers GPT-2 (weights x8: no near-ties) -> save_pretrained ->
#      ringzero sample --temperature 0 beside transformers' greedy generate(): 32 tokens
#   2. the same model: transformers' logits, loss and gradients on a batch (an llm.c debug
#      state) checked by `ringzero verify --model hf:DIR`
#   3. a model ringzero trained -> export hf: -> from_pretrained: transformers' logits and
#      gradients checked by `ringzero verify` against the checkpoint, and greedy tokens
#   4. the issue's path: hf:DIR fine-tuned on 2 ranks with zero2, exported, loaded by
#      transformers (its greedy tokens against ringzero's)
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/hf_interop}
PY=${PYTHON:-/work/venv/bin/python}
TEXT=${TEXT:-/work/shared/data/tinyshakespeare.txt}
RZ=build/ringzero
mkdir -p "$W"
step() { echo; echo "== $*"; }
same() { if cmp -s "$1" "$2"; then echo "IDENTICAL: $1 $2"; else echo "DIFFERENT: $1 $2"; exit 1; fi; }
PROMPT="The ring passes each chunk to its right neighbour, and"

step "data: $TEXT in 10 documents, byte and gpt2 shards"
rm -rf "$W/text" && mkdir -p "$W/text" && split -n l/10 -d "$TEXT" "$W/text/part"
[ -d "$W/bytes" ] || $RZ prepare --input "$W/text/*" --tokenizer byte --val-fraction 0.1 --out "$W/bytes" | tail -1
[ -d "$W/gpt2" ] || $RZ prepare --input "$W/text/*" --tokenizer gpt2 --val-fraction 0.1 --out "$W/gpt2" | tail -1

step "1. 124M-shaped random transformers model, greedy 32 tokens both ways"
[ -f "$W/hf124m/model.safetensors" ] || $PY bench/hf_interop.py make --out "$W/hf124m" --sharpen 8
$PY bench/hf_interop.py greedy --model "$W/hf124m" --prompt "$PROMPT" --tokens 32 --out "$W/greedy_hf.txt"
/usr/bin/time -f "ringzero sample: %e s" $RZ sample --model "hf:$W/hf124m" --tokenizer gpt2 --prompt "$PROMPT" \
  --temperature 0 --tokens 32 >"$W/greedy_rz.txt"
same "$W/greedy_hf.txt" "$W/greedy_rz.txt"

step "2. its logits, loss and gradients from transformers, verified by ringzero"
$PY bench/hf_interop.py state --model "$W/hf124m" --tokens-from "$W/gpt2/val_000000.bin" --B 2 --T 64 --out "$W/state124m.bin"
$RZ verify --model "hf:$W/hf124m" --state "$W/state124m.bin" --quiet

step "3. a model ringzero trained (byte Shakespeare, tiny preset, 300 steps), exported and read by transformers"
rm -rf "$W/ck_tiny" "$W/tiny_hf"
$RZ train --model tiny --data "$W/bytes/train_*.bin" --val-data "$W/bytes/val_*.bin" --eval-every 300 --steps 300 \
  --batch 8 --seq 64 --lr 3e-3 --warmup 20 --save-dir "$W/ck_tiny" | grep -E '^step +300/'
$RZ export --model "$W/ck_tiny" --to "hf:$W/tiny_hf"
$PY bench/hf_interop.py state --model "$W/tiny_hf" --tokens-from "$W/bytes/val_000000.bin" --B 4 --T 64 --out "$W/state_tiny.bin"
$RZ verify --model "$W/ck_tiny" --state "$W/state_tiny.bin" --quiet --logits-atol 1e-4 --loss-atol 1e-5 --grads-atol 1e-5
$PY bench/hf_interop.py greedy --byte --model "$W/tiny_hf" --prompt "ROMEO:" --tokens 48 --out "$W/tiny_greedy_hf.txt"
$RZ sample --model "hf:$W/tiny_hf" --tokenizer byte --prompt "ROMEO:" --temperature 0 --tokens 48 >"$W/tiny_greedy_rz.txt"
same "$W/tiny_greedy_hf.txt" "$W/tiny_greedy_rz.txt"

step "4. hf:DIR fine-tuned on 2 ranks with zero2, exported, loaded by transformers"
rm -rf "$W/ck_ft" "$W/ft_hf"
/usr/bin/time -f "fine-tune: %e s" $RZ train --init "hf:$W/hf124m" --data "$W/gpt2/train_*.bin" --val-data "$W/gpt2/val_*.bin" \
  --tokenizer gpt2 --eval-every 4 --eval-batches 2 --steps 4 --batch 2 --seq 64 --lr 1e-4 --nproc-per-node 2 \
  --strategy zero2 --save-dir "$W/ck_ft" | grep -E '^step|^ringzero train'
$RZ export --model "$W/ck_ft" --to "hf:$W/ft_hf"
$PY bench/hf_interop.py greedy --model "$W/ft_hf" --prompt "$PROMPT" --tokens 32 --out "$W/ft_greedy_hf.txt"
$RZ sample --model "hf:$W/ft_hf" --tokenizer gpt2 --prompt "$PROMPT" --temperature 0 --tokens 32 >"$W/ft_greedy_rz.txt"
same "$W/ft_greedy_hf.txt" "$W/ft_greedy_rz.txt"
$PY bench/hf_interop.py state --model "$W/ft_hf" --tokens-from "$W/gpt2/val_000000.bin" --B 2 --T 64 --out "$W/state_ft.bin"
$RZ verify --model "$W/ck_ft" --state "$W/state_ft.bin" --quiet
echo; echo "hf_interop: all checks passed"
