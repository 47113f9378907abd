// kernels/cuda/attention_flash.cu: causal attention without the (T, T) matrix, the
// flash-style path (twin of attention_forward_flash in kernels/cpu/attention.cpp).
//
// One warp per query row (forward, dq) or per key row (dk, dv); lane l holds the head
// dimensions l, l + 32, ... (hs <= 32 * kMaxPerLane). Written for being right the first
// time rather than for speed: every dot product is a warp reduction, nothing is tiled
// through shared memory, and the backward recomputes each probability twice.
//   forward  for keys j <= t, an online softmax: m = running max, l = running sum of
//            exp(s - m), acc = running sum of exp(s - m) v_j, rescaled when m grows;
//            out = acc / l, lse = m + log l (the scores s carry 1/sqrt(hs)).
//   dq       warp per query t, two passes over keys j <= t with p = exp(s - lse_t) and
//            dp = dout_t . v_j: first D_t = sum_j p dp (saved), then
//            dq += sum_j p (dp - D_t) scale k_j.
//   dk, dv   warp per key j, over queries t >= j: dv += p dout_t,
//            dk += p (dp - D_t) scale q_t.
// Grouped-query (NKV < NH, G = NH / NKV): the query-row warps (forward, dq) read kv head
// h / G; a key-row warp belongs to a kv head g and runs the loop above for each of the G
// query heads g*G .. g*G + G-1 in turn, adding into the same registers, so a kv head's
// dk and dv sum its group in one fixed order. With G = 1 that is the multi-head loop.
// Each output row is written by exactly one warp, in a fixed order: deterministic, no
// atomics. dqkv accumulates, like the materialised backward.
#include <cmath>

#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr int kMaxPerLane = 8;  // head size up to 256
constexpr int kWarpsPerBlock = 4;

struct Dims {
  int B, T, C, NH, NKV, G, hs;
  size_t ld;  // C + 2*NKV*hs: qkv's row stride
  float scale;
};

// The row of `rows` that warp w handles; false when the warp has nothing to do.
__device__ __forceinline__ bool warp_row(size_t rows, size_t* row) {
  *row = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  return *row < rows;
}

// x[i] = p[lane + 32 i] for the dimensions this lane holds, 0 beyond hs.
template <typename E>
__device__ __forceinline__ void load_row(float (&x)[kMaxPerLane], const E* p, int hs, int lane) {
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    x[i] = d < hs ? load(p[d]) : 0.0f;
  }
}

template <typename E>
__device__ __forceinline__ float dot_row(const float (&x)[kMaxPerLane], const E* p, int hs, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hs) s += x[i] * load(p[d]);
  }
  return warp_sum(s);
}

template <typename E>
__device__ __forceinline__ void add_row(E* p, const float (&x)[kMaxPerLane], int hs, int lane) {
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hs) p[d] = store<E>(load(p[d]) + x[i]);
  }
}

// Row r of (B, heads, T) -> (b, h, t): heads = NH (query rows) or NKV (key rows).
__device__ __forceinline__ void split_row(const Dims& dm, int heads, size_t r, int* b, int* h, int* t) {
  *t = int(r % dm.T);
  const size_t bh = r / dm.T;
  *h = int(bh % heads);
  *b = int(bh / heads);
}
// Query head h's slice of qkv row (b, u); kv head g's k (part 1) or v (part 2) slice.
template <typename E>
__device__ __forceinline__ const E* q_row(const E* qkv, const Dims& dm, int b, int u, int h) {
  return qkv + (size_t(b) * dm.T + u) * dm.ld + size_t(h) * dm.hs;
}
template <typename E>
__device__ __forceinline__ const E* kv_row(const E* qkv, const Dims& dm, int b, int u, int g, int part) {
  return qkv + (size_t(b) * dm.T + u) * dm.ld + dm.C + size_t(part - 1) * dm.NKV * dm.hs + size_t(g) * dm.hs;
}

template <typename E>
__global__ void flash_forward_kernel(E* out, float* lse, const E* qkv, Dims dm) {
  size_t r;
  if (!warp_row(size_t(dm.B) * dm.NH * dm.T, &r)) return;
  const int lane = threadIdx.x % 32;
  int b, h, t;
  split_row(dm, dm.NH, r, &b, &h, &t);
  const int g = h / dm.G;
  float q[kMaxPerLane], acc[kMaxPerLane];
  load_row(q, q_row(qkv, dm, b, t, h), dm.hs, lane);
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= t; ++j) {
    const float s = dot_row(q, kv_row(qkv, dm, b, j, g, 1), dm.hs, lane) * dm.scale;
    const float m_new = fmaxf(m, s);
    const float rescale = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * rescale + p;
    const E* v = kv_row(qkv, dm, b, j, g, 2);
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * rescale + (d < dm.hs ? p * load(v[d]) : 0.0f);
    }
    m = m_new;
  }
  E* o = out + (size_t(b) * dm.T + t) * dm.C + size_t(h) * dm.hs;
  const float inv = 1.0f / l;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < dm.hs) o[d] = store<E>(acc[i] * inv);
  }
  if (lane == 0) lse[r] = m + logf(l);
}

// Warp per query row: D (saved) and dq (accumulated into dqkv's q part).
template <typename E>
__global__ void flash_backward_dq_kernel(E* dqkv, float* D, const E* dout, const E* qkv, const float* lse, Dims dm) {
  size_t r;
  if (!warp_row(size_t(dm.B) * dm.NH * dm.T, &r)) return;
  const int lane = threadIdx.x % 32;
  int b, h, t;
  split_row(dm, dm.NH, r, &b, &h, &t);
  const int kvh = h / dm.G;
  float q[kMaxPerLane], g[kMaxPerLane], dq[kMaxPerLane];
  load_row(q, q_row(qkv, dm, b, t, h), dm.hs, lane);
  load_row(g, dout + (size_t(b) * dm.T + t) * dm.C + size_t(h) * dm.hs, dm.hs, lane);
  const float lse_t = lse[r];
  float dsum = 0.0f;
  for (int j = 0; j <= t; ++j) {
    const float p = expf(dot_row(q, kv_row(qkv, dm, b, j, kvh, 1), dm.hs, lane) * dm.scale - lse_t);
    dsum += p * dot_row(g, kv_row(qkv, dm, b, j, kvh, 2), dm.hs, lane);
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) dq[i] = 0.0f;
  for (int j = 0; j <= t; ++j) {
    const E* k = kv_row(qkv, dm, b, j, kvh, 1);
    const float p = expf(dot_row(q, k, dm.hs, lane) * dm.scale - lse_t);
    const float ds = p * (dot_row(g, kv_row(qkv, dm, b, j, kvh, 2), dm.hs, lane) - dsum) * dm.scale;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < dm.hs) dq[i] += ds * load(k[d]);
    }
  }
  add_row(dqkv + (size_t(b) * dm.T + t) * dm.ld + size_t(h) * dm.hs, dq, dm.hs, lane);
  if (lane == 0) D[r] = dsum;
}

// Warp per key row j of kv head g: dk and dv (accumulated into dqkv's k and v parts),
// summed over the group's G query heads in order.
template <typename E>
__global__ void flash_backward_dkv_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* D,
                                          Dims dm) {
  size_t r;
  if (!warp_row(size_t(dm.B) * dm.NKV * dm.T, &r)) return;
  const int lane = threadIdx.x % 32;
  int b, g, j;
  split_row(dm, dm.NKV, r, &b, &g, &j);
  float k[kMaxPerLane], v[kMaxPerLane], dk[kMaxPerLane], dv[kMaxPerLane];
  load_row(k, kv_row(qkv, dm, b, j, g, 1), dm.hs, lane);
  load_row(v, kv_row(qkv, dm, b, j, g, 2), dm.hs, lane);
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) dk[i] = dv[i] = 0.0f;
  for (int h = g * dm.G; h < (g + 1) * dm.G; ++h) {
    const size_t row0 = (size_t(b) * dm.NH + h) * dm.T;  // row (b, h, 0) of lse and D
    for (int t = j; t < dm.T; ++t) {
      const E* q = q_row(qkv, dm, b, t, h);
      const E* gr = dout + (size_t(b) * dm.T + t) * dm.C + size_t(h) * dm.hs;
      const float p = expf(dot_row(k, q, dm.hs, lane) * dm.scale - lse[row0 + t]);
      const float ds = p * (dot_row(v, gr, dm.hs, lane) - D[row0 + t]) * dm.scale;
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < dm.hs) {
          dv[i] += p * load(gr[d]);
          dk[i] += ds * load(q[d]);
        }
      }
    }
  }
  E* k_out = dqkv + (size_t(b) * dm.T + j) * dm.ld + dm.C + size_t(g) * dm.hs;
  add_row(k_out, dk, dm.hs, lane);
  add_row(k_out + size_t(dm.NKV) * dm.hs, dv, dm.hs, lane);
}

Dims dims(int B, int T, int C, int NH, int NKV) {
  const int hs = C / NH;
  return Dims{B, T, C, NH, NKV, NH / NKV, hs, size_t(C) + 2 * size_t(NKV) * hs, 1.0f / sqrtf(float(hs))};
}

unsigned warp_blocks(size_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

int flash_max_head_size() { return 32 * kMaxPerLane; }

template <typename E>
void attention_forward_flash(E* out, float* lse, const E* qkv, int B, int T, int C, int NH, int NKV, cudaStream_t s) {
  const size_t rows = size_t(B) * NH * T;
  if (rows == 0) return;
  flash_forward_kernel<E><<<warp_blocks(rows), 32 * kWarpsPerBlock, 0, s>>>(out, lse, qkv, dims(B, T, C, NH, NKV));
  CUDA_CHECK_LAUNCH("flash_forward_kernel", s);
}

template <typename E>
void attention_backward_flash(E* dqkv, const E* dout, const E* qkv, const float* lse, int B, int T, int C, int NH,
                              int NKV, float* D, cudaStream_t s) {
  const size_t rows = size_t(B) * NH * T, kv_rows = size_t(B) * NKV * T;
  if (rows == 0) return;
  const Dims dm = dims(B, T, C, NH, NKV);
  flash_backward_dq_kernel<E><<<warp_blocks(rows), 32 * kWarpsPerBlock, 0, s>>>(dqkv, D, dout, qkv, lse, dm);
  CUDA_CHECK_LAUNCH("flash_backward_dq_kernel", s);
  flash_backward_dkv_kernel<E><<<warp_blocks(kv_rows), 32 * kWarpsPerBlock, 0, s>>>(dqkv, dout, qkv, lse, D, dm);
  CUDA_CHECK_LAUNCH("flash_backward_dkv_kernel", s);
}

#define RZ_INSTANTIATE(E)                                                                                  \
  template void attention_forward_flash<E>(E*, float*, const E*, int, int, int, int, int, cudaStream_t); \
  template void attention_backward_flash<E>(E*, const E*, const E*, const float*, int, int, int, int, int,  \
                                            float*, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
