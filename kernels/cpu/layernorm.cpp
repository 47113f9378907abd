// kernels/cpu/layernorm.cpp
//
// Backward, with norm = (x - mean) * rstd and dnorm = weight * dout:
//   dinp = rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm))
// The parameter gradients sum over all N rows. Rows go to threads for out and dinp; for
// dweight and dbias threads own channel blocks and walk every row in order, so the sums
// are race-free and do not depend on the thread count. Each row is widened into
// compute-type Eigen arrays, so the reductions and the elementwise work are vectorised
// (with C = 128 the scalar loops were a visible part of a small model's step).
#include "kernels/cpu/layernorm.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "kernels/cpu/eigen_rows.h"

namespace rz {

namespace {
template <typename A>
using Arr = RowArr<A>;
}  // namespace

template <typename E>
void layernorm_forward(E* out, acc_t<E>* mean, acc_t<E>* rstd, const E* inp, const E* weight,
                       const E* bias, int N, int C) {
  using A = acc_t<E>;
#pragma omp parallel if (size_t(N) * C > kParallelMin)
  {
    Arr<A> w(C), b(C), x(C), y(C);
    load_row(w, weight, C);
    load_row(b, bias, C);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      load_row(x, inp + size_t(n) * C, C);
      const A m = x.sum() / A(C);
      x -= m;
      const A v = x.square().sum() / A(C);
      const A s = A(1) / std::sqrt(v + A(kLayerNormEps));
      y = x * s * w + b;
      store_row<E, A>(out + size_t(n) * C, y, C);
      mean[n] = m;
      rstd[n] = s;
    }
  }
}

template <typename E>
void layernorm_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                        const acc_t<E>* mean, const acc_t<E>* rstd, int N, int C) {
  using A = acc_t<E>;
#pragma omp parallel if (size_t(N) * C > kParallelMin)
  {
    Arr<A> w(C), x(C), d(C), dx(C);
    load_row(w, weight, C);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      load_row(x, inp + size_t(n) * C, C);
      load_row(d, dout + size_t(n) * C, C);
      load_row(dx, dinp + size_t(n) * C, C);
      const A s = rstd[n];
      x = (x - mean[n]) * s;  // norm
      d *= w;                 // dnorm
      const A dnorm_mean = d.sum() / A(C);
      const A dnorm_norm_mean = (d * x).sum() / A(C);
      dx += (d - dnorm_mean - x * dnorm_norm_mean) * s;
      store_row<E, A>(dinp + size_t(n) * C, dx, C);
    }
  }
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel if (size_t(N) * C > kParallelMin)
  {
    Arr<A> x(kBlock), d(kBlock), dw(kBlock), db(kBlock);
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; ++blk) {
      const int c0 = blk * kBlock, len = std::min(kBlock, C - c0);
      x.resize(len);
      d.resize(len);
      dw.setZero(len);
      db.setZero(len);
      for (int n = 0; n < N; ++n) {
        load_row(x, inp + size_t(n) * C + c0, len);
        load_row(d, dout + size_t(n) * C + c0, len);
        dw += (x - mean[n]) * rstd[n] * d;
        db += d;
      }
      for (int c = 0; c < len; ++c) {
        dweight[c0 + c] = store<E>(load(dweight[c0 + c]) + dw[c]);
        dbias[c0 + c] = store<E>(load(dbias[c0 + c]) + db[c]);
      }
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
