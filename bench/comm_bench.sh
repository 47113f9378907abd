#!/usr/bin/env bash
# Runs comm-bench (shm and tcp) beside OpenMPI's MPI_Allreduce (vader shared memory) and
# Gloo's ring allreduce (TCP) for N = 2 and 4, 8 B to 256 MiB, AllReduce fp32 sum.
# Usage: bash bench/comm_bench.sh BUILD_DIR > out.txt
#   BUILD_DIR configured with -DRINGZERO_BENCH=ON (needs openmpi-bin libopenmpi-dev libgloo-dev).
set -uo pipefail
B=${1:?usage: bench/comm_bench.sh BUILD_DIR}
ITERS=${ITERS:-5}
WARMUP=${WARMUP:-2}
for N in 2 4; do
  for T in shm tcp; do
    echo "### ringzero comm-bench --op all_reduce --nproc $N --transport $T --min-bytes 8 --max-bytes 256M --iters $ITERS --warmup $WARMUP"
    "$B/ringzero" comm-bench --op all_reduce --nproc "$N" --transport "$T" --min-bytes 8 --max-bytes 256M \
      --iters "$ITERS" --warmup "$WARMUP"
  done
  echo "### mpirun -np $N --mca btl self,vader bench_mpi_allreduce 8 268435456 $ITERS $WARMUP"
  mpirun --allow-run-as-root --oversubscribe -np "$N" --mca btl self,vader "$B/bench/bench_mpi_allreduce" \
    8 268435456 "$ITERS" "$WARMUP" 2>&1 | grep -v "^$"
  D=$(mktemp -d)
  echo "### for r in 0..$((N-1)): bench_gloo_allreduce r $N STORE_DIR 8 268435456 $ITERS $WARMUP"
  for r in $(seq 0 $((N-1))); do
    timeout 600 "$B/bench/bench_gloo_allreduce" "$r" "$N" "$D" 8 268435456 "$ITERS" "$WARMUP" &
  done
  wait
  rm -rf "$D"
done
