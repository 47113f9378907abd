#!/usr/bin/env bash
# N = 2 8-byte AllReduce runs, each rank's core sampled (sched_getcpu) at start-up (s), after
# connect (c), before the warm-up (w), before the timed loop (10x) and every 100 timed calls;
# each run followed by one vader run, as bench/small_allreduce.sh alternates them.
#   BIN: a ringzero built with core-spread-2026-12-04-trace.patch applied (RZ_CPU_TRACE=1 prints the samples)
#   MPI_BENCH: bench_mpi_allreduce (mpicxx -O2 bench/mpi_allreduce.cpp)
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"
for i in $(seq 1 "${REPS:-40}"); do
  out=$(RZ_CPU_TRACE=1 "$BIN" comm-bench --op all_reduce --nproc 2 --transport shm --min-bytes 8 --max-bytes 8 --iters 2000 --warmup 200 2>&1)
  us=$(echo "$out" | grep -v '^#' | grep -v 'cpu r' | awk 'NF>4{print $5}')
  c0=$(echo "$out" | grep 'cpu r0' | sed 's/.*cpu r0: //')
  c1=$(echo "$out" | grep 'cpu r1' | sed 's/.*cpu r1: //')
  echo "$i $us r0=$c0 r1=$c1"
  $MPIRUN -np 2 "$MPI_BENCH" 8 8 2000 200 >/dev/null 2>&1
done
