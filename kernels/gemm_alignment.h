// kernels/gemm_alignment.h: the operand alignment a GEMM is planned for, as a function of
// the shape alone (host code; the CUDA backend's cuBLASLt calls use it, and any backend or
// test may check operands with it).
//
// Why: cuBLASLt's heuristic picks an algorithm for the alignment it is told each operand
// has (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), and different algorithms sum in
// different orders. Measuring the alignment from the pointers would let two buffers that
// hold the same numbers at different addresses (ddp's gradient buffer and a zero2 staging
// bucket) take different algorithms and give different bits. So the alignment told is
// fixed by the shape: the largest power of two, at most kGemmAlignBytes, that divides the
// leading dimension and (for a batch) the batch stride in bytes; and every operand pointer
// must be a multiple of it, which check_gemm_operand enforces at the call.
//
// What guarantees it in ringzero: every tensor offset of the flat parameter layout is a
// multiple of C elements (every tensor's size is), the activations are carved at 64-byte
// boundaries (model/gpt2.cpp), device buffers come from cudaMalloc (256 bytes), and every
// gradient bucket starts 16-byte aligned in ddp's padded buffer as it does in a zero2
// staging buffer (zero/buckets.h kBucketAlignBytes). For the usual shapes (C a multiple of
// 8, head size a multiple of 8) every operand is told 16 bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/check.h"

namespace rz {

constexpr uint32_t kGemmAlignBytes = 16;

// ld, stride: in elements of elem_bytes each; stride counts only when batch > 1.
inline uint32_t gemm_operand_alignment(long long ld, long long stride, int batch, size_t elem_bytes) {
  uint64_t bits = uint64_t(ld) * elem_bytes | kGemmAlignBytes;
  if (batch > 1) bits |= uint64_t(stride) * elem_bytes;
  return uint32_t(bits & (~bits + 1));  // lowest set bit
}

// Fails with one line naming the op and the operand unless p is a multiple of align.
inline void check_gemm_operand(const char* op, const char* operand, const void* p, uint32_t align) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  RZ_CHECK(a % align == 0,
           "%s: operand %s at %p is not %u-byte aligned, the alignment its shape plans the GEMM for "
           "(kernels/gemm_alignment.h); a buffer or offset was placed off the 16-byte grid",
           op, operand, p, unsigned(align));
}

}  // namespace rz
