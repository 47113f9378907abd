// kernels/cuda/norm.cu: sum of squares for the global gradient norm (twin of
// kernels/cpu/global_norm.cpp). Deterministic by construction: the range is cut into
// fixed chunks of kSumChunk elements, one block per chunk; thread j adds elements j,
// j + blockDim, ... of its chunk in fp64, and the block's threads are added in a fixed
// tree. The caller adds the chunks' partials in chunk order. Nothing depends on the number
// of SMs or on launch timing, so the same (x, n) gives the same bits on every run; the
// order differs from the CPU's, so the two agree to rounding, not bitwise.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr int kSumThreads = 256;

// x (n) -> partials (ceil(n / kSumChunk)) fp64
template <typename S>
__global__ void sum_squares_kernel(double* partials, const S* x, size_t n) {
  __shared__ double shared[kSumThreads];
  const size_t lo = size_t(blockIdx.x) * kSumChunk;
  const size_t hi = lo + kSumChunk < n ? lo + kSumChunk : n;
  double acc = 0.0;
  for (size_t i = lo + threadIdx.x; i < hi; i += kSumThreads) {
    const double d = load(x[i]);
    acc += d * d;
  }
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

}  // namespace

template <typename S>
void sum_squares_partials(double* partials, const S* x, size_t n, cudaStream_t s) {
  const size_t chunks = sum_squares_chunks(n);
  if (chunks == 0) return;
  RZ_CHECK(chunks <= 0x7fffffffu, "sum_squares: %zu elements is too many", n);
  sum_squares_kernel<S><<<unsigned(chunks), kSumThreads, 0, s>>>(partials, x, n);
  CUDA_CHECK_LAUNCH("sum_squares_kernel", s);
}

template void sum_squares_partials<float>(double*, const float*, size_t, cudaStream_t);
template void sum_squares_partials<bf16_t>(double*, const bf16_t*, size_t, cudaStream_t);

}  // namespace rz::cuda
