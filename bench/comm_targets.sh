#!/usr/bin/env bash
# The issue-14 targets, side by side: ringzero's shm ring vs OpenMPI (vader) for
# all_reduce / reduce_scatter / all_gather at 64 KiB .. 16 MiB and the 8-byte all_reduce
# latency, N = 2 and 4; ringzero's tcp ring vs Gloo's ring allreduce at 1 .. 64 MiB.
# Each repetition runs ringzero and the peer right after each other (alternating), REPS
# times; bench/comm_targets.py prints the medians and ratios.
# Usage: bash bench/comm_targets.sh BUILD_DIR > raw.txt; python3 bench/comm_targets.py raw.txt
#   SLOTS_TOO=1 adds the shm ring with direct reads off (RINGZERO_SHM_CMA=0) for all_gather and all_reduce,
#   and for all_gather the ring on private host memory (--host-memory private: chunks read with CMA, not memcpy).
#   BEFORE=/path/to/older/ringzero adds that binary's shm collectives as "ringzero-before" (a before/after pair).
#   OPS="all_gather" limits the shm collectives; SKIP_LATENCY=1 and SKIP_TCP=1 skip those parts.
#   BUILD_DIR configured with -DRINGZERO_BENCH=ON (needs openmpi-bin libopenmpi-dev libgloo-dev).
set -uo pipefail
B=${1:?usage: bench/comm_targets.sh BUILD_DIR}
REPS=${REPS:-3}
ITERS=${ITERS:-10}
NS=${NS:-"2 4"}
OPS=${OPS:-"all_reduce reduce_scatter all_gather"}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"
rz() { "$B/ringzero" comm-bench "$@" | grep -v '^#' | awk '{print $1, $5}'; }
rz_before() { "$BEFORE" comm-bench "$@" | grep -v '^#' | awk '{print $1, $5}'; }
mpi() { $MPIRUN "$@" 2>/dev/null | grep -v '^#' | awk '{print $1, $3}'; }
for rep in $(seq 1 "$REPS"); do
  for N in $NS; do
    for OP in $OPS; do
      rz --op $OP --nproc $N --transport shm --min-bytes 64K --max-bytes 16M --iters $ITERS --warmup 3 | sed "s/^/ringzero shm $OP $N /"
      # SLOTS_TOO=1: also the shm ring with direct reads (CMA) off, as "ringzero-slots".
      if [ -n "${SLOTS_TOO:-}" ] && [ "$OP" != reduce_scatter ]; then
        RINGZERO_SHM_CMA=0 rz --op $OP --nproc $N --transport shm --min-bytes 64K --max-bytes 16M --iters $ITERS --warmup 3 | sed "s/^/ringzero-slots shm $OP $N /"
      fi
      if [ -n "${BEFORE:-}" ]; then
        rz_before --op $OP --nproc $N --transport shm --min-bytes 64K --max-bytes 16M --iters $ITERS --warmup 3 | sed "s/^/ringzero-before shm $OP $N /"
      fi
      if [ -n "${SLOTS_TOO:-}" ] && [ "$OP" = all_gather ]; then
        rz --op $OP --nproc $N --transport shm --host-memory private --min-bytes 64K --max-bytes 16M --iters $ITERS --warmup 3 | sed "s/^/ringzero-cma shm $OP $N /"
      fi
      mpi -np $N "$B/bench/bench_mpi_allreduce" 65536 16777216 $ITERS 3 $OP | sed "s/^/openmpi shm $OP $N /"
    done
    if [ -z "${SKIP_LATENCY:-}" ]; then
      rz --op all_reduce --nproc $N --transport shm --min-bytes 8 --max-bytes 8 --iters 2000 --warmup 200 | sed "s/^/ringzero shm latency $N /"
      mpi -np $N "$B/bench/bench_mpi_allreduce" 8 8 2000 200 | sed "s/^/openmpi shm latency $N /"
    fi
    if [ -z "${SKIP_TCP:-}" ]; then
      rz --op all_reduce --nproc $N --transport tcp --min-bytes 1M --max-bytes 64M --iters 5 --warmup 2 | sed "s/^/ringzero tcp all_reduce $N /"
      D=$(mktemp -d)
      for r in $(seq 0 $((N-1))); do
        timeout 600 "$B/bench/bench_gloo_allreduce" "$r" "$N" "$D" 1048576 67108864 5 2 | grep -v '^#' | awk '{print $1, $3}' | sed "s/^/gloo tcp all_reduce $N /" &
      done
      wait
      rm -rf "$D"
    fi
  done
done
