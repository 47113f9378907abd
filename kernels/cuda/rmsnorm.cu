// kernels/cuda/rmsnorm.cu: RMSNorm on the GPU (twin of kernels/cpu/rmsnorm.cpp).
//
// Forward and dinp: one warp per row (N rows, C channels), the row's sum of squares a
// warp reduction (warp_sum: a fixed butterfly, so deterministic). dweight sums over all N
// rows without atomics in layernorm.cu's two stages: stage 1 here gives each chunk of
// kColumnChunkRows rows one partial per channel (a thread per channel, rows in order),
// stage 2 (column_finish) adds the chunks' partials in chunk order. Everything in fp32,
// rounded once on store.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// out (N,C) = inp * rstd * weight; rstd (N) = 1 / sqrt(mean(inp^2) + eps).
template <typename E>
__global__ void rmsnorm_forward_kernel(E* out, float* rstd, const E* inp, const E* weight, int N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const E* x = inp + size_t(row) * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = load(x[c]);
    ss += v * v;
  }
  const float s = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  E* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = store<E>(load(x[c]) * s * load(weight[c]));
  if (lane == 0) rstd[row] = s;
}

// dinp (N,C) += rstd * (dnorm - norm * mean(dnorm * norm)), norm = inp * rstd, dnorm = weight * dout.
template <typename E>
__global__ void rmsnorm_backward_dinp_kernel(E* dinp, const E* dout, const E* inp, const E* weight,
                                             const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const E* x = inp + size_t(row) * C;
  const E* d = dout + size_t(row) * C;
  E* dx = dinp + size_t(row) * C;
  const float s = rstd[row];
  float dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) dnorm_norm_mean += load(weight[c]) * load(d[c]) * (load(x[c]) * s);
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = load(x[c]) * s;
    const float dnorm = load(weight[c]) * load(d[c]);
    dx[c] = store<E>(load(dx[c]) + (dnorm - norm * dnorm_norm_mean) * s);
  }
}

// Stage 1. grid (ceil(C/blockDim), nchunks): partial[chunk*C + c] = sum over the chunk's
// rows of norm * dout.
template <typename E>
__global__ void rmsnorm_weight_partials_kernel(float* partial, const E* dout, const E* inp, const float* rstd, int N,
                                               int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * kColumnChunkRows, r1 = min(N, r0 + kColumnChunkRows);
  float dw = 0.0f;
  for (int r = r0; r < r1; ++r) dw += load(inp[size_t(r) * C + c]) * rstd[r] * load(dout[size_t(r) * C + c]);
  partial[size_t(blockIdx.y) * C + c] = dw;
}

unsigned row_blocks(int N) { return unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

template <typename E>
void rmsnorm_forward(E* out, float* rstd, const E* inp, const E* weight, int N, int C, float eps, cudaStream_t s) {
  if (N == 0) return;
  rmsnorm_forward_kernel<E><<<row_blocks(N), kWarpsPerBlock * 32, 0, s>>>(out, rstd, inp, weight, N, C, eps);
  CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel", s);
}

template <typename E>
void rmsnorm_backward(E* dinp, E* dweight, const E* dout, const E* inp, const E* weight, const float* rstd, int N,
                      int C, float* partials, cudaStream_t s) {
  if (N == 0 || C == 0) return;
  rmsnorm_backward_dinp_kernel<E><<<row_blocks(N), kWarpsPerBlock * 32, 0, s>>>(dinp, dout, inp, weight, rstd, N, C);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_dinp_kernel", s);
  const int nchunks = column_chunks(N);
  const dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(nchunks));
  rmsnorm_weight_partials_kernel<E><<<grid, kThreads, 0, s>>>(partials, dout, inp, rstd, N, C);
  CUDA_CHECK_LAUNCH("rmsnorm_weight_partials_kernel", s);
  column_finish(dweight, partials, nchunks, C, s);
}

#define RZ_INSTANTIATE(E)                                                                                  \
  template void rmsnorm_forward<E>(E*, float*, const E*, const E*, int, int, float, cudaStream_t);         \
  template void rmsnorm_backward<E>(E*, E*, const E*, const E*, const E*, const float*, int, int, float*, \
                                    cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
