#!/usr/bin/env bash
# The 8-byte AllReduce latency (issue 29, part 2): ringzero's shm ring against OpenMPI's
# vader, and optionally an older ringzero binary, at N = 2 and 4, in alternating order
# (ringzero, [before], OpenMPI) REPS times. Each run times ITERS calls after 200 warm-up
# calls and prints the mean per call; the summary gives each side's median and spread
# (max / min over the runs) and the ratio of medians.
#   bash bench/small_allreduce.sh BUILD_DIR [BEFORE_BINARY] > raw.txt
#   BUILD_DIR configured with -DRINGZERO_BENCH=ON (bench/bench_mpi_allreduce; needs OpenMPI).
#   REPS (default 15), ITERS (default 2000), NS (default "2 4"), BYTES (default 8).
set -uo pipefail
B=${1:?usage: bench/small_allreduce.sh BUILD_DIR [BEFORE_BINARY]}
BEFORE=${2:-}
REPS=${REPS:-15}
ITERS=${ITERS:-2000}
NS=${NS:-"2 4"}
BYTES=${BYTES:-8}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"
rz() {  # BINARY N: the mean us per call
  "$1" comm-bench --op all_reduce --nproc "$2" --transport shm --min-bytes "$BYTES" --max-bytes "$BYTES" \
    --iters "$ITERS" --warmup 200 | grep -v '^#' | awk '{print $5}'
}
mpi() { $MPIRUN -np "$1" "$B/bench/bench_mpi_allreduce" "$BYTES" "$BYTES" "$ITERS" 200 2>/dev/null | grep -v '^#' | awk '{print $3}'; }
echo "# small_allreduce: $BYTES bytes, $ITERS calls per run, $REPS alternating runs; $(nproc) cores;" \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for rep in $(seq 1 "$REPS"); do
  for N in $NS; do
    echo "ringzero $N $(rz "$B/ringzero" "$N")"
    [ -n "$BEFORE" ] && echo "before $N $(rz "$BEFORE" "$N")"
    echo "openmpi $N $(mpi "$N")"
  done
done | tee "$raw"
python3 - "$raw" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, n, us = line.split()
    runs.setdefault((who, int(n)), []).append(float(us))
med = {k: statistics.median(v) for k, v in runs.items()}
for (who, n), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"# {who:9s} N={n}  median {med[(who, n)]:7.2f} us  min {min(v):7.2f}  max {max(v):7.2f}  "
          f"spread {max(v) / min(v):.2f}x  ({len(v)} runs)")
for (who, n) in sorted(runs):
    if who != "ringzero":
        continue
    if ("openmpi", n) in med:
        print(f"# N={n}: ringzero / openmpi = {med[(who, n)] / med[('openmpi', n)]:.2f}x (below 1: ringzero faster)")
    if ("before", n) in med:
        print(f"# N={n}: ringzero / before = {med[(who, n)] / med[('before', n)]:.2f}x")
PY
