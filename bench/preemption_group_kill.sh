#!/usr/bin/env bash
# bench/preemption_group_kill.sh [TRIES] [SIGNAL]: what SLURM's scancel, systemd and a cgroup
# stop do to a ringzero job, counted: SIGNAL (default TERM) to the launcher and every rank at
# once, at a random moment of a 2-rank zero2 run, TRIES times (default 10). A try counts as
# saved when the job exits 128 + SIGNAL with a complete checkpoint (COMPLETE marker) of its
# last trained step, and `--resume` from it runs. Prints one line per try and "saved N of
# TRIES" (issue 40; bench/results/preemption-2026-12-07.md).
set -euo pipefail
cd "$(dirname "$0")/.."
tries="${1:-10}"
sig="${2:-TERM}"
bin="${RINGZERO:-build/ringzero}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A small corpus, prepared into byte-level shards.
mkdir -p "$work/text"
for f in $(seq 0 19); do
  for s in $(seq 0 59); do echo "the rank $((RANDOM % 16)) sends chunk $((RANDOM % 16))."; done > "$work/text/doc$f.txt"
done
"$bin" prepare --input "$work/text" --tokenizer byte --val-fraction 0.1 --out "$work/data" --quiet >/dev/null
args=(train --model tiny --data "$work/data/train_*.bin" --batch 4 --seq 32 --lr 3e-3 --warmup 2 --bucket-mb 0.05
      --threads 1 --nproc-per-node 2 --strategy zero2)
want=$((128 + $(kill -l "$sig")))
saved=0
for i in $(seq 1 "$tries"); do
  d="$work/try$i"
  mkdir -p "$d"
  "$bin" "${args[@]}" --steps 1000000 --save-every 1000000 --save-dir "$d/ck" --metrics "$d/m.jsonl" >"$d/log" 2>&1 &
  launcher=$!
  until [ -s "$d/m.jsonl" ] && [ "$(wc -l < "$d/m.jsonl")" -ge 3 ]; do sleep 0.05; done
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"  # 0 to 0.99 s more: somewhere in a step, a save or a print
  ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
  # shellcheck disable=SC2086  # every pid its own argument: one kill(2) after another, as a cgroup stop
  kill -"$sig" "$launcher" $ranks
  rc=0
  wait "$launcher" || rc=$?
  last=$(tail -n 1 "$d/m.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/')
  ck=$(printf '%s/ck/step_%08d' "$d" "$last")
  resumed=no
  if [ -e "$ck/COMPLETE" ] && "$bin" "${args[@]}" --steps $((last + 1)) --resume --save-dir "$d/ck" >"$d/resume.log" 2>&1; then
    resumed=yes
  fi
  echo "try $i: exit $rc (want $want), stopped after step $last, checkpoint $( [ -e "$ck/COMPLETE" ] && echo complete || echo MISSING), resume $resumed"
  if [ "$rc" -eq "$want" ] && [ "$resumed" = yes ]; then saved=$((saved + 1)); fi
done
echo "saved $saved of $tries"
