// kernels/cuda/attention.cu: causal multi-head self-attention, the materialised reference
// path (twin of kernels/cpu/attention.cpp): for each batch row b, the NH heads' score
// matrices come from one strided-batched cuBLASLt product into fp32 scratch (NH, T, T), a
// causal softmax kernel turns them into att (B, NH, T, T, saved for backward, zero above
// the diagonal as on the CPU), and a second batched product forms out = att @ v. The
// backward is four batched products around a softmax-backward kernel.
//
// Layout: qkv[b,t,:] holds q, k, v (C each); head h's slice of q is columns h*hs ..
// (h+1)*hs, so a head's q is a row-major (T, hs) matrix with row stride 3C, and the
// heads are a batch with stride hs. Seen column-major (cuBLAS), that same memory is
// q^T (hs, T) with leading dimension 3C. Every call below states its row-major product
// and the column-major one that computes it. The full T x T products (upper triangle
// included) cost twice the causal work; the softmax zeroes what the mask removes.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr int kRowThreads = 256;

template <typename E>
constexpr cudaDataType_t data_type() {
  return std::is_same_v<E, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// grid (T, NH): att[h,t,t2] = softmax_{t2 <= t}(scores[h,t,:]) and 0 for t2 > t.
// att, scores: (NH, T, T) of one batch row; scores already carry 1/sqrt(hs).
template <typename E>
__global__ void causal_softmax_kernel(E* att, const float* scores, int T) {
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const size_t row = (size_t(blockIdx.y) * T + t) * T;
  const float* s = scores + row;
  E* a = att + row;
  float maxv = -INFINITY;
  for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) maxv = fmaxf(maxv, s[t2]);
  maxv = block_max(maxv, scratch);
  float sum = 0.0f;
  for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) sum += expf(s[t2] - maxv);
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int t2 = threadIdx.x; t2 < T; t2 += blockDim.x) a[t2] = store<E>(t2 <= t ? expf(s[t2] - maxv) * inv : 0.0f);
}

// grid (T, NH): dpre[h,t,t2] = att (datt - sum_j att datt) * scale for t2 <= t, else 0.
template <typename E>
__global__ void causal_softmax_backward_kernel(E* dpre, const E* att, const float* datt, int T, float scale) {
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const size_t row = (size_t(blockIdx.y) * T + t) * T;
  const E* a = att + row;
  const float* d = datt + row;
  float dot = 0.0f;
  for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) dot += load(a[t2]) * d[t2];
  dot = block_sum(dot, scratch);
  E* o = dpre + row;
  for (int t2 = threadIdx.x; t2 < T; t2 += blockDim.x)
    o[t2] = store<E>(t2 <= t ? load(a[t2]) * (d[t2] - dot) * scale : 0.0f);
}

}  // namespace

template <typename E>
void attention_forward(const BlasLt& lt, E* out, E* att, const E* qkv, int B, int T, int C, int NH, float* scores,
                       cudaStream_t s) {
  if (B == 0 || T == 0) return;
  const int hs = C / NH;
  const long long C3 = 3LL * C, TT = (long long)T * T;
  const float scale = 1.0f / sqrtf(float(hs));
  for (int b = 0; b < B; ++b) {
    const E* q = qkv + size_t(b) * T * C3;
    const E* k = q + C;
    const E* v = q + 2 * C;
    E* att_b = att + size_t(b) * NH * TT;
    // Row-major scores (T, T) = scale * q (T, hs) @ k^T. Column-major: scores^T (T, T) =
    // k (T, hs) * q^T (hs, T): A = k seen as (hs, T) ld 3C, transposed; B = q seen as
    // (hs, T) ld 3C, as is; D (m=T, n=T) ld T. Batch: heads, stride hs (q, k), T*T (D).
    gemm(lt, s, "attention_forward (scores)", true, false, T, T, hs, k, C3, hs, q, C3, hs, data_type<E>(), scores, T,
         TT, CUDA_R_32F, NH, scale, 0.0f);
    causal_softmax_kernel<E><<<dim3(unsigned(T), unsigned(NH)), kRowThreads, 0, s>>>(att_b, scores, T);
    CUDA_CHECK_LAUNCH("causal_softmax_kernel", s);
    // Row-major out (T, hs; row stride C) = att (T, T) @ v (T, hs). Column-major: out^T
    // (hs, T) = v^T (hs, T) * att^T (T, T): A = v seen as (hs, T) ld 3C, as is; B = att
    // seen as (T, T) ld T (that is att^T), as is; D (m=hs, n=T) ld C, head stride hs.
    gemm(lt, s, "attention_forward (att @ v)", false, false, hs, T, T, v, C3, hs, att_b, T, TT, data_type<E>(),
         out + size_t(b) * T * C, C, hs, data_type<E>(), NH, 1.0f, 0.0f);
  }
}

template <typename E>
void attention_backward(const BlasLt& lt, E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C,
                        int NH, float* datt, E* dpre, cudaStream_t s) {
  if (B == 0 || T == 0) return;
  const int hs = C / NH;
  const long long C3 = 3LL * C, TT = (long long)T * T;
  const float scale = 1.0f / sqrtf(float(hs));
  for (int b = 0; b < B; ++b) {
    const E* q = qkv + size_t(b) * T * C3;
    const E* k = q + C;
    const E* v = q + 2 * C;
    const E* g = dout + size_t(b) * T * C;
    const E* att_b = att + size_t(b) * NH * TT;
    E* dq = dqkv + size_t(b) * T * C3;
    E* dk = dq + C;
    E* dv = dq + 2 * C;
    // Row-major datt (T, T) = dout (T, hs) @ v^T. Column-major: datt^T = v (T, hs) *
    // dout^T (hs, T): A = v seen as (hs, T) ld 3C, transposed; B = dout seen as (hs, T)
    // ld C, as is; D (m=T, n=T) ld T, fp32.
    gemm(lt, s, "attention_backward (datt)", true, false, T, T, hs, v, C3, hs, g, C, hs, data_type<E>(), datt, T, TT,
         CUDA_R_32F, NH, 1.0f, 0.0f);
    // Row-major dv (T, hs) += att^T (T, T) @ dout (T, hs). Column-major: dv^T (hs, T) +=
    // dout^T (hs, T) * att (T, T): A = dout seen as (hs, T) ld C, as is; B = att seen as
    // (T, T) ld T (att^T), transposed back to att; D (m=hs, n=T) ld 3C.
    gemm(lt, s, "attention_backward (dv)", false, true, hs, T, T, g, C, hs, att_b, T, TT, data_type<E>(), dv, C3, hs,
         data_type<E>(), NH, 1.0f, 1.0f);
    causal_softmax_backward_kernel<E><<<dim3(unsigned(T), unsigned(NH)), kRowThreads, 0, s>>>(dpre, att_b, datt, T,
                                                                                               scale);
    CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel", s);
    // Row-major dq (T, hs) += dpre (T, T) @ k (T, hs). Column-major: dq^T (hs, T) +=
    // k^T (hs, T) * dpre^T (T, T): A = k seen as (hs, T) ld 3C, as is; B = dpre seen as
    // (T, T) ld T (dpre^T), as is; D (m=hs, n=T) ld 3C.
    gemm(lt, s, "attention_backward (dq)", false, false, hs, T, T, k, C3, hs, dpre, T, TT, data_type<E>(), dq, C3, hs,
         data_type<E>(), NH, 1.0f, 1.0f);
    // Row-major dk (T, hs) += dpre^T (T, T) @ q (T, hs). Column-major: dk^T (hs, T) +=
    // q^T (hs, T) * dpre (T, T): A = q seen as (hs, T) ld 3C, as is; B = dpre seen as
    // (T, T) ld T, transposed; D (m=hs, n=T) ld 3C.
    gemm(lt, s, "attention_backward (dk)", false, true, hs, T, T, q, C3, hs, dpre, T, TT, data_type<E>(), dk, C3, hs,
         data_type<E>(), NH, 1.0f, 1.0f);
  }
}

#define RZ_INSTANTIATE(E)                                                                                        \
  template void attention_forward<E>(const BlasLt&, E*, E*, const E*, int, int, int, int, float*, cudaStream_t); \
  template void attention_backward<E>(const BlasLt&, E*, const E*, const E*, const E*, int, int, int, int, float*, \
                                      E*, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
