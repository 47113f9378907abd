// kernels/cuda/rope.cu: rotary position embedding on the GPU (twin of kernels/cpu/rope.cpp).
//
// One thread per rotated pair (row, head, i), grid-stride over B*T*(NH+NKV)*hs/2 pairs: it
// reads dimensions i and i + hs/2 of its head, rotates them by (pos0 + t) * inv_freq[i]
// and writes both back, so every element is written by exactly one thread and in-place is
// safe. inv_freq comes from the host (RopeFreqs, launchers.cuh), the angle is the same
// single fp32 product as on the CPU; cos and sin are CUDA's sincosf (full range reduction,
// a couple of ulps from the CPU's). v is never touched.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

template <typename E, bool kBackward>
__global__ void rope_kernel(E* qkv, int T, int heads, int hs, size_t ld, int pos0, RopeFreqs freqs, size_t pairs) {
  const int half = hs / 2;
  RZ_GRID_STRIDE(k, pairs) {
    const int i = int(k % half);
    const size_t head_row = k / half;  // (row, head)
    const int h = int(head_row % heads);
    const size_t row = head_row / heads;
    const int t = int(row % T);
    const float angle = float(pos0 + t) * freqs.inv_freq[i];
    float sn, cs;
    sincosf(angle, &sn, &cs);
    E* p = qkv + row * ld + size_t(h) * hs + i;
    const float x1 = load(p[0]), x2 = load(p[half]);
    if constexpr (kBackward) {
      p[0] = store<E>(x1 * cs + x2 * sn);
      p[half] = store<E>(x2 * cs - x1 * sn);
    } else {
      p[0] = store<E>(x1 * cs - x2 * sn);
      p[half] = store<E>(x2 * cs + x1 * sn);
    }
  }
}

}  // namespace

template <typename E>
void rope(E* qkv, int B, int T, int NH, int NKV, int hs, int pos0, const RopeFreqs& freqs, bool backward,
          cudaStream_t s) {
  const int heads = NH + NKV;  // q and k; v follows them in the row
  const size_t pairs = size_t(B) * T * heads * (hs / 2);
  if (pairs == 0) return;
  const size_t ld = size_t(NH + 2 * NKV) * hs;
  if (backward)
    rope_kernel<E, true><<<grid_for(pairs), kThreads, 0, s>>>(qkv, T, heads, hs, ld, pos0, freqs, pairs);
  else
    rope_kernel<E, false><<<grid_for(pairs), kThreads, 0, s>>>(qkv, T, heads, hs, ld, pos0, freqs, pairs);
  CUDA_CHECK_LAUNCH(backward ? "rope_kernel(backward)" : "rope_kernel(forward)", s);
}

template void rope<float>(float*, int, int, int, int, int, int, const RopeFreqs&, bool, cudaStream_t);
template void rope<bf16_t>(bf16_t*, int, int, int, int, int, int, const RopeFreqs&, bool, cudaStream_t);

}  // namespace rz::cuda
