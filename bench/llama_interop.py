#!/usr/bin/env python3
"""By-hand checks of ringzero's llama family against transformers (never run in CI; the CI
checks use tests/fixtures/hf_llama_tiny). bench/llama_interop.sh runs the three steps:

  make-smol DIR        a LlamaForCausalLM of SmolLM2-135M's shape (30 layers, hidden 576, 9
                       heads on 3 kv heads, intermediate 1536, vocab 49152, theta 100000, tied)
                       with random weights (transformers' init, the embedding scaled by 4 so
                       the logits are sharp), saved by save_pretrained; beside it REF (a verify
                       reference: one batch B=1 T=64, logits, loss and every gradient in
                       float64) and greedy.json (the 32 tokens greedy decoding appends to a
                       16-byte prompt, among the first 257 logits as `ringzero sample
                       --tokenizer byte` draws them)
  reference DIR REF    a verify reference for any Llama directory (a ringzero checkpoint's
                       step directory: transformers loads it as it is)
  greedy DIR N         prints the greedy continuation of the prompt (byte ids < 257)
"""
import json
import sys

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

PROMPT = list(b"Once upon a time")


def reference(model_dir, out, T=64):
    model = LlamaForCausalLM.from_pretrained(model_dir).double()
    V = model.config.vocab_size
    gen = torch.Generator().manual_seed(7)
    seq = torch.randint(0, min(V, 257), (1, T + 1), generator=gen)
    x, y = seq[:, :-1], seq[:, 1:]
    model.zero_grad()
    logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    ref = {"inputs": x.float().contiguous(), "targets": y.float().contiguous(),
           "logits": logits.detach().float().contiguous(), "loss": loss.detach().float().reshape(1)}
    for name, p in model.named_parameters():
        ref["grad." + name] = p.grad.detach().float().contiguous()
    save_file(ref, out)
    print("reference: loss %.6f, %d gradient tensors -> %s" % (loss.item(), len(ref) - 4, out))


def greedy(model_dir, n, vocab=257):
    model = LlamaForCausalLM.from_pretrained(model_dir).double()
    toks = list(PROMPT)
    margins = []
    with torch.no_grad():
        for _ in range(n):
            row = model(torch.tensor([toks])).logits[0, -1, :vocab]
            top = torch.topk(row, 2)
            margins.append((top.values[0] - top.values[1]).item())
            toks.append(int(top.indices[0]))
    return toks[len(PROMPT):], min(margins)


def make_smol(out):
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                      rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=0,
                      eos_token_id=0)
    torch.manual_seed(20261207)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(4.0)
    model.save_pretrained(out)
    reference(out, out + "/reference.safetensors")
    toks, margin = greedy(out, 32)
    with open(out + "/greedy.json", "w") as f:
        json.dump({"prompt": PROMPT, "greedy": toks, "min_margin": margin}, f)
    print("greedy:", toks, "smallest top-1 margin %.3f" % margin)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make-smol":
        make_smol(sys.argv[2])
    elif cmd == "reference":
        reference(sys.argv[2], sys.argv[3])
    elif cmd == "greedy":
        toks, margin = greedy(sys.argv[2], int(sys.argv[3]))
        print(json.dumps({"greedy": toks, "min_margin": margin}))
    else:
        sys.exit("usage: llama_interop.py make-smol DIR | reference DIR REF | greedy DIR N")
