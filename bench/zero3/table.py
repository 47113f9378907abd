#!/usr/bin/env python3
"""Tabulates the --memory-report JSON files of bench/zero3/run.sh: per-rank (rank 0) peak
and current MB by tag next to the exact formula (zero/memory/formula.h)."""
import json, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else "build/bench-zero3"
tags = ["params", "grads", "master", "adam_m", "adam_v", "comm", "activations", "workspace"]
for n in (2, 4):
    for p in ("fp32", "bf16"):
        print(f"\n### N = {n}, {p} (rank 0; MB = 1e6 bytes; current after step 1 / peak since start-up; formula)\n")
        print("| strategy | " + " | ".join(tags) + " | peak total | formula states+staging |")
        print("|---" * (len(tags) + 3) + "|")
        for s in ("ddp", "zero1", "zero2", "zero3"):
            f = os.path.join(d, f"mem_{s}_{p}_{n}.json")
            if not os.path.exists(f):
                continue
            j = json.load(open(f))
            r = j["ranks"][0]
            e = j["expected_bytes"]
            exp = {"params": e["params"], "grads": e["grads"], "master": e["master"], "adam_m": e["adam_m"],
                   "adam_v": e["adam_v"], "comm": e["comm_staging"]}
            cells = []
            for t in tags:
                c = f'{r["current"][t]/1e6:.2f} / {r["peak"][t]/1e6:.2f}'
                if t in exp:
                    c += f' ({exp[t]/1e6:.2f})'
                cells.append(c)
            print(f"| {s} | " + " | ".join(cells) + f' | {r["peak_total"]/1e6:.2f} | {e["total"]/1e6:.2f} |')
