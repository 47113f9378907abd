// kernels/cpu/crossentropy.cpp
//
// For fp32 storage the exponentials go through Eigen's vectorised exp: at GPT-2's vocab
// these two kernels evaluate B*T*V exponentials each, the largest non-GEMM cost of a step.
//
// Eigen peels a row's unaligned head with scalar std::exp, which rounds differently from
// its packet exp, so the bits depended on where the logits sit in memory (the simulated
// device found it: its buffers are 256-byte aligned, a std::vector's 16). A row that does
// not start on kRowAlign bytes is therefore worked on in an aligned copy: the split into
// packet and scalar elements then depends only on V, never on the address.
//
// bf16 storage takes the same path: a row is widened into that aligned fp32 copy, worked
// on there and (backward) rounded back once. Its scalar std::exp loop cost five times the
// fp32 kernel (GPT-2 d12, V = 50257: 109 against 20 ms of a 3.2 s step); the values
// differ from it by exp's rounding only, well under one bf16 step.
#include "kernels/cpu/crossentropy.h"

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

namespace rz {
namespace {

constexpr size_t kRowAlign = 64;  // the widest packet (AVX-512)

bool row_aligned(const float* x) { return reinterpret_cast<uintptr_t>(x) % kRowAlign == 0; }

// This thread's aligned fp32 row buffer (grow-only, at least V floats).
float* row_buffer(int V) {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> buf;
  thread_local size_t cap = 0;
  if (size_t(V) > cap) {
    cap = (size_t(V) * sizeof(float) + kRowAlign - 1) / kRowAlign * kRowAlign / sizeof(float);
    buf.reset(static_cast<float*>(std::aligned_alloc(kRowAlign, cap * sizeof(float))));
  }
  return buf.get();
}

// A row as fp32 in this thread's aligned buffer: a copy of fp32, bf16 widened.
float* copy_row(const float* x, int V) {
  float* r = row_buffer(V);
  std::memcpy(r, x, size_t(V) * sizeof(float));
  return r;
}
float* copy_row(const bf16* x, int V) {
  float* r = row_buffer(V);
  for (int v = 0; v < V; ++v) r[v] = bf16_to_float(x[v]);
  return r;
}

// fp32 rows are worked on in place where aligned; every other row in the copy.
const float* aligned_row(const float* x, int V) { return row_aligned(x) ? x : copy_row(x, V); }
const float* aligned_row(const bf16* x, int V) { return copy_row(x, V); }

}  // namespace

template <typename E>
void crossentropy_forward(acc_t<E>* losses, acc_t<E>* lse, const E* logits, const int* targets,
                          int N, int V, int Vp) {
  using A = acc_t<E>;
#pragma omp parallel for schedule(static) if (size_t(N) * V > kParallelMin)
  for (int n = 0; n < N; ++n) {
    const E* x = logits + size_t(n) * Vp;
    A maxv = -INFINITY, sum = 0;
    if constexpr (!std::is_same_v<E, double>) {
      Eigen::Map<const Eigen::ArrayXf, Eigen::Aligned64> row(aligned_row(x, V), V);
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
      float* r = row_aligned(x) ? x : copy_row(x, V);
      Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64> row(r, V);
      row = (row - l).exp() * dloss;
      if (r != x) std::memcpy(x, r, size_t(V) * sizeof(float));
      x[y] -= dloss;
    } else if constexpr (std::is_same_v<E, bf16>) {
      float* r = copy_row(x, V);
      Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64> row(r, V);
      row = (row - l).exp() * dloss;
      r[y] -= dloss;
      for (int v = 0; v < V; ++v) x[v] = float_to_bf16(r[v]);
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
