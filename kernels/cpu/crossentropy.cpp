// kernels/cpu/crossentropy.cpp
//
// For fp32 storage the exponentials go through Eigen's vectorised exp: at GPT-2's vocab
// these two kernels evaluate B*T*V exponentials each, the largest non-GEMM cost of a step.
#include "kernels/cpu/crossentropy.h"

#include <Eigen/Core>
#include <cmath>

namespace rz {

template <typename E>
void crossentropy_forward(acc_t<E>* losses, acc_t<E>* lse, const E* logits, const int* targets,
                          int N, int V, int Vp) {
  using A = acc_t<E>;
#pragma omp parallel for schedule(static) if (size_t(N) * V > kParallelMin)
  for (int n = 0; n < N; ++n) {
    const E* x = logits + size_t(n) * Vp;
    A maxv = -INFINITY, sum = 0;
    if constexpr (std::is_same_v<E, float>) {
      Eigen::Map<const Eigen::ArrayXf> row(x, V);
      maxv = row.maxCoeff();
      sum = (row - maxv).exp().sum();
    } else {
      for (int v = 0; v < V; ++v) maxv = std::max(maxv, A(load(x[v])));
      for (int v = 0; v < V; ++v) sum += std::exp(load(x[v]) - maxv);
    }
    const A l = maxv + std::log(sum);
    lse[n] = l;
    losses[n] = l - load(x[targets[n]]);
  }
}

template <typename E>
void crossentropy_softmax_backward(E* logits_to_dlogits, const acc_t<E>* lse, const int* targets,
                                   acc_t<E> dloss, int N, int V, int Vp) {
  using A = acc_t<E>;
#pragma omp parallel for schedule(static) if (size_t(N) * V > kParallelMin)
  for (int n = 0; n < N; ++n) {
    E* x = logits_to_dlogits + size_t(n) * Vp;
    const A l = lse[n];
    const int y = targets[n];
    if constexpr (std::is_same_v<E, float>) {
      Eigen::Map<Eigen::ArrayXf> row(x, V);
      row = (row - l).exp() * dloss;
      x[y] -= dloss;
    } else {
      for (int v = 0; v < V; ++v) {
        const A p = std::exp(load(x[v]) - l);
        x[v] = store<E>((p - (v == y ? A(1) : A(0))) * dloss);
      }
    }
    for (int v = V; v < Vp; ++v) x[v] = store<E>(A(0));
  }
}

#define RZ_INSTANTIATE(E)                                                                      \
  template void crossentropy_forward<E>(acc_t<E>*, acc_t<E>*, const E*, const int*, int, int, \
                                        int);                                                 \
  template void crossentropy_softmax_backward<E>(E*, const acc_t<E>*, const int*, acc_t<E>,   \
                                                 int, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
