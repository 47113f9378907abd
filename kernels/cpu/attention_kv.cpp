// kernels/cpu/attention_kv.cpp
//
// One (b, i, h) row at a time, two matrix-vector products on Eigen maps of the cache:
//   s = K q * scale   (K: the kv head's rows 0 .. pos+i, row stride NKV*hs)
//   p = softmax(s)    (max subtracted, exp, divided by the sum: attention.cpp's order)
//   o = V^T p
// fp32 reads the cache where it lies; bf16 widens the head's rows into per-thread fp32
// scratch first. Threads split rows; a row's arithmetic does not depend on which thread
// runs it.
#include "kernels/cpu/attention_kv.h"

#include <Eigen/Core>
#include <cmath>

#include "base/check.h"
#include "base/memory.h"
#include "kernels/cpu/convert.h"

namespace rz {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;  // rows of a strided buffer
using Vec = Eigen::Matrix<float, Eigen::Dynamic, 1>;

// Per-thread fp32 scratch: the scores and, for bf16, the head's widened k and v rows.
struct KvScratch {
  Buffer<float> buf;
  float* get(size_t n) {
    if (buf.size() < n) buf.allocate(MemTag::workspace, n);
    return buf.data();
  }
};
thread_local KvScratch t_kv_scratch;

// rows (n, hs) of the kv head starting at src with row stride ld, as fp32 rows.
template <typename E>
Rows head_rows(const E* src, int64_t ld, int n, int hs, float* scratch) {
  if constexpr (std::is_same_v<E, float>) {
    (void)scratch;
    return Rows(src, n, hs, Eigen::OuterStride<>(ld));
  } else {
    for (int j = 0; j < n; ++j)
      for (int d = 0; d < hs; ++d) scratch[size_t(j) * hs + d] = load(src[size_t(j) * ld + d]);
    return Rows(scratch, n, hs, Eigen::OuterStride<>(hs));
  }
}

}  // namespace

void check_attention_kv_shape(int B, int Tq, int pos, int Tc, int NH, int NKV, int hs) {
  RZ_CHECK(B >= 1 && Tq >= 1 && Tc >= 1 && hs >= 1, "attention_forward_kv: sizes must be positive, found B=%d Tq=%d "
           "Tc=%d hs=%d", B, Tq, Tc, hs);
  RZ_CHECK(NKV >= 1 && NH >= NKV && NH % NKV == 0,
           "attention_forward_kv: the %d key/value heads must divide the %d query heads", NKV, NH);
  RZ_CHECK(pos >= 0 && pos <= Tc - Tq, "attention_forward_kv: positions %d .. %d lie outside the cache's %d rows", pos,
           pos + Tq - 1, Tc);
}

template <typename E>
void attention_forward_kv(E* out, const E* q, const E* k_cache, const E* v_cache, int B, int Tq, int pos, int Tc,
                          int NH, int NKV, int hs) {
  check_attention_kv_shape(B, Tq, pos, Tc, NH, NKV, hs);
  const int group = NH / NKV;
  const int64_t qld = int64_t(NH) * hs, kld = int64_t(NKV) * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  const int64_t rows = int64_t(B) * Tq * NH;
  const size_t work = size_t(rows) * size_t(pos + Tq) * size_t(hs);
  const bool widen = !std::is_same_v<E, float>;
#pragma omp parallel for schedule(static) if (work > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int h = int(r % NH), i = int(r / NH % Tq), b = int(r / NH / Tq);
    const int n = pos + i + 1;  // keys 0 .. pos + i
    const size_t kv_off = size_t(b) * Tc * kld + size_t(h / group) * hs;
    // This thread's scratch: q and o (hs each), the scores (n), and for bf16 the widened
    // k and v rows (n, hs) each.
    float* qf = t_kv_scratch.get(2 * size_t(hs) + size_t(n) * (widen ? 2 * size_t(hs) + 1 : 1));
    float* of = qf + hs;
    float* s = of + hs;
    float* kw = s + n;
    float* vw = kw + size_t(n) * hs;
    const E* qrow = q + (size_t(b) * Tq + i) * qld + size_t(h) * hs;
    for (int d = 0; d < hs; ++d) qf[d] = load(qrow[d]);
    Eigen::Map<Vec> scores(s, n);
    scores.noalias() = head_rows(k_cache + kv_off, kld, n, hs, kw) * Eigen::Map<const Vec>(qf, hs);
    scores *= scale;
    const float maxv = scores.maxCoeff();
    scores = (scores.array() - maxv).exp().matrix();
    scores *= 1.0f / scores.sum();
    Eigen::Map<Vec>(of, hs).noalias() = head_rows(v_cache + kv_off, kld, n, hs, vw).transpose() * scores;
    E* orow = out + (size_t(b) * Tq + i) * qld + size_t(h) * hs;
    for (int d = 0; d < hs; ++d) orow[d] = store<E>(of[d]);
  }
}

template void attention_forward_kv<float>(float*, const float*, const float*, const float*, int, int, int, int, int,
                                          int, int);
template void attention_forward_kv<bf16>(bf16*, const bf16*, const bf16*, const bf16*, int, int, int, int, int, int,
                                         int);

}  // namespace rz
