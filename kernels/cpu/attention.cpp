// kernels/cpu/attention.cpp
//
// Causal attention as small GEMMs per (b, h) pair. One (b, h) gathers its head's q, k, v
// (T, hs) out of qkv into contiguous compute-type matrices Q, K, V, then:
//   forward   S = Q K^T * scale,  P = softmax_rows(S) (causal),  O = P V
//   backward  dP = dO V^T,        dV = P^T dO,
//             dS = P o (dP - rowsum(P o dP)) * scale      (softmax backward, o = elementwise)
//             dQ = dS K,          dK = dS^T Q
// Causality is used by row blocks of kRowBlock queries: block [r0, r1) only sees keys
// [0, r1), so every product runs over the lower block triangle (about half of T x T for
// large T) as plain GEMMs (fp32: gemm_f32.h where the CPU has AVX2 + FMA, else Eigen).
// Softmax rows use Eigen's vectorised exp.
//
// In fp32 on the packed kernel the products read q, k, v and dout where they lie (row
// stride 3C or C: gemm_f32 takes any strides) and write out, and accumulate dq, dk, dv,
// straight into dqkv: no per-head gather, scatter or zeroing. The values do not change:
// every element of a gemm_f32 product is the same FMA chain whatever the strides, and an
// accumulation into the zeroed dqkv the model hands in equals the product plus zero.
// Elsewhere (bf16, fp64, no AVX2) the head is gathered into contiguous scratch first.
//
// Threads split (b, h) pairs: each pair writes only its own columns of out / dqkv and its
// own (T, T) slab of att, so there are no races and the order of additions inside a pair
// does not depend on the thread count. Eigen runs single-threaded inside the parallel
// region. bf16 is widened into the fp32 scratch on gather and rounded once on scatter.
#include "kernels/cpu/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "base/memory.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_f32.h"

namespace rz {

namespace {

constexpr int kRowBlock = 32;

template <typename A>
using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename A>
using MatMap = Eigen::Map<Mat<A>>;

// Per-thread scratch for one (b, h): six (T, hs) matrices and two (T, T) ones.
template <typename A>
struct HeadScratch {
  Buffer<A> buf;
  A* get(size_t n) {
    if (buf.size() < n) buf.allocate(MemTag::workspace, n);
    return buf.data();
  }
};
template <typename A>
HeadScratch<A>& head_scratch() {
  thread_local HeadScratch<A> s;
  return s;
}

// dst (M, N), leading dimension ldd, [+]= a (M, K) * b (K, N), operands by (row, column)
// strides: in fp32 through the packed AVX2 kernel (gemm_f32.h) where the CPU has it.
// Returns false (nothing done) otherwise; the caller then runs its Eigen expression.
template <typename A>
bool head_gemm(A* dst, int64_t ldd, const A* a, int64_t ars, int64_t acs, const A* b, int64_t brs, int64_t bcs,
               int M, int K, int N, bool accumulate) {
  if constexpr (std::is_same_v<A, float>) {
    if (!gemm_f32_available()) return false;
    gemm_f32(dst, ldd, {a, ars, acs}, {b, brs, bcs}, nullptr, M, K, N, accumulate);
    return true;
  } else {
    return false;
  }
}

// The b operands that every row block of a head multiplies by (K^T and V forward; K^T,
// V^T and K backward) are packed once per head for the packed kernel (gemm_f32_packed:
// bitwise the same products) instead of once per row block: at T = 128, hs = 32 the
// repacking was a fifth of attention's time. Empty (null data) where the kernel is not
// used; the caller then runs its Eigen expression.
template <typename A>
PackedB pack_b(float* space, const A* b, int64_t rs, int64_t cs, int K, int N) {
  if constexpr (std::is_same_v<A, float>) {
    if (space) return gemm_f32_pack_b(space, {b, rs, cs}, K, N);
  }
  return {nullptr, 0, 0};
}
template <typename A>
bool packed_gemm(A* dst, int64_t ldd, const A* a, int64_t ars, int64_t acs, const PackedB& b, int M, int K, int N,
                 bool accumulate) {
  if constexpr (std::is_same_v<A, float>) {
    if (!b.data) return false;
    gemm_f32_packed(dst, ldd, {a, ars, acs}, b, M, K, N, accumulate);
    return true;
  } else {
    return false;
  }
}

// This thread's space for a head's packed operands: n floats, or null without the kernel.
template <typename A>
float* pack_space(size_t n) {
  if constexpr (std::is_same_v<A, float>) {
    if (!gemm_f32_available()) return nullptr;
    thread_local Buffer<float> space;
    if (space.size() < n) space.allocate(MemTag::workspace, n);
    return space.data();
  } else {
    return nullptr;
  }
}

// fp32 on the packed kernel: the products read and write the caller's buffers in place.
template <typename E>
bool direct_f32() {
  if constexpr (std::is_same_v<E, float>) return gemm_f32_available();
  return false;
}

// dst (T, hs) <- the hs columns starting at col of rows of src with row stride ld.
template <typename E, typename A>
void gather(A* dst, const E* src, size_t ld, int T, int hs) {
  for (int t = 0; t < T; ++t) {
    const E* s = src + size_t(t) * ld;
    A* d = dst + size_t(t) * hs;
    for (int i = 0; i < hs; ++i) d[i] = load(s[i]);
  }
}
template <typename E, typename A>
void scatter_add(E* dst, const A* src, size_t ld, int T, int hs) {
  for (int t = 0; t < T; ++t) {
    E* d = dst + size_t(t) * ld;
    const A* s = src + size_t(t) * hs;
    for (int i = 0; i < hs; ++i) d[i] = store<E>(load(d[i]) + s[i]);
  }
}

// One implementation for both paths. The materialised path keeps a (T, T) probability
// matrix per thread and copies it into att (saved for backward); the flash path keeps
// only a (kRowBlock, T) block, saves each row's log-sum-exp and, in backward, recomputes
// the block's probabilities from it. Row block [r0, r1) needs keys [0, r1) only, so a
// block holds every probability of its rows. Both run the same products on the same
// layouts (row stride T), so the forward outputs are bitwise equal.
template <typename E, bool kFlash>
void forward_impl(E* out, E* att, float* lse, const E* qkv, int B, int T, int C, int NH) {
  using A = acc_t<E>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
  const size_t ld = size_t(3) * C;
  const size_t prows = kFlash ? size_t(kRowBlock) : size_t(T);
#pragma omp parallel if (size_t(B) * NH * T * T * hs > kParallelMin)
  {
    const size_t th = size_t(T) * hs;
    A* base = head_scratch<A>().get(4 * th + prows * T);
    MatMap<A> Q(base, T, hs), K(base + th, T, hs), V(base + 2 * th, T, hs), O(base + 3 * th, T, hs);
    A* P = base + 4 * th;
    const size_t kt_floats = size_t(gemm_f32_packed_floats(hs, T));
    float* packs = pack_space<A>(kt_floats + size_t(gemm_f32_packed_floats(T, hs)));
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const E* src = qkv + size_t(b) * T * ld + size_t(h) * hs;
      // q, k, v rows (row stride qs) and where O's rows go (row stride os).
      const A *q = Q.data(), *k = K.data(), *v = V.data();
      A* o = O.data();
      size_t qs = size_t(hs), os = size_t(hs);
      if (direct_f32<E>()) {
        q = reinterpret_cast<const A*>(src), k = q + C, v = q + 2 * C, qs = ld;
        o = reinterpret_cast<A*>(out + size_t(b) * T * C + size_t(h) * hs), os = size_t(C);
      } else {
        gather(Q.data(), src, ld, T, hs);
        gather(K.data(), src + C, ld, T, hs);
        gather(V.data(), src + 2 * C, ld, T, hs);
      }
      const PackedB kt = pack_b(packs, k, 1, qs, hs, T);                    // K^T (hs, T)
      const PackedB vp = pack_b(packs ? packs + kt_floats : nullptr, v, qs, 1, T, hs);  // V (T, hs)
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock), nr = r1 - r0;
        MatMap<A> Pb(kFlash ? P : P + size_t(r0) * T, nr, T);  // rows r0 .. r1-1
        if (!packed_gemm(Pb.data(), T, q + size_t(r0) * qs, qs, 1, kt, nr, hs, r1, false))
          Pb.leftCols(r1).noalias() = Q.middleRows(r0, nr) * K.topRows(r1).transpose();
        for (int t = r0; t < r1; ++t) {
          auto row = Pb.row(t - r0).head(t + 1).array();
          row *= scale;
          const A maxv = row.maxCoeff();
          row = (row - maxv).exp();
          const A sum = row.sum();
          row *= A(1) / sum;
          if constexpr (kFlash) lse[size_t(bh) * T + t] = float(maxv + std::log(sum));
          // Row t's columns t+1 .. r1-1 hold scores: zero them before P V.
          Pb.row(t - r0).segment(t + 1, r1 - 1 - t).setZero();
        }
        if (!packed_gemm(o + size_t(r0) * os, os, Pb.data(), T, 1, vp, nr, r1, hs, false))
          O.middleRows(r0, nr).noalias() = Pb.leftCols(r1) * V.topRows(r1);
      }
      if constexpr (!kFlash) {
        E* a = att + size_t(bh) * T * T;
        for (int t = 0; t < T; ++t) {
          const A* p = P + size_t(t) * T;
          E* at = a + size_t(t) * T;
          for (int t2 = 0; t2 <= t; ++t2) at[t2] = store<E>(p[t2]);
          for (int t2 = t + 1; t2 < T; ++t2) at[t2] = store<E>(A(0));
        }
      }
      if (!direct_f32<E>()) {
        E* dst = out + size_t(b) * T * C + size_t(h) * hs;
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < hs; ++i) dst[size_t(t) * C + i] = store<E>(O(t, i));
      }
    }
  }
}

template <typename E, bool kFlash>
void backward_impl(E* dqkv, const E* dout, const E* qkv, const E* att, const float* lse, int B, int T, int C,
                   int NH) {
  using A = acc_t<E>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
  const size_t ld = size_t(3) * C;
  const size_t prows = kFlash ? size_t(kRowBlock) : size_t(T);
#pragma omp parallel if (size_t(B) * NH * T * T * hs > kParallelMin)
  {
    const size_t th = size_t(T) * hs;
    A* base = head_scratch<A>().get(7 * th + 2 * prows * T);
    MatMap<A> Q(base, T, hs), K(base + th, T, hs), V(base + 2 * th, T, hs), dO(base + 3 * th, T, hs),
        dQ(base + 4 * th, T, hs), dK(base + 5 * th, T, hs), dV(base + 6 * th, T, hs);
    A* P = base + 7 * th;
    A* dP = P + prows * T;
    const size_t kt_floats = size_t(gemm_f32_packed_floats(hs, T)), kp_floats = size_t(gemm_f32_packed_floats(T, hs));
    float* packs = pack_space<A>(2 * kt_floats + kp_floats);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const E* src = qkv + size_t(b) * T * ld + size_t(h) * hs;
      E* dst = dqkv + size_t(b) * T * ld + size_t(h) * hs;
      // q, k, v rows (row stride qs), dO's (dos), and where dq, dk, dv accumulate (ds).
      const A *q = Q.data(), *k = K.data(), *v = V.data(), *dout_rows = dO.data();
      A *dq = dQ.data(), *dk = dK.data(), *dv = dV.data();
      size_t qs = size_t(hs), dos = size_t(hs), ds = size_t(hs);
      const bool direct = direct_f32<E>();
      if (direct) {
        q = reinterpret_cast<const A*>(src), k = q + C, v = q + 2 * C, qs = ld;
        dout_rows = reinterpret_cast<const A*>(dout + size_t(b) * T * C + size_t(h) * hs), dos = size_t(C);
        dq = reinterpret_cast<A*>(dst), dk = dq + C, dv = dq + 2 * C, ds = ld;
      } else {
        gather(Q.data(), src, ld, T, hs);
        gather(K.data(), src + C, ld, T, hs);
        gather(V.data(), src + 2 * C, ld, T, hs);
        gather(dO.data(), dout + size_t(b) * T * C + size_t(h) * hs, size_t(C), T, hs);
        dV.setZero();
        dK.setZero();
      }
      // K^T (hs, T) for the flash recompute, V^T (hs, T) for dP, K (T, hs) for dQ.
      const PackedB kt = kFlash ? pack_b(packs, k, 1, qs, hs, T) : PackedB{nullptr, 0, 0};
      const PackedB vt = pack_b(packs ? packs + kt_floats : nullptr, v, 1, qs, hs, T);
      const PackedB kp = pack_b(packs ? packs + 2 * kt_floats : nullptr, k, qs, 1, T, hs);
      if constexpr (!kFlash) {
        const E* a = att + size_t(bh) * T * T;
        for (int t = 0; t < T; ++t) {
          const E* at = a + size_t(t) * T;
          A* p = P + size_t(t) * T;
          // Row t's columns past t are zero in att; P keeps them zero up to the block edge.
          const int end = std::min(T, (t / kRowBlock + 1) * kRowBlock);
          for (int t2 = 0; t2 < end; ++t2) p[t2] = load(at[t2]);
        }
      }
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock), nr = r1 - r0;
        const size_t off = kFlash ? 0 : size_t(r0) * T;
        MatMap<A> Pm(P + off, nr, T), dPm(dP + off, nr, T);
        auto Pb = Pm.leftCols(r1);
        auto dPb = dPm.leftCols(r1);
        if constexpr (kFlash) {  // the block's probabilities again, from the saved lse
          if (!packed_gemm(Pm.data(), T, q + size_t(r0) * qs, qs, 1, kt, nr, hs, r1, false))
            Pb.noalias() = Q.middleRows(r0, nr) * K.topRows(r1).transpose();
          for (int t = r0; t < r1; ++t) {
            auto row = Pm.row(t - r0).head(t + 1).array();
            row = (row * scale - A(lse[size_t(bh) * T + t])).exp();
            Pm.row(t - r0).segment(t + 1, r1 - 1 - t).setZero();
          }
        }
        if (!packed_gemm(dPm.data(), T, dout_rows + size_t(r0) * dos, dos, 1, vt, nr, hs, r1, false))
          dPb.noalias() = dO.middleRows(r0, nr) * V.topRows(r1).transpose();
        if (!head_gemm(dv, ds, Pm.data(), 1, T, dout_rows + size_t(r0) * dos, dos, 1, r1, nr, hs, true))
          dV.topRows(r1).noalias() += Pb.transpose() * dO.middleRows(r0, nr);
        // dS overwrites dP; entries past the diagonal have P = 0 and so become 0.
        for (int i = 0; i < nr; ++i) {
          const A dot = Pm.row(i).head(r1).dot(dPm.row(i).head(r1));
          dPm.row(i).head(r1).array() = Pm.row(i).head(r1).array() * (dPm.row(i).head(r1).array() - dot) * scale;
        }
        // dq: one product per row block; accumulated straight into the (zeroed) dqkv when direct.
        if (!packed_gemm(dq + size_t(r0) * ds, ds, dPm.data(), T, 1, kp, nr, r1, hs, direct))
          dQ.middleRows(r0, nr).noalias() = dPb * K.topRows(r1);
        if (!head_gemm(dk, ds, dPm.data(), 1, T, q + size_t(r0) * qs, qs, 1, r1, nr, hs, true))
          dK.topRows(r1).noalias() += dPb.transpose() * Q.middleRows(r0, nr);
      }
      if (!direct) {
        scatter_add(dst, dQ.data(), ld, T, hs);
        scatter_add(dst + C, dK.data(), ld, T, hs);
        scatter_add(dst + 2 * C, dV.data(), ld, T, hs);
      }
    }
  }
}

}  // namespace

template <typename E>
void attention_forward(E* out, E* att, const E* qkv, int B, int T, int C, int NH) {
  forward_impl<E, false>(out, att, nullptr, qkv, B, T, C, NH);
}

template <typename E>
void attention_backward(E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C, int NH) {
  backward_impl<E, false>(dqkv, dout, qkv, att, nullptr, B, T, C, NH);
}

template <typename E>
void attention_forward_flash(E* out, float* lse, const E* qkv, int B, int T, int C, int NH) {
  forward_impl<E, true>(out, nullptr, lse, qkv, B, T, C, NH);
}

template <typename E>
void attention_backward_flash(E* dqkv, const E* dout, const E* qkv, const float* lse, int B, int T, int C,
                              int NH) {
  backward_impl<E, true>(dqkv, dout, qkv, nullptr, lse, B, T, C, NH);
}

#define RZ_INSTANTIATE(E)                                                                   \
  template void attention_forward<E>(E*, E*, const E*, int, int, int, int);               \
  template void attention_backward<E>(E*, const E*, const E*, const E*, int, int, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)
#define RZ_INSTANTIATE_FLASH(E)                                                                  \
  template void attention_forward_flash<E>(E*, float*, const E*, int, int, int, int);          \
  template void attention_backward_flash<E>(E*, const E*, const E*, const float*, int, int, int, int);
RZ_INSTANTIATE_FLASH(float)
RZ_INSTANTIATE_FLASH(bf16)

}  // namespace rz
