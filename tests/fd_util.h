// tests/fd_util.h: what the finite-difference tests of the CPU kernels share
// (tests/test_kernels_fd.cpp, tests/test_kernels_llama.cpp).
//
// For a kernel out = f(in), take the scalar objective J = sum(out * w) with fixed random
// weights w, so dJ/dout = w. Backward gets dout = w and must produce dJ/din; the central
// difference (J(in + e) - J(in - e)) / 2e with e = 1e-6 in fp64 has an error near 1e-9,
// so the bar (max error / max gradient < 1e-6) is far under 1e-4. Gradient buffers start
// at a nonzero value (`base`) to check that backward accumulates (+=) where it should.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace rz::test {

using Vec = std::vector<double>;

inline Vec randn(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (double& x : v) x = d(g);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic (the accumulated gradient minus its starting value `base`) against the
// central difference of objective() over every element of x.
inline void check_fd(const char* what, Vec& x, const Vec& analytic_plus_base, double base,
                     const std::function<double()>& objective) {
  const double eps = 1e-6;
  double max_err = 0, max_abs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double jp = objective();
    x[i] = keep - eps;
    const double jm = objective();
    x[i] = keep;
    const double numeric = (jp - jm) / (2 * eps);
    const double analytic = analytic_plus_base[i] - base;
    max_err = std::max(max_err, std::abs(numeric - analytic));
    max_abs = std::max(max_abs, std::abs(numeric));
  }
  INFO(what << ": max |analytic - fd| = " << max_err << ", max |grad| = " << max_abs);
  REQUIRE(max_abs > 1e-3);  // the check is not vacuous
  CHECK(max_err / max_abs < 1e-6);
}

}  // namespace rz::test
