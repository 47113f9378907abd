// tests/cuemu/include/cuda_bf16.h: __nv_bfloat16 for the CUDA-on-CPU emulator
// (tests/cuemu/README.md): a 2-byte storage type and the conversions ringzero's kernels
// call. No arithmetic operators: a kernel that needs one fails to compile here, and the
// stand-in grows it then.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
};
static_assert(sizeof(__nv_bfloat16) == 2, "__nv_bfloat16 is 2 bytes");
typedef __nv_bfloat16 nv_bfloat16;

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = uint32_t(h.__x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return __nv_bfloat16{bits}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
// Round to nearest even; NaN becomes the canonical quiet NaN, as CUDA's intrinsic does.
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fff};
  return __nv_bfloat16{static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
