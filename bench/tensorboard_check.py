#!/usr/bin/env python3
"""By hand (bench/results/tensorboard-2026-12-07.md): does PyPI's TensorBoard see every
value a `ringzero train --metrics M.jsonl --tensorboard DIR` run recorded?

    python3 bench/tensorboard_check.py DIR M.jsonl

Loads DIR with tensorboard's own EventAccumulator (what `tensorboard --logdir` uses, with
its purge of steps a resumed run repeats), flattens every JSONL record as ringzero's
writer does (nested objects as outer/inner, true as 1, nulls left out), and checks that
each value is there at its step, equal after rounding to fp32 (a scalar summary's
simple_value is a float), and that no tag holds a step twice. Needs tensorboard; ringzero
itself runs no Python.
"""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def flat(node, tag, out):
    if isinstance(node, bool):
        out[tag] = 1.0 if node else 0.0
    elif isinstance(node, (int, float)):
        out[tag] = float(node)
    elif isinstance(node, dict):
        for k, v in node.items():
            flat(v, tag + "/" + k, out)


def main():
    logdir, jsonl = sys.argv[1], sys.argv[2]
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    tags = acc.Tags()["scalars"]
    seen = {(e.step, t): e.value for t in tags for e in acc.Scalars(t)}
    bad = checked = 0
    for line in open(jsonl):
        j = json.loads(line)
        want = {}
        for k, v in j.items():
            if k != "step":
                flat(v, k, want)
        for tag, v in want.items():
            got = seen.get((j["step"], tag))
            if got is None or got != struct.unpack("f", struct.pack("f", v))[0]:
                bad += 1
                print("missing or different:", j["step"], tag, v, got)
            checked += 1
    dups = {t: len(s) - len(set(s)) for t in tags for s in [[e.step for e in acc.Scalars(t)]] if len(s) != len(set(s))}
    print(f"{len(tags)} scalar tags: {sorted(tags)}")
    print(f"{checked} JSONL values checked, {bad} missing or different; {len(seen)} scalar points in TensorBoard")
    print("tags with a step recorded twice:", dups if dups else "none")
    sys.exit(1 if bad or dups else 0)


if __name__ == "__main__":
    main()
