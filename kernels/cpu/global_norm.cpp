// kernels/cpu/global_norm.cpp
#include "kernels/cpu/global_norm.h"

namespace rz {

namespace {
template <typename E, typename Load>
double sum_squares_lanes(const E* x, size_t n, Load load) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      double d = load(x[i + j]);
      lane[j] += d * d;
    }
  for (int j = 0; i < n; ++i, ++j) {
    double d = load(x[i]);
    lane[j] += d * d;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace

double sum_squares(const float* x, size_t n) {
  return sum_squares_lanes(x, n, [](float v) { return v; });
}

double sum_squares(const bf16* x, size_t n) {
  return sum_squares_lanes(x, n, [](bf16 v) { return bf16_to_float(v); });
}

}  // namespace rz
