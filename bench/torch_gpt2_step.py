#!/usr/bin/env python3
"""bench/torch_gpt2_step.py: the PyTorch peer of `ringzero bench-step --device cuda`.

GPT-2 (the ringzero presets' shapes: d12 is 124M with vocab padded to 50304, T up to 1024),
one training step = forward + backward + fused AdamW, bf16 autocast with fp32 weights,
torch.compile, causal attention through scaled_dot_product_attention (flash). Random
tokens; the loss is real cross-entropy. Prints one summary line per batch size:
tokens/s, median step ms, peak device memory, and MFU against the bf16 GEMM rate that it
measures first in the same process (an 8192^3 matmul), using llm.c's FLOP count
(6 x params x tokens + 12 x L x C x T x tokens for attention).

    python3 bench/torch_gpt2_step.py --model d12 --seq 1024 --batch 16,32
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # layers, channels, heads (ringzero's model presets)
    "d2": (2, 128, 4), "d4": (4, 256, 4), "d6": (6, 384, 6), "d12": (12, 768, 12),
    "d24": (24, 1024, 16), "d36": (36, 1280, 20), "d48": (48, 1600, 25),
}
VOCAB, VOCAB_PADDED, MAX_T = 50257, 50304, 1024


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, C, NH):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB_PADDED, C), nn.Embedding(MAX_T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied classifier, as GPT-2
        return F.cross_entropy(logits[..., :VOCAB].float().flatten(0, 1), targets.flatten())


def gemm_tflops(dev):
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return 2 * n**3 / statistics.median(times) / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="d12", choices=sorted(PRESETS))
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", default="16", help="comma-separated batch sizes")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_gpt2_step: no CUDA device visible to PyTorch")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    peak = gemm_tflops(dev)
    L, C, NH = PRESETS[args.model]
    T = args.seq
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: bf16 GEMM {peak:.0f} TFLOP/s (8192^3)")
    for B in [int(b) for b in args.batch.split(",")]:
        model = GPT2(L, C, NH).to(dev)
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        step_model = model if args.no_compile else torch.compile(model)
        x = torch.randint(0, VOCAB, (B, T), device=dev)
        y = torch.randint(0, VOCAB, (B, T), device=dev)
        torch.cuda.reset_peak_memory_stats()
        times = []
        for i in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        step = statistics.median(times)
        tokens = B * T
        flops = tokens * (6 * params + 12 * L * C * T)
        mfu = flops / step / 1e12 / peak
        mem = torch.cuda.max_memory_allocated() / 2**30
        print(f"torch-step model={args.model} B={B} T={T} params={params/1e6:.1f}M step_ms={step*1e3:.1f} "
              f"tok_per_s={tokens/step:.0f} tflops={flops/step/1e12:.1f} mfu={100*mfu:.1f}% peak_mem_gib={mem:.2f} "
              f"loss={loss.item():.3f}")
        del model, opt, step_model
        torch.cuda.empty_cache()
    assert math.isfinite(peak)


if __name__ == "__main__":
    main()
