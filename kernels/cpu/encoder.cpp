// kernels/cpu/encoder.cpp
//
// The backward scatters rows of dout into dwte; a token may repeat inside the batch, so
// threads split the channels (not the positions): each thread owns a column block of
// dwte and dwpe and walks every position in order. Race-free and deterministic; each
// gradient element is summed in fp32 (or fp64) and stored once per position.
#include "kernels/cpu/encoder.h"

#include "kernels/cpu/convert.h"

namespace rz {

template <typename E>
void encoder_forward(E* out, const int* inp, const E* wte, const E* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static) if (size_t(B) * T * C > kParallelMin)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      E* o = out + (size_t(b) * T + t) * C;
      const E* te = wte + size_t(inp[b * T + t]) * C;
      const E* pe = wpe + size_t(t) * C;
      for (int c = 0; c < C; ++c) o[c] = store<E>(load(te[c]) + load(pe[c]));
    }
  }
}

template <typename E>
void encoder_backward(E* dwte, E* dwpe, const E* dout, const int* inp, int B, int T, int C) {
  constexpr int kBlock = 32;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (size_t(B) * T * C > kParallelMin)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const E* d = dout + (size_t(b) * T + t) * C;
        E* te = dwte + size_t(inp[b * T + t]) * C;
        E* pe = dwpe + size_t(t) * C;
        for (int c = c0; c < c1; ++c) {
          te[c] = store<E>(load(te[c]) + load(d[c]));
          pe[c] = store<E>(load(pe[c]) + load(d[c]));
        }
      }
    }
  }
}

#define RZ_INSTANTIATE(E)                                                                   \
  template void encoder_forward<E>(E*, const int*, const E*, const E*, int, int, int);    \
  template void encoder_backward<E>(E*, E*, const E*, const int*, int, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
