// kernels/cpu/gelu.cpp
#include "kernels/cpu/gelu.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/convert.h"

namespace rz {

template <typename E>
void gelu_forward(E* out, const E* inp, size_t N) {
  using A = acc_t<E>;
  const A k = std::sqrt(A(2) / A(M_PI));
#pragma omp parallel for schedule(static) if (N > kParallelMin)
  for (int64_t i = 0; i < int64_t(N); ++i) {
    A x = load(inp[i]);
    out[i] = store<E>(A(0.5) * x * (A(1) + std::tanh(k * (x + A(0.044715) * x * x * x))));
  }
}

template <typename E>
void gelu_backward(E* dinp, const E* inp, const E* dout, size_t N) {
  using A = acc_t<E>;
  const A k = std::sqrt(A(2) / A(M_PI));
#pragma omp parallel for schedule(static) if (N > kParallelMin)
  for (int64_t i = 0; i < int64_t(N); ++i) {
    A x = load(inp[i]);
    A th = std::tanh(k * (x + A(0.044715) * x * x * x));
    A sech2 = A(1) - th * th;
    A grad = A(0.5) * (A(1) + th) + A(0.5) * x * sech2 * k * (A(1) + A(3 * 0.044715) * x * x);
    dinp[i] = store<E>(grad * load(dout[i]));
  }
}

#define RZ_INSTANTIATE(E)                                       \
  template void gelu_forward<E>(E*, const E*, size_t);          \
  template void gelu_backward<E>(E*, const E*, const E*, size_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
