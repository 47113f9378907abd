#!/usr/bin/env bash
# Two ringzero binaries' shm collectives side by side (a before/after pair for a change in
# comm/): for each repetition, op, N and host memory, runs A then B (then B then A on the
# next repetition, so neither always goes first) and prints each size's median time per
# call over the repetitions and the ratio B / A (below 1: B faster).
#   bash bench/collectives_ab.sh A_BINARY B_BINARY > raw.txt
#   REPS (default 5), ITERS (default 10), NS (default "2 4"), OPS (default "all_gather
#   reduce_scatter all_reduce"), MEMS (default "auto private": comm-bench --host-memory),
#   MIN/MAX (default 64K / 64M).
set -uo pipefail
A=${1:?usage: bench/collectives_ab.sh A_BINARY B_BINARY}
B=${2:?usage: bench/collectives_ab.sh A_BINARY B_BINARY}
REPS=${REPS:-5}
ITERS=${ITERS:-10}
NS=${NS:-"2 4"}
OPS=${OPS:-"all_gather reduce_scatter all_reduce"}
MEMS=${MEMS:-"auto private"}
MIN=${MIN:-64K}
MAX=${MAX:-64M}
echo "# collectives_ab: A=$A B=$B; $REPS alternating repetitions of $ITERS calls per size; $(nproc) cores;" \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
run() {  # WHO BINARY OP N MEM
  "$2" comm-bench --op "$3" --nproc "$4" --transport shm --host-memory "$5" --min-bytes "$MIN" --max-bytes "$MAX" \
    --iters "$ITERS" --warmup 3 | grep -v '^#' | awk -v who="$1" -v op="$3" -v n="$4" -v mem="$5" \
    '{print who, op, n, mem, $1, $5, $NF}'
}
for rep in $(seq 1 "$REPS"); do
  for OP in $OPS; do
    for N in $NS; do
      for MEM in $MEMS; do
        # reduce_scatter and all_reduce do not read in place: one memory kind is enough.
        [ "$OP" != all_gather ] && [ "$MEM" != "${MEMS%% *}" ] && continue
        if [ $((rep % 2)) = 1 ]; then run A "$A" "$OP" "$N" "$MEM"; run B "$B" "$OP" "$N" "$MEM"
        else run B "$B" "$OP" "$N" "$MEM"; run A "$A" "$OP" "$N" "$MEM"; fi
      done
    done
  done
done | tee "$raw"
python3 - "$raw" <<'PY'
import statistics, sys
t, wrong = {}, 0
for line in open(sys.argv[1]):
    who, op, n, mem, size, us, bad = line.split()
    t.setdefault((op, int(n), mem, int(size)), {}).setdefault(who, []).append(float(us))
    wrong += int(bad)
print(f"# {'op':15s} {'N':>2s} {'memory':8s} {'bytes':>10s} {'A us':>10s} {'B us':>10s} {'B/A':>6s}  (medians)")
for (op, n, mem, size), w in sorted(t.items()):
    a, b = statistics.median(w["A"]), statistics.median(w["B"])
    print(f"# {op:15s} {n:2d} {mem:8s} {size:10d} {a:10.1f} {b:10.1f} {b / a:6.2f}")
print(f"# wrong results: {wrong}")
PY
