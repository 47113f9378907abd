#!/usr/bin/env bash
# Usage: bash bench/flight_recorder_ab.sh   (a build with -DRINGZERO_BENCH=ON: build/bench/bench_flight_recorder_cost)
# The flight recorder's cost, alternating on (default 2048 entries) and off (--flight-entries 0),
# ABBA order so neither always runs first.
set -u
cd "$(dirname "$0")/.."
B=build
echo "### uptime: $(uptime)"
echo "### build/bench/bench_flight_recorder_cost 2000000 9"
$B/bench/bench_flight_recorder_cost 2000000 9
for pair in $(seq 1 12); do
  if [ $((pair % 2)) = 1 ]; then order="2048 0"; else order="0 2048"; fi
  for K in $order; do
    t=$($B/ringzero comm-bench --op all_reduce --nproc 2 --transport shm --min-bytes 8 --max-bytes 8 --iters 20000 --warmup 2000 --flight-entries $K 2>&1 | grep -v "^#" | awk '{print $5}')
    echo "comm-bench-8B-shm-N2 pair $pair K=$K time_us $t"
  done
done
for pair in 1 2 3 4 5 6; do
  if [ $((pair % 2)) = 1 ]; then order="2048 0"; else order="0 2048"; fi
  for K in $order; do
    $B/ringzero train configs/tiny.toml --nproc-per-node 2 --steps 60 --eval-every 0 --sample-every 0 --flight-entries $K --metrics ${TMPDIR:-/tmp}/rz-ab-$K-$pair.jsonl > /dev/null 2>&1
    python3 -c "
import json,statistics
r=[json.loads(l)['step_ms'] for l in open('${TMPDIR:-/tmp}/rz-ab-$K-$pair.jsonl')][5:]
q=statistics.quantiles(r,n=4)
print('train-tiny-N2 pair $pair K=$K median_step_ms %.2f p25 %.2f p75 %.2f steps %d' % (statistics.median(r), q[0], q[2], len(r)))"
  done
done
echo "### uptime: $(uptime)"
