// base/bf16.h: bfloat16 as a storage type.
//
// bf16 keeps fp32's 8 exponent bits and the top 7 mantissa bits. On the CPU it is only
// a storage format: kernels convert to fp32, compute, and round back. Rounding is
// round-to-nearest-even (what PyTorch and CUDA's __float2bfloat16 do); NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace rz {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2);

inline float bf16_to_float(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}

}  // namespace rz
