// kernels/cpu/rmsnorm.cpp
//
// The layout of layernorm.cpp: rows go to threads for out and dinp, each row widened into
// compute-type Eigen arrays so the reductions and the elementwise work are vectorised; for
// dweight threads own channel blocks and walk every row in order, so the column sums are
// race-free and do not depend on the thread count.
#include "kernels/cpu/rmsnorm.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu/eigen_rows.h"

namespace rz {

template <typename E>
void rmsnorm_forward(E* out, acc_t<E>* rstd, const E* inp, const E* weight, int N, int C, acc_t<E> eps) {
  using A = acc_t<E>;
  RZ_CHECK(N >= 0 && C >= 1, "rmsnorm_forward: N=%d rows of C=%d channels", N, C);
#pragma omp parallel if (size_t(N) * C > kParallelMin)
  {
    RowArr<A> w(C), x(C);
    load_row(w, weight, C);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      load_row(x, inp + size_t(n) * C, C);
      const A s = A(1) / std::sqrt(x.square().sum() / A(C) + eps);
      store_row<E, A>(out + size_t(n) * C, x * s * w, C);
      rstd[n] = s;
    }
  }
}

template <typename E>
void rmsnorm_backward(E* dinp, E* dweight, const E* dout, const E* inp, const E* weight, const acc_t<E>* rstd, int N,
                      int C) {
  using A = acc_t<E>;
  RZ_CHECK(N >= 0 && C >= 1, "rmsnorm_backward: N=%d rows of C=%d channels", N, C);
#pragma omp parallel if (size_t(N) * C > kParallelMin)
  {
    RowArr<A> w(C), x(C), d(C), dx(C);
    load_row(w, weight, C);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      load_row(x, inp + size_t(n) * C, C);
      load_row(d, dout + size_t(n) * C, C);
      load_row(dx, dinp + size_t(n) * C, C);
      const A s = rstd[n];
      x *= s;  // norm
      d *= w;  // dnorm
      const A dnorm_norm_mean = (d * x).sum() / A(C);
      dx += (d - x * dnorm_norm_mean) * s;
      store_row<E, A>(dinp + size_t(n) * C, dx, C);
    }
  }
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel if (size_t(N) * C > kParallelMin)
  {
    RowArr<A> x(kBlock), d(kBlock), dw(kBlock);
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; ++blk) {
      const int c0 = blk * kBlock, len = std::min(kBlock, C - c0);
      x.resize(len);
      d.resize(len);
      dw.setZero(len);
      for (int n = 0; n < N; ++n) {
        load_row(x, inp + size_t(n) * C + c0, len);
        load_row(d, dout + size_t(n) * C + c0, len);
        dw += x * rstd[n] * d;
      }
      for (int c = 0; c < len; ++c) dweight[c0 + c] = store<E>(load(dweight[c0 + c]) + dw[c]);
    }
  }
}

#define RZ_INSTANTIATE(E)                                                                                   \
  template void rmsnorm_forward<E>(E*, acc_t<E>*, const E*, const E*, int, int, acc_t<E>);                  \
  template void rmsnorm_backward<E>(E*, E*, const E*, const E*, const E*, const acc_t<E>*, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
