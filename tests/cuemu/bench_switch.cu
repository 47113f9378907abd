// tests/cuemu/bench_switch.cu: what a barrier costs on the CUDA-on-CPU emulator, per lane
// that arrives (one fiber switch each): warp shuffles in blocks of 32 and 256 threads, and
// __syncthreads in blocks of 256. Built against the emulator like the kernels
// (bench_cuemu_switch); RINGZERO_CUEMU_SWAPCONTEXT=1 measures glibc's swapcontext instead
// of the x86-64 switch. bench/results/cuemu-2026-12-07.md has the numbers.
//
//   bench_cuemu_switch [rounds]     # prints one line per kind: ns per lane-barrier
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

__global__ void shuffles(float* out, int reps) {
  float x = float(threadIdx.x);
  for (int r = 0; r < reps; ++r)
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  out[threadIdx.x] = x;
}

__global__ void block_barriers(float* out, int reps) {
  for (int r = 0; r < reps; ++r) __syncthreads();
  out[threadIdx.x] = 1.0f;
}

// Nanoseconds per lane-barrier of the best of `rounds` launches.
template <typename Launch>
double best_ns(int rounds, double events, Launch launch) {
  double best = 1e30;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    launch();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cudaGetLastError() != cudaSuccess) {
      std::fprintf(stderr, "bench_cuemu_switch: a launch failed\n");
      std::exit(1);
    }
    if (s < best) best = s;
  }
  return best / events * 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const char* kind = std::getenv("RINGZERO_CUEMU_SWAPCONTEXT");
  float* out = nullptr;
  if (cudaMalloc(&out, 1024 * sizeof(float)) != cudaSuccess) return 1;
  const int blocks = 100, reps = 20;
  for (int threads : {32, 256}) {
    const double ns = best_ns(rounds, double(blocks) * threads * reps * 5,
                              [&] { shuffles<<<blocks, threads>>>(out, reps); });
    std::printf("%-10s shuffle, %3d threads: %7.1f ns per lane\n", kind && kind[0] == '1' ? "ucontext" : "x86-64",
                threads, ns);
  }
  const double ns = best_ns(rounds, double(blocks) * 256 * reps * 5,
                            [&] { block_barriers<<<blocks, 256>>>(out, reps * 5); });
  std::printf("%-10s __syncthreads, 256 threads: %7.1f ns per thread\n",
              kind && kind[0] == '1' ? "ucontext" : "x86-64", ns);
  (void)cudaFree(out);
  return 0;
}
