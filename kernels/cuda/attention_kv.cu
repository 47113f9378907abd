// kernels/cuda/attention_kv.cu: attention of a few new positions against a KV cache, for
// sampling (twin of kernels/cpu/attention_kv.cpp, its reference).
//
// One block per query row (b, i, h); its kWarps warps split the row's keys 0 .. pos + i
// round-robin (warp w takes keys w, w + kWarps, ...), so a long context keeps every warp of
// the block busy even when there is one new token and a handful of heads. Lane l holds the
// head dimensions l, l + 32, ... (hs <= 32 * kMaxPerLane). Each warp runs the online
// softmax of attention_flash.cu over its keys:
//   m = running max of the scaled scores, l = running sum of exp(s - m),
//   acc = running sum of exp(s - m) v_j, rescaled when m grows,
// and leaves (m, l, acc) in shared memory. Then thread d < hs merges the warps' partials in
// warp order: M = max_w m_w, out_d = sum_w acc_w[d] e^(m_w - M) / sum_w l_w e^(m_w - M).
// Key order within a warp and merge order are fixed by the layout: deterministic, no
// atomics. A warp with no keys (a short context) leaves m = -inf, l = 0, which merges as 0.
#include <cmath>

#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr int kMaxPerLane = 8;  // head size up to 256
constexpr int kWarps = 8;

struct KvDims {
  int Tq, pos, Tc, NH, group, hs;  // group = NH / NKV: query heads per kv head
  size_t qld, kld;                 // row strides: NH*hs (q, out), NKV*hs (the caches)
  float scale;
};

template <typename E>
__global__ void attention_kv_kernel(E* out, const E* q, const E* k_cache, const E* v_cache, KvDims dm) {
  __shared__ float part_m[kWarps], part_l[kWarps];
  __shared__ float part_acc[kWarps][32 * kMaxPerLane];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const size_t row = blockIdx.x;  // (b, i, h)
  const int h = int(row % dm.NH);
  const int i = int(row / dm.NH % dm.Tq);
  const size_t b = row / dm.NH / dm.Tq;
  const E* qrow = q + (b * dm.Tq + i) * dm.qld + size_t(h) * dm.hs;
  const size_t kv_off = b * dm.Tc * dm.kld + size_t(h / dm.group) * dm.hs;
  float qr[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    qr[k] = d < dm.hs ? load(qrow[d]) : 0.0f;
    acc[k] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int keys = dm.pos + i + 1;
  for (int j = warp; j < keys; j += kWarps) {
    const E* krow = k_cache + kv_off + size_t(j) * dm.kld;
    const E* vrow = v_cache + kv_off + size_t(j) * dm.kld;
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < dm.hs) dot += qr[k] * load(krow[d]);
    }
    const float s = warp_sum(dot) * dm.scale;
    const float m_new = fmaxf(m, s);
    const float rescale = expf(m - m_new);  // 0 on the warp's first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * rescale + p;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int d = lane + 32 * k;
      acc[k] = acc[k] * rescale + (d < dm.hs ? p * load(vrow[d]) : 0.0f);
    }
    m = m_new;
  }
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) part_acc[warp][lane + 32 * k] = acc[k];
  __syncthreads();
  for (int d = threadIdx.x; d < dm.hs; d += blockDim.x) {
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, part_m[w]);
    float sum = 0.0f, o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float e = part_l[w] > 0.0f ? expf(part_m[w] - M) : 0.0f;  // an idle warp adds nothing
      sum += part_l[w] * e;
      o += part_acc[w][d] * e;
    }
    out[(b * dm.Tq + i) * dm.qld + size_t(h) * dm.hs + d] = store<E>(o / sum);
  }
}

}  // namespace

int attention_kv_max_head_size() { return 32 * kMaxPerLane; }

template <typename E>
void attention_forward_kv(E* out, const E* q, const E* k_cache, const E* v_cache, int B, int Tq, int pos, int Tc,
                          int NH, int NKV, int hs, cudaStream_t s) {
  const size_t rows = size_t(B) * Tq * NH;
  if (rows == 0) return;
  const KvDims dm{Tq,           pos, Tc, NH, NH / NKV, hs, size_t(NH) * hs, size_t(NKV) * hs,
                  1.0f / sqrtf(float(hs))};
  attention_kv_kernel<E><<<unsigned(rows), 32 * kWarps, 0, s>>>(out, q, k_cache, v_cache, dm);
  CUDA_CHECK_LAUNCH("attention_kv_kernel", s);
}

#define RZ_INSTANTIATE(E)                                                                                      \
  template void attention_forward_kv<E>(E*, const E*, const E*, const E*, int, int, int, int, int, int, int, \
                                        cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
