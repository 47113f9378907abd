#!/usr/bin/env python3
"""By-hand checks of ringzero's Hugging Face interop against transformers itself
(bench/results/hf-interop-2026-12-07.md records a run; nothing here runs in CI).

    python bench/hf_interop.py make   --out DIR [--layers 12 --heads 12 --embd 768 ...]
        a random transformers GPT2LMHeadModel (124M-shaped by default), its weights
        sharpened (embeddings and matrices x --sharpen) so greedy decoding has no near-ties,
        saved with save_pretrained (config.json + model.safetensors)
    python bench/hf_interop.py greedy --model DIR --prompt TEXT --tokens 32 --out FILE [--byte]
        transformers' own greedy generate(): prints the token ids and the smallest top-1 vs
        top-2 logit margin along the path, and writes prompt + continuation as bytes to FILE
        (to compare with `ringzero sample --temperature 0`'s output)
    python bench/hf_interop.py state  --model DIR --tokens-from SHARD --B 2 --T 64 --out S.bin
        an llm.c debug-state file (magic 20240327, version 2) from transformers: the first
        B x (T + 1) tokens of an llm.c token shard, transformers' logits, loss and gradients
        (Conv1D gradients transposed into llm.c's (out, in), wte's padded rows zero), for
        `ringzero verify --model ... --state S.bin`

The GPT-2 tokenizer here is transformers' GPT2Tokenizer over the repository's
data/gpt2/encoder.json and vocab.bpe (no download): an implementation independent of
ringzero's.
"""
import argparse
import json
import os

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tokenizer():
    d = os.path.join(REPO, "data", "gpt2")
    with open(os.path.join(d, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(d, "vocab.bpe"), encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f if line.strip() and not line.startswith("#version")]
    return GPT2Tokenizer(vocab=vocab, merges=merges)


def byte_decoder():
    # GPT-2's byte <-> printable-character table (its published bytes_to_unicode), inverted.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def cmd_make(a):
    cfg = GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=a.embd, n_positions=a.positions, vocab_size=a.vocab)
    torch.manual_seed(a.seed)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:  # embeddings and Conv1D weights
                p.mul_(a.sharpen)
            elif name.endswith(".bias"):
                p.copy_(0.02 * torch.randn_like(p))
    model.save_pretrained(a.out)
    print("saved", a.out, sum(p.numel() for p in model.parameters()), "parameters")


def cmd_greedy(a):
    model = GPT2LMHeadModel.from_pretrained(a.model)
    model.eval()
    ids = list(a.prompt.encode("utf-8")) if a.byte else tokenizer().encode(a.prompt)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=a.tokens, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    new = out.sequences[0].tolist()[len(ids):]
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    if a.byte:  # ringzero's byte tokenizer: token = byte, 256 = end of text
        text = b"".join(bytes([i]) if i < 256 else b"\n<|endoftext|>\n" for i in new)
    else:
        dec = byte_decoder()
        tok = tokenizer()
        text = b"".join(bytes(dec[c] for c in tok.convert_ids_to_tokens(i)) for i in new)
    with open(a.out, "wb") as f:
        f.write(a.prompt.encode("utf-8") + text + b"\n")
    print("prompt ids", ids)
    print("greedy ids", new)
    print("smallest top-1 margin along the path %.4f (median %.4f)" % (min(margins), float(np.median(margins))))


def cmd_state(a):
    model = GPT2LMHeadModel.from_pretrained(a.model, torch_dtype=torch.float32)
    model.train(False)
    cfg = model.config
    raw = np.fromfile(a.tokens_from, dtype=np.int32, count=256)
    assert raw[0] == 20240520, "not an llm.c token shard"
    toks = np.fromfile(a.tokens_from, dtype=np.uint16, offset=1024, count=a.B * (a.T + 1)).astype(np.int64)
    toks = toks.reshape(a.B, a.T + 1)
    x, y = torch.tensor(toks[:, :-1]), torch.tensor(toks[:, 1:])
    out = model(x, labels=None)
    logits = out.logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    loss.backward()
    L, C, V = cfg.n_layer, cfg.n_embd, cfg.vocab_size
    Vp = (V + 63) // 64 * 64
    t = model.transformer

    def g(p, conv=False):
        d = p.grad.detach().float()
        return (d.t() if conv else d).contiguous().numpy().ravel()

    wte = np.zeros((Vp, C), dtype=np.float32)
    wte[:V] = t.wte.weight.grad.detach().numpy()  # the tied lm_head's gradient is in it
    parts = [wte.ravel(), g(t.wpe.weight)]
    per_layer = [
        lambda h: g(h.ln_1.weight), lambda h: g(h.ln_1.bias), lambda h: g(h.attn.c_attn.weight, True),
        lambda h: g(h.attn.c_attn.bias), lambda h: g(h.attn.c_proj.weight, True), lambda h: g(h.attn.c_proj.bias),
        lambda h: g(h.ln_2.weight), lambda h: g(h.ln_2.bias), lambda h: g(h.mlp.c_fc.weight, True),
        lambda h: g(h.mlp.c_fc.bias), lambda h: g(h.mlp.c_proj.weight, True), lambda h: g(h.mlp.c_proj.bias),
    ]
    for f in per_layer:  # llm.c's order: each kind over the layers
        parts += [f(t.h[l]) for l in range(L)]
    parts += [g(t.ln_f.weight), g(t.ln_f.bias)]
    header = np.zeros(256, dtype=np.int32)
    header[:4] = [20240327, 2, a.B, a.T]
    with open(a.out, "wb") as f:
        f.write(header.tobytes())
        f.write(toks[:, :-1].astype(np.int32).tobytes())
        f.write(toks[:, 1:].astype(np.int32).tobytes())
        f.write(logits.detach().float().numpy().astype(np.float32).tobytes())
        f.write(np.float32(loss.item()).tobytes())
        for p in parts:
            f.write(p.astype(np.float32).tobytes())
    print("wrote", a.out, "loss %.6f" % loss.item())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    m.add_argument("--layers", type=int, default=12)
    m.add_argument("--heads", type=int, default=12)
    m.add_argument("--embd", type=int, default=768)
    m.add_argument("--positions", type=int, default=1024)
    m.add_argument("--vocab", type=int, default=50257)
    m.add_argument("--sharpen", type=float, default=4.0)
    m.add_argument("--seed", type=int, default=1207)
    gr = sub.add_parser("greedy")
    gr.add_argument("--model", required=True)
    gr.add_argument("--prompt", required=True)
    gr.add_argument("--tokens", type=int, default=32)
    gr.add_argument("--out", required=True)
    gr.add_argument("--byte", action="store_true", help="the prompt's bytes are its tokens (ringzero's byte tokenizer)")
    st = sub.add_parser("state")
    st.add_argument("--model", required=True)
    st.add_argument("--tokens-from", required=True)
    st.add_argument("--B", type=int, default=2)
    st.add_argument("--T", type=int, default=64)
    st.add_argument("--out", required=True)
    a = ap.parse_args()
    {"make": cmd_make, "greedy": cmd_greedy, "state": cmd_state}[a.cmd](a)


if __name__ == "__main__":
    main()
