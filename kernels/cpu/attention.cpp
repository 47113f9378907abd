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
// Grouped-query attention (NKV < NH): query head h reads kv head h / G, G = NH / NKV, in
// place (row stride C + 2*NKV*hs); nothing is copied per query head. The forward splits
// (b, h) pairs over threads and keeps a kv head's packed K^T and V while consecutive
// pairs of a thread share it. The backward splits (b, kv head) groups instead: the G
// query heads of a group run one after the other in h order and add into the group's dk
// and dv, so those sums have one fixed order and no two threads write them. With NKV = NH
// (G = 1) both are exactly the per-(b, h) computation of multi-head attention.
//
// In fp32 on the packed kernel the products read q, k, v and dout where they lie (row
// stride of qkv or C: gemm_f32 takes any strides) and write out, and accumulate dq, dk, dv,
// straight into dqkv: no per-head gather, scatter or zeroing. The values do not change:
// every element of a gemm_f32 product is the same FMA chain whatever the strides, and an
// accumulation into the zeroed dqkv the model hands in equals the product plus zero.
// Elsewhere (bf16, fp64, no AVX2) the head is gathered into contiguous scratch first, and
// a group's dk and dv are summed over its G heads in the compute type and added to dqkv
// (rounded) once.
//
// Threads own disjoint columns of out / dqkv and their own (T, T) slabs of att, so there
// are no races and the order of additions does not depend on the thread count. Eigen runs
// single-threaded inside the parallel region. bf16 is widened into the fp32 scratch on
// gather and rounded once on scatter.
#include "kernels/cpu/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "base/check.h"
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

// Where a (b, kv group)'s operands lie in qkv (B, T, ld): row stride ld = C + 2*NKV*hs,
// q of query head h at column h*hs, k of kv head g at C + g*hs, v at C + (NKV + g)*hs.
struct QkvLayout {
  int hs, G;
  size_t ld, k_col, v_col;
  QkvLayout(int C, int NH, int NKV)
      : hs(C / NH), G(NH / NKV), ld(size_t(C) + 2 * size_t(NKV) * (C / NH)), k_col(size_t(C)),
        v_col(size_t(C) + size_t(NKV) * (C / NH)) {}
};

// One implementation for both paths. The materialised path keeps a (T, T) probability
// matrix per thread and copies it into att (saved for backward); the flash path keeps
// only a (kRowBlock, T) block, saves each row's log-sum-exp and, in backward, recomputes
// the block's probabilities from it. Row block [r0, r1) needs keys [0, r1) only, so a
// block holds every probability of its rows. Both run the same products on the same
// layouts (row stride T), so the forward outputs are bitwise equal.
template <typename E, bool kFlash>
void forward_impl(E* out, E* att, float* lse, const E* qkv, int B, int T, int C, int NH, int NKV) {
  using A = acc_t<E>;
  const QkvLayout L(C, NH, NKV);
  const int hs = L.hs;
  const A scale = A(1) / std::sqrt(A(hs));
  const size_t ld = L.ld;
  const size_t prows = kFlash ? size_t(kRowBlock) : size_t(T);
#pragma omp parallel if (size_t(B) * NH * T * T * hs > kParallelMin)
  {
    const size_t th = size_t(T) * hs;
    A* base = head_scratch<A>().get(4 * th + prows * T);
    MatMap<A> Q(base, T, hs), K(base + th, T, hs), V(base + 2 * th, T, hs), O(base + 3 * th, T, hs);
    A* P = base + 4 * th;
    const size_t kt_floats = size_t(gemm_f32_packed_floats(hs, T));
    float* packs = pack_space<A>(kt_floats + size_t(gemm_f32_packed_floats(T, hs)));
    PackedB kt{nullptr, 0, 0}, vp{nullptr, 0, 0};
    int64_t kv_ready = -1;  // the (b, kv head) whose K, V (gathered or packed) this thread holds
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH, g = h / L.G;
      const E* row0 = qkv + size_t(b) * T * ld;
      const E* src_q = row0 + size_t(h) * hs;
      const E* src_k = row0 + L.k_col + size_t(g) * hs;
      const E* src_v = row0 + L.v_col + size_t(g) * hs;
      const int64_t kv_key = int64_t(b) * NKV + g;
      // q, k, v rows (row strides qs, kvs) and where O's rows go (row stride os).
      const A *q = Q.data(), *k = K.data(), *v = V.data();
      A* o = O.data();
      size_t qs = size_t(hs), kvs = size_t(hs), os = size_t(hs);
      if (direct_f32<E>()) {
        q = reinterpret_cast<const A*>(src_q), k = reinterpret_cast<const A*>(src_k);
        v = reinterpret_cast<const A*>(src_v), qs = kvs = ld;
        o = reinterpret_cast<A*>(out + size_t(b) * T * C + size_t(h) * hs), os = size_t(C);
      } else {
        gather(Q.data(), src_q, ld, T, hs);
        if (kv_key != kv_ready) {
          gather(K.data(), src_k, ld, T, hs);
          gather(V.data(), src_v, ld, T, hs);
        }
      }
      if (kv_key != kv_ready) {
        kt = pack_b(packs, k, 1, kvs, hs, T);                                  // K^T (hs, T)
        vp = pack_b(packs ? packs + kt_floats : nullptr, v, kvs, 1, T, hs);    // V (T, hs)
        kv_ready = kv_key;
      }
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
                   int NH, int NKV) {
  using A = acc_t<E>;
  const QkvLayout L(C, NH, NKV);
  const int hs = L.hs;
  const A scale = A(1) / std::sqrt(A(hs));
  const size_t ld = L.ld;
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
    for (int bg = 0; bg < B * NKV; ++bg) {
      const int b = bg / NKV, g = bg % NKV;
      const E* row0 = qkv + size_t(b) * T * ld;
      E* drow0 = dqkv + size_t(b) * T * ld;
      const E* src_k = row0 + L.k_col + size_t(g) * hs;
      const E* src_v = row0 + L.v_col + size_t(g) * hs;
      // k, v rows (row stride kvs) and where dk, dv accumulate (dkvs).
      const A *k = K.data(), *v = V.data();
      A *dk = dK.data(), *dv = dV.data();
      size_t kvs = size_t(hs), dkvs = size_t(hs);
      const bool direct = direct_f32<E>();
      if (direct) {
        k = reinterpret_cast<const A*>(src_k), v = reinterpret_cast<const A*>(src_v), kvs = ld;
        dk = reinterpret_cast<A*>(drow0 + L.k_col + size_t(g) * hs);
        dv = reinterpret_cast<A*>(drow0 + L.v_col + size_t(g) * hs), dkvs = ld;
      } else {
        gather(K.data(), src_k, ld, T, hs);
        gather(V.data(), src_v, ld, T, hs);
        dV.setZero();
        dK.setZero();
      }
      // K^T (hs, T) for the flash recompute, V^T (hs, T) for dP, K (T, hs) for dQ: once per group.
      const PackedB kt = kFlash ? pack_b(packs, k, 1, kvs, hs, T) : PackedB{nullptr, 0, 0};
      const PackedB vt = pack_b(packs ? packs + kt_floats : nullptr, v, 1, kvs, hs, T);
      const PackedB kp = pack_b(packs ? packs + 2 * kt_floats : nullptr, k, kvs, 1, T, hs);
      for (int h = g * L.G; h < (g + 1) * L.G; ++h) {
        const int bh = b * NH + h;
        const E* src_q = row0 + size_t(h) * hs;
        const E* src_dout = dout + size_t(b) * T * C + size_t(h) * hs;
        // q rows (row stride qs), dO's (dos), and where dq accumulates (dqs).
        const A *q = Q.data(), *dout_rows = dO.data();
        A* dq = dQ.data();
        size_t qs = size_t(hs), dos = size_t(hs), dqs = size_t(hs);
        if (direct) {
          q = reinterpret_cast<const A*>(src_q), qs = ld;
          dout_rows = reinterpret_cast<const A*>(src_dout), dos = size_t(C);
          dq = reinterpret_cast<A*>(drow0 + size_t(h) * hs), dqs = ld;
        } else {
          gather(Q.data(), src_q, ld, T, hs);
          gather(dO.data(), src_dout, size_t(C), T, hs);
        }
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
          if (!head_gemm(dv, dkvs, Pm.data(), 1, T, dout_rows + size_t(r0) * dos, dos, 1, r1, nr, hs, true))
            dV.topRows(r1).noalias() += Pb.transpose() * dO.middleRows(r0, nr);
          // dS overwrites dP; entries past the diagonal have P = 0 and so become 0.
          for (int i = 0; i < nr; ++i) {
            const A dot = Pm.row(i).head(r1).dot(dPm.row(i).head(r1));
            dPm.row(i).head(r1).array() = Pm.row(i).head(r1).array() * (dPm.row(i).head(r1).array() - dot) * scale;
          }
          // dq: one product per row block; accumulated straight into the (zeroed) dqkv when direct.
          if (!packed_gemm(dq + size_t(r0) * dqs, dqs, dPm.data(), T, 1, kp, nr, r1, hs, direct))
            dQ.middleRows(r0, nr).noalias() = dPb * K.topRows(r1);
          if (!head_gemm(dk, dkvs, dPm.data(), 1, T, q + size_t(r0) * qs, qs, 1, r1, nr, hs, true))
            dK.topRows(r1).noalias() += dPb.transpose() * Q.middleRows(r0, nr);
        }
        if (!direct) scatter_add(drow0 + size_t(h) * hs, dQ.data(), ld, T, hs);
      }
      if (!direct) {
        scatter_add(drow0 + L.k_col + size_t(g) * hs, dK.data(), ld, T, hs);
        scatter_add(drow0 + L.v_col + size_t(g) * hs, dV.data(), ld, T, hs);
      }
    }
  }
}

}  // namespace

void check_attention_shape(const char* op, int B, int T, int C, int NH, int NKV) {
  RZ_CHECK(B >= 0 && T >= 0 && NH >= 1 && C >= NH && C % NH == 0,
           "%s: C=%d channels must be a positive multiple of NH=%d heads (B=%d, T=%d)", op, C, NH, B, T);
  RZ_CHECK(NKV >= 1 && NKV <= NH && NH % NKV == 0, "%s: the %d key/value heads must divide the %d query heads", op, NKV,
           NH);
}

template <typename E>
void attention_forward(E* out, E* att, const E* qkv, int B, int T, int C, int NH, int NKV) {
  check_attention_shape("attention_forward", B, T, C, NH, NKV);
  forward_impl<E, false>(out, att, nullptr, qkv, B, T, C, NH, NKV);
}

template <typename E>
void attention_backward(E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C, int NH, int NKV) {
  check_attention_shape("attention_backward", B, T, C, NH, NKV);
  backward_impl<E, false>(dqkv, dout, qkv, att, nullptr, B, T, C, NH, NKV);
}

template <typename E>
void attention_forward_flash(E* out, float* lse, const E* qkv, int B, int T, int C, int NH, int NKV) {
  check_attention_shape("attention_forward_flash", B, T, C, NH, NKV);
  forward_impl<E, true>(out, nullptr, lse, qkv, B, T, C, NH, NKV);
}

template <typename E>
void attention_backward_flash(E* dqkv, const E* dout, const E* qkv, const float* lse, int B, int T, int C, int NH,
                              int NKV) {
  check_attention_shape("attention_backward_flash", B, T, C, NH, NKV);
  backward_impl<E, true>(dqkv, dout, qkv, nullptr, lse, B, T, C, NH, NKV);
}

#define RZ_INSTANTIATE(E)                                                                   \
  template void attention_forward<E>(E*, E*, const E*, int, int, int, int, int);               \
  template void attention_backward<E>(E*, const E*, const E*, const E*, int, int, int, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)
#define RZ_INSTANTIATE_FLASH(E)                                                                  \
  template void attention_forward_flash<E>(E*, float*, const E*, int, int, int, int, int);          \
  template void attention_backward_flash<E>(E*, const E*, const E*, const float*, int, int, int, int, int);
RZ_INSTANTIATE_FLASH(float)
RZ_INSTANTIATE_FLASH(bf16)
RZ_INSTANTIATE_FLASH(double)  // the finite-difference tests (lse stays fp32)

}  // namespace rz
