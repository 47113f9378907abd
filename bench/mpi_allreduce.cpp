// bench/mpi_allreduce.cpp: OpenMPI's blocking collectives timed the way comm-bench times ours.
//
//   mpirun --allow-run-as-root -np N --mca btl self,vader bench_mpi_allreduce MIN MAX ITERS WARMUP [OP]
// OP: all_reduce (default; MPI_Allreduce), reduce_scatter (MPI_Reduce_scatter_block) or
// all_gather (MPI_Allgather); "bytes" is the full tensor, as in comm-bench. Prints one line
// per size: bytes, count, time_us (slowest rank), algbw and busbw (GB/s; busbw = algbw x
// 2(N-1)/N for all_reduce, x (N-1)/N otherwise, as nccl-tests), #wrong against the
// closed-form answer.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
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
  const std::string op = argc > 5 ? argv[5] : "all_reduce";
  if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather") {
    if (rank == 0) std::fprintf(stderr, "OP: expected all_reduce, reduce_scatter or all_gather, found '%s'\n", op.c_str());
    MPI_Finalize();
    return 2;
  }
  const double bus = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
  if (rank == 0) std::printf("# MPI %s (OpenMPI), %d ranks, float sum\n#%12s %12s %11s %9s %9s %7s\n", op.c_str(), n, "size", "count", "time(us)", "algbw", "busbw", "#wrong");
  for (size_t bytes = min_b; bytes <= max_b; bytes *= 2) {
    // reduce_scatter / all_gather: count rounded down to a multiple of n (equal blocks).
    size_t count = bytes / 4;
    if (op != "all_reduce") count = std::max<size_t>(n, count / n * n);
    const size_t block = count / n;
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = op == "all_gather" ? float(i % 241) : input_value(rank, i);
    auto once = [&] {
      if (op == "all_reduce") MPI_Allreduce(in.data(), out.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (op == "reduce_scatter") MPI_Reduce_scatter_block(in.data(), out.data(), int(block), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else MPI_Allgather(in.data() + rank * block, int(block), MPI_FLOAT, out.data(), int(block), MPI_FLOAT, MPI_COMM_WORLD);
    };
    for (int k = 0; k < warmup; ++k) once();
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < iters; ++k) once();
    double us = (MPI_Wtime() - t0) * 1e6 / iters, tmax = 0;
    MPI_Reduce(&us, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long wrong = 0, wrong_all = 0;
    const size_t checked = op == "reduce_scatter" ? block : count;
    for (size_t j = 0; j < checked; ++j) {
      const size_t i = op == "reduce_scatter" ? rank * block + j : j;
      float s = 0;
      for (int q = 0; q < n; ++q) s += input_value(q, i);
      wrong += out[j] != (op == "all_gather" ? float(i % 241) : s);
    }
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    const size_t full = count * 4;
    double algbw = full / (tmax * 1e-6) / 1e9;
    if (rank == 0) std::printf(" %12zu %12zu %11.2f %9.3f %9.3f %7ld\n", full, count, tmax, algbw, algbw * bus, wrong_all);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
