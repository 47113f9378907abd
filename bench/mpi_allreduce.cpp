// bench/mpi_allreduce.cpp: OpenMPI's MPI_Allreduce timed the way comm-bench times ours.
//
//   mpirun --allow-run-as-root -np N --mca btl self,vader bench_mpi_allreduce MIN MAX ITERS WARMUP
// prints one line per size: bytes, count, time_us (slowest rank), algbw and busbw (GB/s,
// busbw = algbw x 2(N-1)/N as nccl-tests), #wrong against the closed-form sum.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

static float input_value(int rank, size_t i) { return float(int((i * 7 + rank * 13) % 23) - 11); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t min_b = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8;
  size_t max_b = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (64u << 20);
  int iters = argc > 3 ? std::atoi(argv[3]) : 20, warmup = argc > 4 ? std::atoi(argv[4]) : 5;
  if (rank == 0) std::printf("# MPI_Allreduce (OpenMPI), %d ranks, float sum\n#%12s %12s %11s %9s %9s %7s\n", n, "size", "count", "time(us)", "algbw", "busbw", "#wrong");
  for (size_t bytes = min_b; bytes <= max_b; bytes *= 2) {
    size_t count = bytes / 4;
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = input_value(rank, i);
    for (int k = 0; k < warmup; ++k) MPI_Allreduce(in.data(), out.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < iters; ++k) MPI_Allreduce(in.data(), out.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, tmax = 0;
    MPI_Reduce(&us, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long wrong = 0, wrong_all = 0;
    for (size_t i = 0; i < count; ++i) {
      float s = 0;
      for (int q = 0; q < n; ++q) s += input_value(q, i);
      wrong += out[i] != s;
    }
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    double algbw = bytes / (tmax * 1e-6) / 1e9;
    if (rank == 0) std::printf(" %12zu %12zu %11.2f %9.3f %9.3f %7ld\n", bytes, count, tmax, algbw, algbw * 2.0 * (n - 1) / n, wrong_all);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
