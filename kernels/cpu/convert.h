// kernels/cpu/convert.h: element types of the CPU kernels and bf16 <-> fp32 conversion.
//
// Every CPU kernel is a template over its storage type T:
//   float  - fp32 mode;
//   bf16   - bf16 mode: stored as bf16, loaded into fp32, computed in fp32, rounded back
//            (round-to-nearest-even) on store;
//   double - the test path: the same code in fp64, so backward can be checked against
//            central finite differences with errors far below fp32's.
// acc_t<T> is the compute type (fp32 for float and bf16, fp64 for double). Per-row
// statistics (layernorm mean/rstd, losses) are stored in acc_t<T>.
#pragma once

#include <cstddef>
#include <type_traits>

#include "base/bf16.h"

namespace rz {

template <typename T>
struct AccType {
  using type = float;
};
template <>
struct AccType<double> {
  using type = double;
};
template <typename T>
using acc_t = typename AccType<T>::type;

inline float load(float x) { return x; }
inline double load(double x) { return x; }
inline float load(bf16 x) { return bf16_to_float(x); }

template <typename T>
inline T store(acc_t<T> x) {
  if constexpr (std::is_same_v<T, bf16>)
    return float_to_bf16(x);
  else
    return x;
}

// Loops with less work than this (elements) stay on one thread: a parallel region costs
// microseconds, and far more when the cores are shared with other processes.
constexpr size_t kParallelMin = 1 << 15;

// Bulk conversions, OpenMP over n. out may not alias in.
void bf16_to_f32(float* out, const bf16* in, size_t n);
void f32_to_bf16(bf16* out, const float* in, size_t n);  // rounds to nearest even
// out[i] = round(out[i] + in[i]): accumulate an fp32 result into bf16 storage.
void bf16_add_f32(bf16* out, const float* in, size_t n);

}  // namespace rz
