// kernels/cpu/layernorm.cpp
//
// Backward, with norm = (x - mean) * rstd and dnorm = weight * dout:
//   dinp = rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm))
// The parameter gradients sum over all N rows. Rows go to threads for dinp; for dweight
// and dbias threads own channel blocks and walk every row in order, so the sums are
// race-free and do not depend on the thread count.
#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <vector>

namespace rz {

template <typename E>
void layernorm_forward(E* out, acc_t<E>* mean, acc_t<E>* rstd, const E* inp, const E* weight,
                       const E* bias, int N, int C) {
  using A = acc_t<E>;
#pragma omp parallel for schedule(static) if (size_t(N) * C > kParallelMin)
  for (int n = 0; n < N; ++n) {
    const E* x = inp + size_t(n) * C;
    A m = 0;
    for (int c = 0; c < C; ++c) m += load(x[c]);
    m /= C;
    A v = 0;
    for (int c = 0; c < C; ++c) {
      A d = load(x[c]) - m;
      v += d * d;
    }
    v /= C;
    A s = A(1) / std::sqrt(v + A(kLayerNormEps));
    E* o = out + size_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = store<E>((load(x[c]) - m) * s * load(weight[c]) + load(bias[c]));
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename E>
void layernorm_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                        const acc_t<E>* mean, const acc_t<E>* rstd, int N, int C) {
  using A = acc_t<E>;
#pragma omp parallel for schedule(static) if (size_t(N) * C > kParallelMin)
  for (int n = 0; n < N; ++n) {
    const E* x = inp + size_t(n) * C;
    const E* d = dout + size_t(n) * C;
    E* dx = dinp + size_t(n) * C;
    const A m = mean[n], s = rstd[n];
    A dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      A norm = (load(x[c]) - m) * s;
      A dnorm = load(weight[c]) * load(d[c]);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int c = 0; c < C; ++c) {
      A norm = (load(x[c]) - m) * s;
      A dnorm = load(weight[c]) * load(d[c]);
      dx[c] = store<E>(load(dx[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
    }
  }
  constexpr int kBlock = 16;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (size_t(N) * C > kParallelMin)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    A dw[kBlock] = {}, db[kBlock] = {};
    for (int n = 0; n < N; ++n) {
      const E* x = inp + size_t(n) * C;
      const E* d = dout + size_t(n) * C;
      for (int c = c0; c < c1; ++c) {
        A norm = (load(x[c]) - mean[n]) * rstd[n];
        dw[c - c0] += norm * load(d[c]);
        db[c - c0] += load(d[c]);
      }
    }
    for (int c = c0; c < c1; ++c) {
      dweight[c] = store<E>(load(dweight[c]) + dw[c - c0]);
      dbias[c] = store<E>(load(dbias[c]) + db[c - c0]);
    }
  }
}

#define RZ_INSTANTIATE(E)                                                                     \
  template void layernorm_forward<E>(E*, acc_t<E>*, acc_t<E>*, const E*, const E*, const E*, \
                                     int, int);                                              \
  template void layernorm_backward<E>(E*, E*, E*, const E*, const E*, const E*,             \
                                      const acc_t<E>*, const acc_t<E>*, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
