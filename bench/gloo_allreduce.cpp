// bench/gloo_allreduce.cpp: Gloo's ring allreduce over TCP, timed like comm-bench.
//
//   for r in 0..N-1: bench_gloo_allreduce RANK N STORE_DIR MIN MAX ITERS WARMUP &
// (STORE_DIR: an empty directory for Gloo's FileStore rendezvous). Rank 0 prints one line
// per size: bytes, count, time_us (rank 0), algbw, busbw = algbw x 2(N-1)/N, #wrong.
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static float input_value(int rank, size_t i) { return float(int((i * 7 + rank * 13) % 23) - 11); }

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s RANK N STORE_DIR MIN_BYTES MAX_BYTES ITERS WARMUP\n", argv[0]);
    return 2;
  }
  int rank = std::atoi(argv[1]), n = std::atoi(argv[2]);
  size_t min_b = std::strtoull(argv[4], nullptr, 10), max_b = std::strtoull(argv[5], nullptr, 10);
  int iters = std::atoi(argv[6]), warmup = std::atoi(argv[7]);
  auto dev = gloo::transport::tcp::CreateDevice("127.0.0.1");
  gloo::rendezvous::FileStore store(argv[3]);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->connectFullMesh(store, dev);
  if (rank == 0) std::printf("# gloo::AllreduceRing (TCP), %d ranks, float sum\n#%12s %12s %11s %9s %9s %7s\n", n, "size", "count", "time(us)", "algbw", "busbw", "#wrong");
  for (size_t bytes = min_b; bytes <= max_b; bytes *= 2) {
    size_t count = bytes / 4;
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = input_value(rank, i);
    gloo::AllreduceRing<float> ar(ctx, {data.data()}, int(count));
    for (int k = 0; k < warmup; ++k) ar.run();
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < iters; ++k) ar.run();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    for (size_t i = 0; i < count; ++i) data[i] = input_value(rank, i);
    ar.run();
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float s = 0;
      for (int q = 0; q < n; ++q) s += input_value(q, i);
      wrong += data[i] != s;
    }
    double algbw = bytes / (us * 1e-6) / 1e9;
    if (rank == 0) std::printf(" %12zu %12zu %11.2f %9.3f %9.3f %7ld\n", bytes, count, us, algbw, algbw * 2.0 * (n - 1) / n, wrong);
    std::fflush(stdout);
  }
  return 0;
}
