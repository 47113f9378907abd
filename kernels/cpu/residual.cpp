// kernels/cpu/residual.cpp
#include "kernels/cpu/residual.h"

#include <cstdint>

#include "kernels/cpu/convert.h"

namespace rz {

template <typename E>
void residual_forward(E* out, const E* inp1, const E* inp2, size_t N) {
#pragma omp parallel for schedule(static) if (N > kParallelMin)
  for (int64_t i = 0; i < int64_t(N); ++i) out[i] = store<E>(load(inp1[i]) + load(inp2[i]));
}

template <typename E>
void residual_backward(E* dinp1, E* dinp2, const E* dout, size_t N) {
#pragma omp parallel for schedule(static) if (N > kParallelMin)
  for (int64_t i = 0; i < int64_t(N); ++i) {
    if (dinp1) dinp1[i] = store<E>(load(dinp1[i]) + load(dout[i]));
    if (dinp2) dinp2[i] = store<E>(load(dinp2[i]) + load(dout[i]));
  }
}

#define RZ_INSTANTIATE(E)                                              \
  template void residual_forward<E>(E*, const E*, const E*, size_t);   \
  template void residual_backward<E>(E*, E*, const E*, size_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
