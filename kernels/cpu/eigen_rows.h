// kernels/cpu/eigen_rows.h: a row of storage type E widened into an Eigen array of the
// compute type A, and stored back rounded once (the row-wise kernels: layernorm, rmsnorm).
#pragma once

#include <Eigen/Core>
#include <type_traits>

#include "kernels/cpu/convert.h"

namespace rz {

template <typename A>
using RowArr = Eigen::Array<A, Eigen::Dynamic, 1>;

// dst (n) = src (n), widened.
template <typename E, typename A>
void load_row(RowArr<A>& dst, const E* src, int n) {
  if constexpr (std::is_same_v<E, A>)
    dst = Eigen::Map<const RowArr<A>>(src, n);
  else
    for (int c = 0; c < n; ++c) dst[c] = load(src[c]);
}
// dst (n) = src (n, an Eigen expression), each element rounded once to E.
template <typename E, typename A, typename X>
void store_row(E* dst, const X& src, int n) {
  if constexpr (std::is_same_v<E, A>)
    Eigen::Map<RowArr<A>>(dst, n) = src;
  else
    for (int c = 0; c < n; ++c) dst[c] = store<E>(src[c]);
}

}  // namespace rz
