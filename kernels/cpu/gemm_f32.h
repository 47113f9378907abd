// kernels/cpu/gemm_f32.h: ringzero's own packed fp32 GEMM for x86 CPUs with AVX2 + FMA.
//
// One product shape, as in matmul_onednn.h: dst (M, N) [+]= a (M, K) * b (K, N) [+ bias],
// every operand addressed by a row and a column stride, so the three products of a linear
// layer (forward, dinput, dweight) and their transposes need no copies of their own.
// The operands are packed into panels (6 rows of a, 16 columns of b, zero-padded at the
// edges) sized for L1 and L2, and a 6x16 AVX2 FMA register block computes each tile.
//
// Numerics: every element of dst is one fused multiply-add chain in k order,
//   acc = start;  for k = 0..K-1: acc = fma(a(i,k), b(k,j), acc);  dst(i,j) = acc,
// with start = dst's old value (accumulate), else bias(j) (bias given), else 0. The result
// is therefore bitwise independent of the blocking, of the tile an element falls in, of
// alignment and of the OpenMP thread count (threads split dst's rows, never K), and a
// scalar loop with std::fma reproduces it exactly (tests/test_kernels_gemm.cpp does).
// Legend: M rows of dst, K the contracted dimension, N columns of dst.
#pragma once

#include <cstdint>

namespace rz {

// One strided fp32 operand: element (i, j) at data[i * row_stride + j * col_stride].
struct GemmOperand {
  const float* data;
  int64_t row_stride, col_stride;
};

// True when this CPU has AVX2 and FMA (checked once, at run time, so a build without
// -march=native still uses the kernel) and RINGZERO_FP32_GEMM is not "eigen".
bool gemm_f32_available();

// dst (M, N) row-major with leading dimension ldd; bias (N) or null (ignored when
// accumulate). Must only be called when gemm_f32_available(). dst must not overlap a or b.
void gemm_f32(float* dst, int64_t ldd, GemmOperand a, GemmOperand b, const float* bias, int64_t M, int64_t K,
              int64_t N, bool accumulate);

// b packed once for several products that use its top-left corner (attention's K^T, V
// and K, once per head instead of once per row block): 16-column panels, zero-padded,
// panel q at data + q * 16 * K, its k steps 16 floats apart.
struct PackedB {
  const float* data;
  int64_t K, N;  // the packed extent
};
// Floats of packing space for a (K, N) b.
int64_t gemm_f32_packed_floats(int64_t K, int64_t N);
// Packs b (K, N) into space (gemm_f32_packed_floats(K, N) floats). gemm_f32_available() only.
PackedB gemm_f32_pack_b(float* space, GemmOperand b, int64_t K, int64_t N);
// gemm_f32 without bias, b being the top-left (K, N) of the packed b (K <= b.K, N <= b.N):
// bitwise what gemm_f32 computes with that b, one FMA chain per element. One thread: for
// products inside a parallel region.
void gemm_f32_packed(float* dst, int64_t ldd, GemmOperand a, const PackedB& b, int64_t M, int64_t K, int64_t N,
                     bool accumulate);

}  // namespace rz
