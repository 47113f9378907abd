// AdamW, global-norm sum of squares and bf16 conversion: known answers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/global_norm.h"

using namespace rz;

// Two AdamW steps in fp64 by the formula, for comparison.
static void adamw_ref(std::vector<double>& w, std::vector<double>& m, std::vector<double>& v,
                      const std::vector<double>& g, const AdamWStep& s) {
  for (size_t i = 0; i < w.size(); ++i) {
    double gi = g[i] * s.grad_scale;
    m[i] = s.beta1 * m[i] + (1 - s.beta1) * gi;
    v[i] = s.beta2 * v[i] + (1 - s.beta2) * gi * gi;
    double mh = m[i] / (1 - std::pow(double(s.beta1), double(s.t)));
    double vh = v[i] / (1 - std::pow(double(s.beta2), double(s.t)));
    w[i] -= s.lr * (mh / (std::sqrt(vh) + s.eps) + s.weight_decay * w[i]);
  }
}

TEST_CASE("adamw: fp32 params are the master; two steps match the formula", "[kernels][adamw]") {
  const size_t n = 100;
  std::vector<float> p(n), m(n, 0), v(n, 0), g(n);
  std::vector<double> pw(n), pm(n, 0), pv(n, 0), pg(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = float(0.01 * (int(i) - 50));
    g[i] = float(0.003 * std::sin(double(i)));
    pw[i] = p[i];
    pg[i] = g[i];
  }
  AdamWStep s;
  s.lr = 1e-2f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  for (uint64_t t = 1; t <= 2; ++t) {
    s.t = t;
    adamw_update<float, float>(p.data(), nullptr, m.data(), v.data(), g.data(), n, s);
    adamw_ref(pw, pm, pv, pg, s);
  }
  for (size_t i = 0; i < n; ++i) REQUIRE(p[i] == Approx(pw[i]).margin(2e-6));
  // step 1 from zero state moves each weight by about lr * sign(g): a known answer
  CHECK(std::abs(pw[10] - (0.01 * (10 - 50))) > 1.5e-2);
}

TEST_CASE("adamw: bf16 params receive the rounded master; bf16 and fp32 grads", "[kernels][adamw]") {
  const size_t n = 64;
  std::vector<float> master(n), m(n, 0), v(n, 0), gf(n);
  std::vector<bf16> p(n), gb(n);
  for (size_t i = 0; i < n; ++i) {
    master[i] = 0.1f + 0.001f * float(i);
    gf[i] = bf16_to_float(float_to_bf16(0.01f * float(int(i) - 32)));
    gb[i] = float_to_bf16(gf[i]);
  }
  std::vector<float> master2 = master, m2 = m, v2 = v;
  AdamWStep s;
  s.t = 1;
  adamw_update<bf16, bf16>(p.data(), master.data(), m.data(), v.data(), gb.data(), n, s);
  adamw_update<bf16, float>(nullptr, master2.data(), m2.data(), v2.data(), gf.data(), n, s);
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(p[i].bits == float_to_bf16(master[i]).bits);
    REQUIRE(master[i] == master2[i]);  // same gradient values, same update
  }
  auto no_master = [&] { adamw_update<bf16, bf16>(p.data(), nullptr, m.data(), v.data(), gb.data(), n, s); };
  CHECK_THROWS_AS(no_master(), Error);
}

TEST_CASE("sum_squares: known sums, bitwise reproducible", "[kernels][norm]") {
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(200)}) {
    std::vector<float> x(n);
    std::vector<bf16> xb(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = float(i);
      xb[i] = float_to_bf16(float(i % 256));  // integers up to 256 are exact in bf16
    }
    double expect = double(n) * (n - 1.0) * (2.0 * n - 1.0) / 6.0;
    REQUIRE(sum_squares(x.data(), n) == expect);
    double eb = 0;
    for (size_t i = 0; i < n; ++i) eb += double(i % 256) * double(i % 256);
    REQUIRE(sum_squares(xb.data(), n) == eb);
  }
  std::vector<float> y(1000);
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::sin(float(i)) * 1e-3f;
  double a = sum_squares(y.data(), y.size()), b = sum_squares(y.data(), y.size());
  REQUIRE(std::memcmp(&a, &b, sizeof(double)) == 0);
}

TEST_CASE("bf16 conversions round to nearest even", "[kernels][bf16]") {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  std::vector<float> f{1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 0.0f};
  std::vector<bf16> b(f.size());
  f32_to_bf16(b.data(), f.data(), f.size());
  std::vector<float> back(f.size());
  bf16_to_f32(back.data(), b.data(), b.size());
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == 1.0f + 4.0f / 256);
  CHECK(back[2] == -2.5f);
  CHECK(back[3] == 0.0f);
  std::vector<float> add{1.0f / 128, 0, 0, 1.0f};
  bf16_add_f32(b.data(), add.data(), b.size());
  CHECK(bf16_to_float(b[0]) == 1.0f + 1.0f / 128);
  CHECK(bf16_to_float(b[3]) == 1.0f);
}
