// kernels/cpu/rope.cpp
//
// A (T, hs/2) table of cos and sin in the compute type is made once per call (the angles
// depend on t and i only, not on the batch row or the head), then rows (b, t) go to
// threads and each of a row's NH + NKV rotated heads is two Eigen array expressions over
// its halves. Every element is computed alone, so the result does not depend on the
// thread count; fp64 (the finite-difference tests) takes fp64 angles, cos and sin.
#include "kernels/cpu/rope.h"

#include <Eigen/Core>
#include <cmath>

#include "base/check.h"
#include "base/memory.h"
#include "kernels/cpu/eigen_rows.h"

namespace rz {

float rope_inv_freq(float theta, int hs, int i) {
  const float exponent = float(2 * i) / float(hs);
  return 1.0f / std::pow(theta, exponent);
}

void check_rope_shape(const char* op, int B, int T, int NH, int NKV, int hs, int pos0, float theta) {
  RZ_CHECK(B >= 0 && T >= 0 && NH >= 1 && NKV >= 1, "%s: sizes must be positive, found B=%d T=%d NH=%d NKV=%d", op, B,
           T, NH, NKV);
  RZ_CHECK(hs >= 2 && hs % 2 == 0, "%s: the head size must be even, found hs=%d", op, hs);
  RZ_CHECK(pos0 >= 0 && int64_t(pos0) + T <= (int64_t(1) << 24),
           "%s: positions %d .. %lld must lie in 0 .. 2^24 (exact in fp32)", op, pos0, (long long)pos0 + T - 1);
  RZ_CHECK(std::isfinite(theta) && theta > 1.0f, "%s: theta must be finite and above 1, found %g", op, double(theta));
}

namespace {

// Per-thread table: cos then sin, (T, half) each.
template <typename A>
A* table_space(size_t n) {
  thread_local Buffer<A> buf;
  if (buf.size() < n) buf.allocate(MemTag::workspace, n);
  return buf.data();
}

template <typename E, bool kBackward>
void rope_impl(E* qkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) {
  using A = acc_t<E>;
  check_rope_shape(kBackward ? "rope_backward" : "rope_forward", B, T, NH, NKV, hs, pos0, theta);
  const int half = hs / 2, heads = NH + NKV;
  const size_t ld = size_t(NH + 2 * NKV) * hs;
  A* cos_t = table_space<A>(2 * size_t(T) * half);
  A* sin_t = cos_t + size_t(T) * half;
  for (int i = 0; i < half; ++i) {
    const A inv_freq = A(rope_inv_freq(theta, hs, i));
    for (int t = 0; t < T; ++t) {
      const A angle = A(pos0 + t) * inv_freq;  // one product in the compute type
      cos_t[size_t(t) * half + i] = std::cos(angle);
      sin_t[size_t(t) * half + i] = std::sin(angle);
    }
  }
  const int64_t rows = int64_t(B) * T;
#pragma omp parallel if (size_t(rows) * heads * hs > kParallelMin)
  {
    RowArr<A> x1(half), x2(half);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int t = int(r % T);
      const Eigen::Map<const RowArr<A>> c(cos_t + size_t(t) * half, half), s(sin_t + size_t(t) * half, half);
      for (int h = 0; h < heads; ++h) {
        E* p = qkv + size_t(r) * ld + size_t(h) * hs;
        load_row(x1, p, half);
        load_row(x2, p + half, half);
        if constexpr (kBackward) {
          store_row<E, A>(p, x1 * c + x2 * s, half);
          store_row<E, A>(p + half, x2 * c - x1 * s, half);
        } else {
          store_row<E, A>(p, x1 * c - x2 * s, half);
          store_row<E, A>(p + half, x2 * c + x1 * s, half);
        }
      }
    }
  }
}

}  // namespace

template <typename E>
void rope_forward(E* qkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) {
  rope_impl<E, false>(qkv, B, T, NH, NKV, hs, pos0, theta);
}

template <typename E>
void rope_backward(E* dqkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) {
  rope_impl<E, true>(dqkv, B, T, NH, NKV, hs, pos0, theta);
}

#define RZ_INSTANTIATE(E)                                                       \
  template void rope_forward<E>(E*, int, int, int, int, int, int, float);      \
  template void rope_backward<E>(E*, int, int, int, int, int, int, float);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
