// kernels/cpu/global_norm.h: sum of squares of a gradient range, for global-norm clipping.
//
// The result is bitwise reproducible for the same (x, n): eight fp64 lanes take elements
// i % 8 in index order, and the lanes are added in a fixed tree at the end. No threads,
// so the sum never depends on the thread count. zero/ sums these partials over buckets
// and ranks; the global norm is sqrt of the total.
#pragma once

#include <cstddef>

#include "base/bf16.h"

namespace rz {

// The CPU backend's sum_squares (kernels/backend.h) cuts a long range into blocks of this
// many elements, sums each block with the functions below on its own thread, and adds the
// block sums in block order.
constexpr size_t kSumBlock = 1 << 16;

double sum_squares(const float* x, size_t n);  // (n)
double sum_squares(const bf16* x, size_t n);   // (n), widened to fp32, squared in fp64

}  // namespace rz
