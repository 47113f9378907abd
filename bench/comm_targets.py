#!/usr/bin/env python3
"""Medians and ratios of bench/comm_targets.sh output: python3 bench/comm_targets.py raw.txt"""
import statistics, sys
from collections import defaultdict

t = defaultdict(list)  # (impl, transport, op, N, bytes) -> [us]
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 6: continue
    impl, tr, op, n, b, us = f
    t[(impl, tr, op, int(n), int(b))].append(float(us))
med = {k: statistics.median(v) for k, v in t.items()}
def row(op, tr, peer, n, b, need, lat=False):
    a, p = med.get(("ringzero", tr, op, n, b)), med.get((peer, tr, op, n, b))
    if a is None or p is None: return
    ratio = p / a  # > 1: ringzero faster
    ok = (a <= need * p) if lat else (ratio >= need)
    goal = f"<= {need}x" if lat else f">= {need}x"
    print(f"| {op} | {tr} | {n} | {b} | {a:.1f} | {p:.1f} | {ratio:.2f}x | {goal} | {'met' if ok else 'missed'} | {len(t[('ringzero', tr, op, n, b)])} |")
print("| op | transport | N | bytes | ringzero us | peer us | peer/ringzero | target | | runs |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n in (2, 4):
    row("latency", "shm", "openmpi", n, 8, 1.5 if n == 2 else 2.0, lat=True)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for b in (65536, 1 << 20, 16 << 20): row(op, "shm", "openmpi", n, b, 1.5)
    for b in (1 << 20, 4 << 20, 16 << 20, 64 << 20): row("all_reduce", "tcp", "gloo", n, b, 1.5)

if any(k[0] == "ringzero-slots" for k in t):
    print()
    print("Direct reads (CMA) on vs off (RINGZERO_SHM_CMA=0), shm:")
    print()
    print("| op | N | bytes | direct us | slots us | openmpi us | slots/direct | openmpi/direct |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (2, 4):
        for op in ("all_reduce", "all_gather"):
            for b in (65536, 1 << 20, 16 << 20):
                a, s_, p = (med.get((i, "shm", op, n, b)) for i in ("ringzero", "ringzero-slots", "openmpi"))
                if a is None or s_ is None or p is None: continue
                print(f"| {op} | {n} | {b} | {a:.1f} | {s_:.1f} | {p:.1f} | {s_ / a:.2f}x | {p / a:.2f}x |")

if any(k[0] == "ringzero-cma" for k in t):
    print()
    print("AllGather on registered (shared) host memory vs private memory (--host-memory private: CMA), shm:")
    print()
    print("| N | bytes | registered us | private (CMA) us | slots us | openmpi us | cma/registered | slots/registered | openmpi/registered |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (2, 4):
        for b in (65536, 1 << 20, 16 << 20):
            a, c_, s_, p = (med.get((i, "shm", "all_gather", n, b)) for i in ("ringzero", "ringzero-cma", "ringzero-slots", "openmpi"))
            if a is None or c_ is None or s_ is None or p is None: continue
            print(f"| {n} | {b} | {a:.1f} | {c_:.1f} | {s_:.1f} | {p:.1f} | {c_ / a:.2f}x | {s_ / a:.2f}x | {p / a:.2f}x |")

if any(k[0] == "ringzero-before" for k in t):
    print()
    print("Before (BEFORE=older binary) vs after, shm:")
    print()
    print("| op | N | bytes | before us | after us | openmpi us | before/after | openmpi/before | openmpi/after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (2, 4):
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            for b in (65536, 1 << 20, 16 << 20):
                o, a, p = (med.get((i, "shm", op, n, b)) for i in ("ringzero-before", "ringzero", "openmpi"))
                if o is None or a is None or p is None: continue
                print(f"| {op} | {n} | {b} | {o:.1f} | {a:.1f} | {p:.1f} | {o / a:.2f}x | {p / o:.2f}x | {p / a:.2f}x |")
