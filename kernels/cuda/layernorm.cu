// kernels/cuda/layernorm.cu: layer normalisation on the GPU (twin of
// kernels/cpu/layernorm.cpp).
//
// Forward and dinp: one warp per row (N rows, C channels), two-pass mean and variance as
// on the CPU. dweight and dbias sum over all N rows without atomics, in two deterministic
// stages: stage 1 gives each chunk of kRowsPerChunk rows one partial per channel (a thread
// per channel, rows in order); stage 2 adds the chunks' partials in chunk order and
// accumulates into dweight/dbias. The chunking depends on N alone, so the bits do not
// depend on launch timing. matmul.cu's bias gradient uses the same two stages.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr int kRowsPerChunk = kColumnChunkRows;
constexpr int kWarpsPerBlock = 8;

// out (N,C); mean, rstd (N); inp (N,C); weight, bias (C)
template <typename E>
__global__ void layernorm_forward_kernel(E* out, float* mean, float* rstd, const E* inp, const E* weight,
                                         const E* bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const E* x = inp + size_t(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += load(x[c]);
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = load(x[c]) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
  E* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = store<E>((load(x[c]) - m) * s * load(weight[c]) + load(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp (N,C) accumulated: rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)).
template <typename E>
__global__ void layernorm_backward_dinp_kernel(E* dinp, const E* dout, const E* inp, const E* weight,
                                               const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const E* x = inp + size_t(row) * C;
  const E* d = dout + size_t(row) * C;
  E* dx = dinp + size_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float norm = (load(x[c]) - m) * s;
    const float dnorm = load(weight[c]) * load(d[c]);
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (load(x[c]) - m) * s;
    const float dnorm = load(weight[c]) * load(d[c]);
    dx[c] = store<E>(load(dx[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
  }
}

// Stage 1. grid (ceil(C/blockDim), nchunks): partial_w[chunk*C + c] = sum over the chunk's
// rows of norm * dout; partial_b likewise of dout.
template <typename E>
__global__ void layernorm_param_partials_kernel(float* partial_w, float* partial_b, const E* dout, const E* inp,
                                                const float* mean, const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * kRowsPerChunk, r1 = min(N, r0 + kRowsPerChunk);
  float dw = 0.0f, db = 0.0f;
  for (int r = r0; r < r1; ++r) {
    const float d = load(dout[size_t(r) * C + c]);
    dw += (load(inp[size_t(r) * C + c]) - mean[r]) * rstd[r] * d;
    db += d;
  }
  partial_w[size_t(blockIdx.y) * C + c] = dw;
  partial_b[size_t(blockIdx.y) * C + c] = db;
}

// Stage 1 of the bias gradient: partial[chunk*C + c] = sum over the chunk's rows of x.
template <typename E>
__global__ void column_partials_kernel(float* partial, const E* x, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * kRowsPerChunk, r1 = min(N, r0 + kRowsPerChunk);
  float acc = 0.0f;
  for (int r = r0; r < r1; ++r) acc += load(x[size_t(r) * C + c]);
  partial[size_t(blockIdx.y) * C + c] = acc;
}

// Stage 2: out[c] += sum_chunk partial[chunk*C + c], chunks in order.
template <typename E>
__global__ void column_finish_kernel(E* out, const float* partial, int nchunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  for (int k = 0; k < nchunks; ++k) acc += partial[size_t(k) * C + c];
  out[c] = store<E>(load(out[c]) + acc);
}

}  // namespace

int column_chunks(int N) {
  const int chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  RZ_CHECK(chunks <= 65535, "column sums over N=%d rows: more than 65535 chunks of %d rows", N, kRowsPerChunk);
  return chunks;
}

template <typename E>
void column_finish(E* out, const float* partial, int nchunks, int C, cudaStream_t s) {
  if (C == 0) return;
  column_finish_kernel<E><<<unsigned((C + kThreads - 1) / kThreads), kThreads, 0, s>>>(out, partial, nchunks, C);
  CUDA_CHECK_LAUNCH("column_finish_kernel", s);
}

size_t column_partials_floats(int N, int C) { return size_t(column_chunks(N)) * size_t(C); }

template <typename E>
void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* weight, const E* bias, int N,
                       int C, cudaStream_t s) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  layernorm_forward_kernel<E><<<blocks, kWarpsPerBlock * 32, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
  CUDA_CHECK_LAUNCH("layernorm_forward_kernel", s);
}

template <typename E>
void layernorm_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                        const float* mean, const float* rstd, int N, int C, float* partials, cudaStream_t s) {
  if (N == 0 || C == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  layernorm_backward_dinp_kernel<E><<<blocks, kWarpsPerBlock * 32, 0, s>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH("layernorm_backward_dinp_kernel", s);
  const int nchunks = column_chunks(N);
  float* partial_w = partials;
  float* partial_b = partials + column_partials_floats(N, C);
  dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(nchunks));
  layernorm_param_partials_kernel<E><<<grid, kThreads, 0, s>>>(partial_w, partial_b, dout, inp, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH("layernorm_param_partials_kernel", s);
  const unsigned cblocks = unsigned((C + kThreads - 1) / kThreads);
  column_finish_kernel<E><<<cblocks, kThreads, 0, s>>>(dweight, partial_w, nchunks, C);
  CUDA_CHECK_LAUNCH("column_finish_kernel(dweight)", s);
  column_finish_kernel<E><<<cblocks, kThreads, 0, s>>>(dbias, partial_b, nchunks, C);
  CUDA_CHECK_LAUNCH("column_finish_kernel(dbias)", s);
}

template <typename E>
void bias_backward(E* dbias, const E* dout, int N, int OC, float* partials, cudaStream_t s) {
  if (N == 0 || OC == 0) return;
  const int nchunks = column_chunks(N);
  dim3 grid(unsigned((OC + kThreads - 1) / kThreads), unsigned(nchunks));
  column_partials_kernel<E><<<grid, kThreads, 0, s>>>(partials, dout, N, OC);
  CUDA_CHECK_LAUNCH("column_partials_kernel(dbias)", s);
  column_finish_kernel<E><<<unsigned((OC + kThreads - 1) / kThreads), kThreads, 0, s>>>(dbias, partials, nchunks, OC);
  CUDA_CHECK_LAUNCH("column_finish_kernel(dbias)", s);
}

#define RZ_INSTANTIATE(E)                                                                                  \
  template void layernorm_forward<E>(E*, float*, float*, const E*, const E*, const E*, int, int, cudaStream_t); \
  template void layernorm_backward<E>(E*, E*, E*, const E*, const E*, const E*, const float*, const float*,  \
                                      int, int, float*, cudaStream_t);                                      \
  template void bias_backward<E>(E*, const E*, int, int, float*, cudaStream_t);                              \
  template void column_finish<E>(E*, const float*, int, int, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
