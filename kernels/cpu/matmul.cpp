// kernels/cpu/matmul.cpp
//
// All three products of a linear layer go to a GEMM on the flat row-major buffers, no
// copies: in fp32 ringzero's own packed AVX2 kernel (gemm_f32.h) where the CPU has AVX2 +
// FMA, else (and in fp64, or with RINGZERO_FP32_GEMM=eigen) Eigen on row-major maps:
//   forward   out (N,OC)    = inp (N,C) * weight^T        (weight is (OC,C) row-major)
//   backward  dinp (N,C)   += dout (N,OC) * weight (OC,C)
//             dweight (OC,C) += dout^T (OC,N) * inp (N,C)
// Both parallelise the GEMM itself with OpenMP, over dst's rows or columns (never K). bf16 is a storage format on the CPU:
// operands are widened into per-thread fp32 scratch (grown once, then reused: no
// allocation per step), multiplied in fp32 (the packed kernel where the CPU has it, as in
// fp32), and the result rounded back (RNE) once --
// unless the CPU has bf16 units (AVX512_BF16 / AMX): then the products run in bf16 with
// fp32 accumulation through oneDNN (matmul_onednn.h), straight on the bf16 buffers.
#include "kernels/cpu/matmul.h"

#include <Eigen/Core>
#include <cstring>
#include <vector>

#include "base/memory.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/matmul_onednn.h"

namespace rz {

namespace {

template <typename S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using RowVec = Eigen::Matrix<S, 1, Eigen::Dynamic>;

// Dense kernels on compute-type pointers (float or double).
// fp32 goes to ringzero's own packed AVX2 kernel where the CPU has it (gemm_f32.h: about
// 1.4x Eigen's GFLOP/s at these shapes on a Zen 3 core); RINGZERO_FP32_GEMM=eigen, a CPU
// without AVX2 + FMA, and fp64 use Eigen.
template <typename S>
void gemm_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC) {
  if constexpr (std::is_same_v<S, float>) {
    if (gemm_f32_available()) {
      gemm_f32(out, OC, {inp, C, 1}, {weight, 1, C}, bias, N, C, OC, false);
      return;
    }
  }
  Eigen::Map<RowMat<S>> o(out, N, OC);
  Eigen::Map<const RowMat<S>> x(inp, N, C), w(weight, OC, C);
  if (bias) {
    o.rowwise() = Eigen::Map<const RowVec<S>>(bias, OC);
    o.noalias() += x * w.transpose();
  } else {
    o.noalias() = x * w.transpose();
  }
}

template <typename S>
void gemm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                   int N, int C, int OC) {
  Eigen::Map<const RowMat<S>> d(dout, N, OC), x(inp, N, C), w(weight, OC, C);
  bool done = false;
  if constexpr (std::is_same_v<S, float>) {
    if (gemm_f32_available()) {
      if (dinp) gemm_f32(dinp, C, {dout, OC, 1}, {weight, C, 1}, nullptr, N, OC, C, true);
      gemm_f32(dweight, C, {dout, 1, OC}, {inp, C, 1}, nullptr, OC, N, C, true);
      done = true;
    }
  }
  if (!done) {
    if (dinp) Eigen::Map<RowMat<S>>(dinp, N, C).noalias() += d * w;
    Eigen::Map<RowMat<S>>(dweight, OC, C).noalias() += d.transpose() * x;
  }
  if (dbias) {
    // Column sums of dout, row by row: a fixed order, vectorised across OC.
    Eigen::Map<RowVec<S>> db(dbias, OC);
    for (int n = 0; n < N; ++n) db += d.row(n);
  }
}

// Per-thread fp32 scratch for bf16 operands, grown on demand and kept.
struct Scratch {
  Buffer<float> buf[6];
  float* get(int i, size_t n) {
    if (buf[i].size() < n) buf[i].allocate(MemTag::workspace, n);
    return buf[i].data();
  }
};
thread_local Scratch t_scratch;

}  // namespace

template <typename E>
void matmul_forward(E* out, const E* inp, const E* weight, const E* bias, int N, int C, int OC) {
  if constexpr (std::is_same_v<E, bf16>) {
    // out (N,OC) = inp (N,C) * weight^T: weight^T (C,OC) is weight with swapped strides.
    if (onednn_bf16_matmul_available() &&
        onednn_matmul(out, OC, {inp, C, 1}, {weight, 1, C}, bias, N, C, OC, false, true))
      return;
    note_bf16_matmul_fallback();
    Scratch& s = t_scratch;
    float* x = s.get(0, size_t(N) * C);
    float* w = s.get(1, size_t(OC) * C);
    float* o = s.get(2, size_t(N) * OC);
    float* b = bias ? s.get(3, OC) : nullptr;
    bf16_to_f32(x, inp, size_t(N) * C);
    bf16_to_f32(w, weight, size_t(OC) * C);
    if (b) bf16_to_f32(b, bias, OC);
    gemm_forward<float>(o, x, w, b, N, C, OC);
    f32_to_bf16(out, o, size_t(N) * OC);
  } else {
    gemm_forward<E>(out, inp, weight, bias, N, C, OC);
  }
}

template <typename E>
void matmul_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                     int N, int C, int OC) {
  if constexpr (std::is_same_v<E, bf16>) {
    // dinp (N,C) += dout (N,OC) * weight (OC,C);  dweight (OC,C) += dout^T (OC,N) * inp (N,C),
    // dout^T being dout with swapped strides. Each product falls back to fp32 on its own.
    const bool bf16_units = onednn_bf16_matmul_available();
    const bool dinp_done =
        dinp && bf16_units && onednn_matmul(dinp, C, {dout, OC, 1}, {weight, C, 1}, nullptr, N, OC, C, true, true);
    const bool dweight_done =
        bf16_units && onednn_matmul(dweight, C, {dout, 1, OC}, {inp, C, 1}, nullptr, OC, N, C, true, true);
    if (!bf16_units) note_bf16_matmul_fallback();
    Scratch& s = t_scratch;
    // dout in fp32 only for a product that falls back (oneDNN took both where the CPU
    // has bf16 units; widening all of dout for the bias alone was a pass over N x OC).
    float* d = nullptr;
    if ((dinp && !dinp_done) || !dweight_done) {
      d = s.get(0, size_t(N) * OC);
      bf16_to_f32(d, dout, size_t(N) * OC);
    }
    if (dinp && !dinp_done) {
      float* w = s.get(2, size_t(OC) * C);
      float* dx = s.get(3, size_t(N) * C);
      bf16_to_f32(w, weight, size_t(OC) * C);
      if (gemm_f32_available())
        gemm_f32(dx, C, {d, OC, 1}, {w, C, 1}, nullptr, N, OC, C, false);
      else
        Eigen::Map<RowMat<float>>(dx, N, C).noalias() =
            Eigen::Map<const RowMat<float>>(d, N, OC) * Eigen::Map<const RowMat<float>>(w, OC, C);
      bf16_add_f32(dinp, dx, size_t(N) * C);
    }
    if (!dweight_done) {
      float* x = s.get(1, size_t(N) * C);
      float* dw = s.get(2, size_t(OC) * C);
      bf16_to_f32(x, inp, size_t(N) * C);
      if (gemm_f32_available())
        gemm_f32(dw, C, {d, 1, OC}, {x, C, 1}, nullptr, OC, N, C, false);
      else
        Eigen::Map<RowMat<float>>(dw, OC, C).noalias() =
            Eigen::Map<const RowMat<float>>(d, N, OC).transpose() * Eigen::Map<const RowMat<float>>(x, N, C);
      bf16_add_f32(dweight, dw, size_t(OC) * C);
    }
    if (dbias) {
      // Column sums of dout in fp32, rows in order, each row widened into a row buffer
      // (one path whether or not dout was widened above).
      float* db = s.get(4, OC);
      float* row = s.get(5, OC);
      std::memset(db, 0, sizeof(float) * OC);
      Eigen::Map<RowVec<float>> dbv(db, OC);
      for (int n = 0; n < N; ++n) {
        for (int j = 0; j < OC; ++j) row[j] = bf16_to_float(dout[size_t(n) * OC + j]);
        dbv += Eigen::Map<const RowVec<float>>(row, OC);
      }
      bf16_add_f32(dbias, db, OC);
    }
  } else {
    gemm_backward<E>(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
}

#define RZ_INSTANTIATE(E)                                                                        \
  template void matmul_forward<E>(E*, const E*, const E*, const E*, int, int, int);            \
  template void matmul_backward<E>(E*, E*, E*, const E*, const E*, const E*, int, int, int);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16)
RZ_INSTANTIATE(double)

}  // namespace rz
