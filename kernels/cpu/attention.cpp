// kernels/cpu/attention.cpp
//
// Forward: for each (b, t, h) a row of scores over t2 <= t, a softmax, and a weighted sum
// of v. Backward, per row t with p = att[t,:] and g = dout_t:
//   datt[t2]  = g . v_t2                     dv_t2 += p[t2] g
//   dpre[t2]  = p[t2] (datt[t2] - sum_j p[j] datt[j])      (softmax backward)
//   dq_t     += sum_t2 dpre[t2] k_t2 / sqrt(hs)   dk_t2 += dpre[t2] q_t / sqrt(hs)
// Every write of head h in batch b lands in that (b, h)'s own columns of dqkv, so threads
// split (b, h) pairs: no races, and the order of additions is fixed.
#include "kernels/cpu/attention.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/convert.h"

namespace rz {

template <typename E>
void attention_forward(E* out, E* att, const E* qkv, int B, int T, int C, int NH) {
  using A = acc_t<E>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel if (size_t(B) * NH * T * T * hs > kParallelMin)
  {
    std::vector<A> row(T), acc(hs);
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < NH; ++h) {
          const E* q = qkv + (size_t(b) * T + t) * 3 * C + h * hs;
          E* a = att + ((size_t(b) * NH + h) * T + t) * T;
          A maxv = -INFINITY;
          for (int t2 = 0; t2 <= t; ++t2) {
            const E* k = qkv + (size_t(b) * T + t2) * 3 * C + C + h * hs;
            A s = 0;
            for (int i = 0; i < hs; ++i) s += load(q[i]) * load(k[i]);
            s *= scale;
            row[t2] = s;
            if (s > maxv) maxv = s;
          }
          A sum = 0;
          for (int t2 = 0; t2 <= t; ++t2) {
            row[t2] = std::exp(row[t2] - maxv);
            sum += row[t2];
          }
          const A inv = A(1) / sum;
          for (int i = 0; i < hs; ++i) acc[i] = 0;
          for (int t2 = 0; t2 <= t; ++t2) {
            const A p = row[t2] * inv;
            a[t2] = store<E>(p);
            const E* v = qkv + (size_t(b) * T + t2) * 3 * C + 2 * C + h * hs;
            for (int i = 0; i < hs; ++i) acc[i] += p * load(v[i]);
          }
          for (int t2 = t + 1; t2 < T; ++t2) a[t2] = store<E>(A(0));
          E* o = out + (size_t(b) * T + t) * C + h * hs;
          for (int i = 0; i < hs; ++i) o[i] = store<E>(acc[i]);
        }
      }
    }
  }
}

template <typename E>
void attention_backward(E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C,
                        int NH) {
  using A = acc_t<E>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel if (size_t(B) * NH * T * T * hs > kParallelMin)
  {
    std::vector<A> datt(T), dq(hs);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          const E* a = att + ((size_t(b) * NH + h) * T + t) * T;
          const E* g = dout + (size_t(b) * T + t) * C + h * hs;
          const E* q = qkv + (size_t(b) * T + t) * 3 * C + h * hs;
          A dot = 0;
          for (int t2 = 0; t2 <= t; ++t2) {
            const E* v = qkv + (size_t(b) * T + t2) * 3 * C + 2 * C + h * hs;
            E* dv = dqkv + (size_t(b) * T + t2) * 3 * C + 2 * C + h * hs;
            const A p = load(a[t2]);
            A s = 0;
            for (int i = 0; i < hs; ++i) {
              s += load(g[i]) * load(v[i]);
              dv[i] = store<E>(load(dv[i]) + p * load(g[i]));
            }
            datt[t2] = s;
            dot += p * s;
          }
          for (int i = 0; i < hs; ++i) dq[i] = 0;
          for (int t2 = 0; t2 <= t; ++t2) {
            const A dpre = load(a[t2]) * (datt[t2] - dot) * scale;
            const E* k = qkv + (size_t(b) * T + t2) * 3 * C + C + h * hs;
            E* dk = dqkv + (size_t(b) * T + t2) * 3 * C + C + h * hs;
            for (int i = 0; i < hs; ++i) {
              dq[i] += dpre * load(k[i]);
              dk[i] = store<E>(load(dk[i]) + dpre * load(q[i]));
            }
          }
          E* dqo = dqkv + (size_t(b) * T + t) * 3 * C + h * hs;
          for (int i = 0; i < hs; ++i) dqo[i] = store<E>(load(dqo[i]) + dq[i]);
        }
      }
    }
  }
}

#define RZ_INSTANTIATE(E)                                                                   \
  template void attention_forward<E>(E*, E*, const E*, int, int, int, int);               \
  template void attention_backward<E>(E*, const E*, const E*, const E*, int, int, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
