#!/usr/bin/env python3
"""Writes fuzz/corpus/hf_llama/: seeds for fuzz/fuzz_hf_llama.cpp, each a Hugging Face Llama
directory in one blob (4 bytes little-endian: the length of config.json's text, the text,
then model.safetensors).

Rerun by hand (never in CI), from the repository root:
    /work/venv/bin/python fuzz/make_hf_llama_seeds.py
Seeds: a tiny LlamaForCausalLM (1 layer, hidden 8, 2 heads on 1 kv head, intermediate 16,
vocab 8, 8 positions) saved by transformers, tied and untied, with its config in the form
transformers 5 writes (rope_parameters) and the older one (rope_theta, rope_scaling null); a
verify reference for the untied one as the weights part; and the fixture's own configs alone.
"""
import io
import json
import os
import struct
import tempfile

import torch
from safetensors.torch import save as st_save
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "hf_llama")


def blob(config_text, weights):
    c = config_text.encode()
    return struct.pack("<I", len(c)) + c + weights


def tiny(tied):
    cfg = LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=8, tie_word_embeddings=tied)
    torch.manual_seed(1)
    m = LlamaForCausalLM(cfg)
    with tempfile.TemporaryDirectory() as d:
        m.save_pretrained(d)
        with open(os.path.join(d, "config.json")) as f:
            text = f.read()
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            weights = f.read()
    return m, text, weights


def main():
    os.makedirs(OUT, exist_ok=True)
    for tied in (True, False):
        m, text, weights = tiny(tied)
        name = "tied" if tied else "untied"
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(blob(text, weights))
        old = json.loads(text)
        theta = old.pop("rope_parameters", {}).get("rope_theta", 10000.0)
        old["rope_theta"] = theta
        old["rope_scaling"] = None
        with open(os.path.join(OUT, name + "_old_config.bin"), "wb") as f:
            f.write(blob(json.dumps(old), weights))
        if not tied:
            x = torch.tensor([[1, 2, 3, 4]])
            logits = m(x).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 8), torch.tensor([2, 3, 4, 5]))
            loss.backward()
            ref = {"inputs": x.float(), "targets": torch.tensor([[2, 3, 4, 5]]).float(),
                   "logits": logits.detach().float(), "loss": loss.detach().reshape(1)}
            for n, p in m.named_parameters():
                ref["grad." + n] = p.grad.detach().contiguous()
            with open(os.path.join(OUT, "reference.bin"), "wb") as f:
                f.write(blob(text, st_save(ref)))
    fixture = os.path.join(HERE, "..", "tests", "fixtures", "hf_llama_tiny")
    for name in ("tied", "untied"):
        with open(os.path.join(fixture, name, "config.json")) as f:
            with open(os.path.join(OUT, "fixture_" + name + "_config.bin"), "wb") as g:
                g.write(blob(f.read(), b""))
    print("wrote", sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
