// kernels/cuda/attention.cu: causal grouped-query self-attention, the materialised
// reference path (twin of kernels/cpu/attention.cpp): for each batch row b, the NH heads'
// score matrices come from strided-batched cuBLASLt products into fp32 scratch (NH, T, T),
// a causal softmax kernel turns them into att (B, NH, T, T, saved for backward, zero above
// the diagonal as on the CPU), and batched products form out = att @ v. The backward is
// four batched products around a softmax-backward kernel.
//
// Layout: qkv[b,t,:] holds q (C = NH*hs), then k (NKV*hs), then v (NKV*hs); row stride
// ld = C + 2*NKV*hs. Query head h's q is columns h*hs .. (h+1)*hs, a row-major (T, hs)
// matrix with row stride ld; seen column-major (cuBLAS) that same memory is q^T (hs, T)
// with leading dimension ld. Every call below states its row-major product and the
// column-major one that computes it. The full T x T products (upper triangle included)
// cost twice the causal work; the softmax zeroes what the mask removes.
//
// Grouped-query heads as strided batches: query head h = g*G + j (G = NH / NKV, group g,
// j-th in its group) reads kv head g. The kv head of consecutive query heads does not
// advance by one fixed stride (it stays for G heads, then moves by hs), so one batch over
// all NH heads cannot express it. Instead each product is G calls, call j batched over the
// NKV groups: query-side operands (q, dout, out, dq, and head h's (T, T) slab of scores,
// att, datt, dpre) start at head j and step by G heads (G*hs columns, G*T*T elements);
// kv-side operands (k, v, dk, dv) start at kv head 0 and step by hs. Within one call every
// batch entry writes its own kv head, so dk and dv never race; the G calls that add into
// them run in j order on the stream, so their sums have one fixed order. With NKV = NH
// (G = 1) this is the single call over all heads of multi-head attention, bit for bit.
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
void attention_forward(const BlasLt& lt, E* out, E* att, const E* qkv, int B, int T, int C, int NH, int NKV,
                       float* scores, cudaStream_t s) {
  if (B == 0 || T == 0) return;
  const int hs = C / NH, G = NH / NKV;
  const long long ld = C + 2LL * NKV * hs, TT = (long long)T * T;
  const long long qstep = (long long)G * hs, slab_step = G * TT;  // query-side batch strides
  const float scale = 1.0f / sqrtf(float(hs));
  for (int b = 0; b < B; ++b) {
    const E* q = qkv + size_t(b) * T * ld;
    const E* k = q + C;
    const E* v = k + size_t(NKV) * hs;
    E* att_b = att + size_t(b) * NH * TT;
    for (int j = 0; j < G; ++j) {
      // Row-major scores (T, T) = scale * q (T, hs) @ k^T for heads h = g*G + j. Column-major:
      // scores^T (T, T) = k (T, hs) * q^T (hs, T): A = k seen as (hs, T) ld ld, transposed,
      // batch stride hs (kv head g); B = q + j*hs seen as (hs, T) ld ld, as is, stride G*hs;
      // D = scores + j*T*T (m=T, n=T) ld T, stride G*T*T.
      gemm(lt, s, "attention_forward (scores)", true, false, T, T, hs, k, ld, hs, q + size_t(j) * hs, ld, qstep,
           data_type<E>(), scores + size_t(j) * TT, T, slab_step, CUDA_R_32F, NKV, scale, 0.0f);
    }
    causal_softmax_kernel<E><<<dim3(unsigned(T), unsigned(NH)), kRowThreads, 0, s>>>(att_b, scores, T);
    CUDA_CHECK_LAUNCH("causal_softmax_kernel", s);
    for (int j = 0; j < G; ++j) {
      // Row-major out (T, hs; row stride C) = att (T, T) @ v (T, hs). Column-major: out^T
      // (hs, T) = v^T (hs, T) * att^T (T, T): A = v seen as (hs, T) ld ld, as is, stride hs;
      // B = att + j*T*T seen as (T, T) ld T (that is att^T), as is, stride G*T*T;
      // D = out + j*hs (m=hs, n=T) ld C, stride G*hs.
      gemm(lt, s, "attention_forward (att @ v)", false, false, hs, T, T, v, ld, hs, att_b + size_t(j) * TT, T,
           slab_step, data_type<E>(), out + size_t(b) * T * C + size_t(j) * hs, C, qstep, data_type<E>(), NKV, 1.0f,
           0.0f);
    }
  }
}

template <typename E>
void attention_backward(const BlasLt& lt, E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C,
                        int NH, int NKV, float* datt, E* dpre, cudaStream_t s) {
  if (B == 0 || T == 0) return;
  const int hs = C / NH, G = NH / NKV;
  const long long ld = C + 2LL * NKV * hs, TT = (long long)T * T;
  const long long qstep = (long long)G * hs, slab_step = G * TT;
  const float scale = 1.0f / sqrtf(float(hs));
  for (int b = 0; b < B; ++b) {
    const E* q = qkv + size_t(b) * T * ld;
    const E* k = q + C;
    const E* v = k + size_t(NKV) * hs;
    const E* g = dout + size_t(b) * T * C;
    const E* att_b = att + size_t(b) * NH * TT;
    E* dq = dqkv + size_t(b) * T * ld;
    E* dk = dq + C;
    E* dv = dk + size_t(NKV) * hs;
    for (int j = 0; j < G; ++j) {
      const size_t jc = size_t(j) * hs, js = size_t(j) * TT;  // head j's column and slab offsets
      // Row-major datt (T, T) = dout (T, hs) @ v^T. Column-major: datt^T = v (T, hs) *
      // dout^T (hs, T): A = v seen as (hs, T) ld ld, transposed, stride hs; B = dout + j*hs
      // seen as (hs, T) ld C, as is, stride G*hs; D = datt + j*T*T (m=T, n=T) ld T, stride
      // G*T*T, fp32.
      gemm(lt, s, "attention_backward (datt)", true, false, T, T, hs, v, ld, hs, g + jc, C, qstep, data_type<E>(),
           datt + js, T, slab_step, CUDA_R_32F, NKV, 1.0f, 0.0f);
      // Row-major dv (T, hs) += att^T (T, T) @ dout (T, hs), summed over the group's heads
      // (call j adds head g*G + j). Column-major: dv^T (hs, T) += dout^T (hs, T) * att (T, T):
      // A = dout + j*hs seen as (hs, T) ld C, as is, stride G*hs; B = att + j*T*T seen as
      // (T, T) ld T (att^T), transposed back to att, stride G*T*T; D = dv (m=hs, n=T) ld ld,
      // stride hs.
      gemm(lt, s, "attention_backward (dv)", false, true, hs, T, T, g + jc, C, qstep, att_b + js, T, slab_step,
           data_type<E>(), dv, ld, hs, data_type<E>(), NKV, 1.0f, 1.0f);
    }
    causal_softmax_backward_kernel<E><<<dim3(unsigned(T), unsigned(NH)), kRowThreads, 0, s>>>(dpre, att_b, datt, T,
                                                                                               scale);
    CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel", s);
    for (int j = 0; j < G; ++j) {
      const size_t jc = size_t(j) * hs, js = size_t(j) * TT;
      // Row-major dq (T, hs) += dpre (T, T) @ k (T, hs). Column-major: dq^T (hs, T) +=
      // k^T (hs, T) * dpre^T (T, T): A = k seen as (hs, T) ld ld, as is, stride hs; B = dpre
      // + j*T*T seen as (T, T) ld T (dpre^T), as is, stride G*T*T; D = dq + j*hs (m=hs, n=T)
      // ld ld, stride G*hs.
      gemm(lt, s, "attention_backward (dq)", false, false, hs, T, T, k, ld, hs, dpre + js, T, slab_step,
           data_type<E>(), dq + jc, ld, qstep, data_type<E>(), NKV, 1.0f, 1.0f);
      // Row-major dk (T, hs) += dpre^T (T, T) @ q (T, hs), summed over the group's heads.
      // Column-major: dk^T (hs, T) += q^T (hs, T) * dpre (T, T): A = q + j*hs seen as (hs, T)
      // ld ld, as is, stride G*hs; B = dpre + j*T*T seen as (T, T) ld T, transposed, stride
      // G*T*T; D = dk (m=hs, n=T) ld ld, stride hs.
      gemm(lt, s, "attention_backward (dk)", false, true, hs, T, T, q + jc, ld, qstep, dpre + js, T, slab_step,
           data_type<E>(), dk, ld, hs, data_type<E>(), NKV, 1.0f, 1.0f);
    }
  }
}

#define RZ_INSTANTIATE(E)                                                                                        \
  template void attention_forward<E>(const BlasLt&, E*, E*, const E*, int, int, int, int, int, float*,         \
                                     cudaStream_t);                                                            \
  template void attention_backward<E>(const BlasLt&, E*, const E*, const E*, const E*, int, int, int, int, int, \
                                      float*, E*, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
