// kernels/cpu/matmul_onednn.h: bf16 matmuls on the CPU's bf16 units through oneDNN.
//
// On CPUs with AVX512_BF16 or AMX-BF16, bf16 mode's linear layers multiply bf16 operands
// with fp32 accumulation here instead of widening them into fp32 copies for Eigen. One
// product shape: dst (M, N) [+]= a (M, K) * b (K, N), every operand addressed by a row and
// a column stride, so the three products of a linear layer (and their transposes) need no
// copies. With accumulate, dst = round(dst + a*b) with the sum taken in fp32.
// Legend: M rows of dst, K the contracted dimension, N columns of dst.
#pragma once

#include <cstdint>
#include <string>

namespace rz {

// True when bf16 matmuls can run on bf16 hardware here: oneDNN was built in, the CPU has
// AVX512_BF16 or AMX-BF16, and RINGZERO_BF16_MATMUL is not "fp32". Prints nothing: a
// query (`ringzero memory --json` plans with it, and its output must stay JSON).
bool onednn_bf16_matmul_available();

// Called by a bf16 matmul that widens its operands to fp32: the first call in a process
// prints one notice saying so and why (no bf16 units, or no oneDNN in the build), unless
// RINGZERO_BF16_MATMUL=fp32 asked for it. Thread-safe (std::call_once).
void note_bf16_matmul_fallback();

// One phrase for reports and tests: "on: oneDNN 3.2.0", or "off: " and why (no oneDNN in
// the build, no bf16 units, RINGZERO_BF16_MATMUL=fp32). Prints nothing.
std::string onednn_bf16_matmul_status();

// One strided operand: element (i, j) at data[i * row_stride + j * col_stride].
struct StridedOperand {
  const void* data;
  int64_t row_stride, col_stride;
};

// dst (M, N) row-major with leading dimension ldd; bias (N) or null, added once.
// elem_bf16: operands and dst are bf16 (base/bf16.h); false: fp32, which the tests use to
// check the strides and accumulation on any CPU. Returns false (and computes nothing)
// when oneDNN cannot run this product here. Safe to call from many threads at once: each
// calling thread has its own primitives, stream and scratchpad (matmul_onednn.cpp).
bool onednn_matmul(void* dst, int64_t ldd, StridedOperand a, StridedOperand b, const void* bias, int64_t M,
                   int64_t K, int64_t N, bool accumulate, bool elem_bf16);

}  // namespace rz
