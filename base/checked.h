// base/checked.h: arithmetic on numbers a user gave, which must not wrap, and the bound on
// thread counts.
//
// A product of flags (B x T x ranks, a parameter count x bytes) is formed with checked_mul,
// which throws naming what it was computing instead of wrapping into a small or negative
// number that fails later in a confusing place.
#pragma once

#include <cstdint>
#include <limits>

#include "base/check.h"

namespace rz {

// a x b, or an rz::Error "WHAT: A x B does not fit in N bits" (a, b >= 0).
template <typename T>
T checked_mul(T a, T b, const char* what) {
  T out{};
  RZ_CHECK(a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &out), "%s: %lld x %lld is out of range (at most %lld)",
           what, static_cast<long long>(a), static_cast<long long>(b),
           static_cast<long long>(std::numeric_limits<T>::max()));
  return out;
}

// The most threads one process may ask for: kThreadsPerCore x the machine's online cores.
// Beyond that a run only thrashes; far beyond, the OpenMP runtime runs out of stack.
inline constexpr int kThreadsPerCore = 4;
int online_cores();
int max_threads();
// Throws "WHAT: N threads ... at most M (4 x C cores)" unless 1 <= n <= max_threads().
void check_thread_count(long long n, const char* what);

}  // namespace rz
