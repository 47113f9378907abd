#!/usr/bin/env bash
# Where the extra CPU of a 2-rank step goes (issue 29, part 2): per round, the 1-rank step
# alone, two independent 1-rank steps at once (what two processes on the machine's cores cost
# each other: shared cache, memory bandwidth, clock), and the 2-rank zero2 step (bench-
# strategies), each as the step's process CPU ms (median of STEPS). The configs/tiny.toml model
# at B16 T64, 1 thread per rank. If the 2-rank step costs each rank about what the two
# independent steps cost, the communication path adds nothing measurable.
#   bash bench/two_rank_cpu.sh [BUILD_DIR]     ROUNDS (default 8), STEPS (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
rz=${1:-build}/ringzero
rounds=${ROUNDS:-8}
steps=${STEPS:-20}
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step() {  # OUT: one 1-rank bench-step; its step CPU ms into OUT
  "$rz" bench-step --layers 4 --channels 128 --heads 4 --vocab 257 --max-seq 128 --batch 16 --seq 64 --threads 1 \
    --precision fp32 --steps "$steps" --untimed-steps 2 2>&1 | grep '| fp32' | awk -F'|' '{gsub(/ /, "", $6); print $6}' >"$1"
}
echo "# two_rank_cpu: $rounds rounds; $(nproc --all) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# round  alone  independent_a  independent_b  zero2_rank0  zero2_rank1   (step CPU ms)"
for i in $(seq 1 "$rounds"); do
  step "$tmp/alone"
  step "$tmp/a" & step "$tmp/b"; wait
  z=$("$rz" bench-strategies --config configs/tiny.toml --vocab 257 --nproc 2 --strategy zero2 --seq 64 --batch 16 \
        --steps "$steps" --untimed-steps 2 2>&1 | grep -o 'ranks [0-9. ]*' | awk '{print $2, $3}')
  echo "$i $(cat "$tmp/alone") $(cat "$tmp/a") $(cat "$tmp/b") $z"
done | tee "$tmp/raw"
python3 - "$tmp/raw" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1])]
alone = statistics.median(r[0] for r in rows)
indep = statistics.median(x for r in rows for x in r[1:3])
z2 = statistics.median(x for r in rows for x in r[3:5])
print(f"# medians: alone {alone:.1f}  two independent {indep:.1f} ({indep / alone:.2f}x alone)  "
      f"zero2 N=2 {z2:.1f} ({z2 / alone:.2f}x alone, {z2 / indep:.2f}x two independent)")
PY
