#!/usr/bin/env bash
# bench/llama_interop.sh: ringzero's llama family against transformers, by hand (needs a
# Python with torch, transformers and safetensors: PYTHON=/path/to/python; never in CI).
#   1. a random SmolLM2-135M-shaped LlamaForCausalLM saved by transformers: `ringzero verify`
#      against transformers' float64 logits, loss and gradients of one batch (T=64), and
#      `ringzero sample` greedy tokens against transformers' greedy decoding;
#   2. a Llama that ringzero trained (llama-tiny, 30 steps on 2 ranks): transformers loads the
#      checkpoint's step directory as it is, and `ringzero verify` checks ringzero's
#      forward and backward against what transformers computes from it.
# Results: bench/results/llama-2026-12-07.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
rz=build/ringzero
w="${1:-$(mktemp -d)}"
mkdir -p "$w"
echo "work dir: $w"

echo "== 1. SmolLM2-135M's shape, random weights, made by transformers"
"$PYTHON" bench/llama_interop.py make-smol "$w/smol"
"$rz" verify --model "hf:$w/smol" --state "$w/smol/reference.safetensors" --quiet
"$rz" sample --model "hf:$w/smol" --tokenizer byte --prompt "Once upon a time" --tokens 32 --temperature 0 \
  > "$w/smol_sample.txt"
"$PYTHON" - "$w" <<'PY'
import json, sys
w = sys.argv[1]
g = json.load(open(w + "/smol/greedy.json"))
want = bytes(g["prompt"]) + b"".join(b"<|endoftext|>" if t == 256 else bytes([t]) for t in g["greedy"]) + b"\n"
got = open(w + "/smol_sample.txt", "rb").read()
print("greedy tokens: transformers %s, ringzero %s: %s (smallest top-1 margin %.3f)" % (
    len(g["greedy"]), "the same bytes" if got == want else "DIFFERENT", "OK" if got == want else "FAIL", g["min_margin"]))
sys.exit(0 if got == want else 1)
PY

echo "== 2. a Llama ringzero trained, read back by transformers from the checkpoint"
"$rz" prepare --input bench/llama_interop.py bench/hf_interop.py --tokenizer byte --out "$w/data" >/dev/null
"$rz" train --model llama-tiny --data "$w/data/train_*.bin" --batch 4 --seq 32 --steps 30 --lr 3e-3 \
  --nproc-per-node 2 --strategy zero2 --save-dir "$w/ck" --overwrite --threads 1 >/dev/null
step="$w/ck/step_00000030"
"$PYTHON" bench/llama_interop.py reference "$step" "$w/ck_reference.safetensors"
"$rz" verify --model "$step" --state "$w/ck_reference.safetensors" --quiet
