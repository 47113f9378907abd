// kernels/cpu/swiglu.cpp
//
// Rows go to threads; within a row, chunks of kChunk columns are widened into
// compute-type Eigen arrays and evaluated with Eigen's vectorised exp (as gelu.cpp's
// fallback does), then rounded once on store. sigmoid is 1 / (1 + exp(-x)): at x far
// below 0, exp(-x) overflows to inf and sigmoid is exactly 0 (silu = -0, no NaN); far
// above, exp(-x) is 0 and sigmoid exactly 1. Every element is computed alone, so the
// result does not depend on the thread count.
#include "kernels/cpu/swiglu.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "kernels/cpu/convert.h"

namespace rz {

namespace {
constexpr int kChunk = 256;
template <typename A>
using Arr = Eigen::Array<A, Eigen::Dynamic, 1, 0, kChunk, 1>;

template <typename E, typename A>
void load_chunk(Arr<A>& dst, const E* src, int n) {
  for (int i = 0; i < n; ++i) dst[i] = load(src[i]);
}
template <typename E, typename A>
void store_chunk(E* dst, const Arr<A>& src, int n) {
  for (int i = 0; i < n; ++i) dst[i] = store<E>(src[i]);
}
}  // namespace

template <typename E>
void swiglu_forward(E* out, const E* gate_up, int N, int H) {
  using A = acc_t<E>;
  RZ_CHECK(N >= 0 && H >= 1, "swiglu_forward: N=%d rows of H=%d", N, H);
#pragma omp parallel for schedule(static) if (size_t(N) * H > kParallelMin)
  for (int n = 0; n < N; ++n) {
    const E* g = gate_up + size_t(n) * 2 * H;
    const E* u = g + H;
    E* o = out + size_t(n) * H;
    for (int c0 = 0; c0 < H; c0 += kChunk) {
      const int len = std::min(kChunk, H - c0);
      Arr<A> x(len), up(len);
      load_chunk(x, g + c0, len);
      load_chunk(up, u + c0, len);
      const Arr<A> y = x / (A(1) + (-x).exp()) * up;
      store_chunk(o + c0, y, len);
    }
  }
}

template <typename E>
void swiglu_backward(E* dgate_up, const E* dout, const E* gate_up, int N, int H) {
  using A = acc_t<E>;
  RZ_CHECK(N >= 0 && H >= 1, "swiglu_backward: N=%d rows of H=%d", N, H);
#pragma omp parallel for schedule(static) if (size_t(N) * H > kParallelMin)
  for (int n = 0; n < N; ++n) {
    const E* g = gate_up + size_t(n) * 2 * H;
    const E* u = g + H;
    const E* d = dout + size_t(n) * H;
    E* dg = dgate_up + size_t(n) * 2 * H;
    E* du = dg + H;
    for (int c0 = 0; c0 < H; c0 += kChunk) {
      const int len = std::min(kChunk, H - c0);
      Arr<A> x(len), up(len), dy(len);
      load_chunk(x, g + c0, len);
      load_chunk(up, u + c0, len);
      load_chunk(dy, d + c0, len);
      const Arr<A> s = A(1) / (A(1) + (-x).exp());
      const Arr<A> dgate = dy * up * s * (A(1) + x * (A(1) - s));
      const Arr<A> dup = dy * x * s;
      store_chunk(dg + c0, dgate, len);
      store_chunk(du + c0, dup, len);
    }
  }
}

#define RZ_INSTANTIATE(E)                                          \
  template void swiglu_forward<E>(E*, const E*, int, int);         \
  template void swiglu_backward<E>(E*, const E*, const E*, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
