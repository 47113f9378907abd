// kernels/cpu/convert.cpp: bulk bf16 <-> fp32 conversion.
#include "kernels/cpu/convert.h"

#include <cstdint>

namespace rz {

void bf16_to_f32(float* out, const bf16* in, size_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < int64_t(n); ++i) out[i] = bf16_to_float(in[i]);
}

void f32_to_bf16(bf16* out, const float* in, size_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < int64_t(n); ++i) out[i] = float_to_bf16(in[i]);
}

void bf16_add_f32(bf16* out, const float* in, size_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < int64_t(n); ++i) out[i] = float_to_bf16(bf16_to_float(out[i]) + in[i]);
}

}  // namespace rz
