// AdamW, global-norm sum of squares and bf16 conversion: known answers.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
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

TEST_CASE("adamw: bitwise the same for any range split and thread count", "[kernels][adamw]") {
  // Vector lanes and the scalar remainder must agree bit for bit: ZeRO shards start at
  // any offset and threads split the range, so an element lands in either path.
  const size_t n = (1 << 16) + 37;  // above the parallel threshold, not a multiple of 8
  std::vector<float> w0(n), m0(n), v0(n), g(n);
  std::vector<bf16> gb(n);
  for (size_t i = 0; i < n; ++i) {
    w0[i] = float(0.02 * std::sin(0.37 * double(i)));
    m0[i] = float(1e-3 * std::cos(0.11 * double(i)));
    v0[i] = float(1e-6 * (1.5 + std::sin(0.05 * double(i))));
    g[i] = float(0.01 * std::sin(1.3 * double(i) + 0.2));
    gb[i] = float_to_bf16(g[i]);
  }
  w0[5] = std::nanf("");  // NaN stays NaN in both paths (and bf16 keeps it quiet)
  AdamWStep s;
  s.lr = 3e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.7f;
  s.t = 3;
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  const int saved_threads = omp_get_max_threads();
  // the whole range on 1 and 2 threads
  omp_set_num_threads(1);
  std::vector<float> w1 = w0, m1 = m0, v1 = v0;
  adamw_update<float, float>(w1.data(), nullptr, m1.data(), v1.data(), g.data(), n, s);
  omp_set_num_threads(2);
  std::vector<float> w2 = w0, m2 = m0, v2 = v0;
  adamw_update<float, float>(w2.data(), nullptr, m2.data(), v2.data(), g.data(), n, s);
  omp_set_num_threads(saved_threads);
  CHECK(same_bits(w1, w2));
  CHECK(same_bits(m1, m2));
  CHECK(same_bits(v1, v2));
  // odd-sized pieces at odd offsets: every element's lane position changes
  std::vector<float> w3 = w0, m3 = m0, v3 = v0;
  for (size_t begin = 0, len = 1; begin < n; begin += len, len = len * 3 + 2) {
    const size_t k = std::min(len, n - begin);
    adamw_update<float, float>(w3.data() + begin, nullptr, m3.data() + begin, v3.data() + begin, g.data() + begin, k, s);
  }
  CHECK(same_bits(w1, w3));
  CHECK(same_bits(m1, m3));
  CHECK(same_bits(v1, v3));
  // the bf16 cases: master as fp32 above, parameters rounded from it, whatever the split
  std::vector<float> master = w0, mb = m0, vb = v0, master2 = w0, mb2 = m0, vb2 = v0;
  std::vector<bf16> p(n), p2(n);
  adamw_update<bf16, bf16>(p.data(), master.data(), mb.data(), vb.data(), gb.data(), n, s);
  for (size_t begin = 0; begin < n; begin += 13)
    adamw_update<bf16, bf16>(p2.data() + begin, master2.data() + begin, mb2.data() + begin, vb2.data() + begin,
                             gb.data() + begin, std::min<size_t>(13, n - begin), s);
  CHECK(same_bits(master, master2));
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(p[i].bits == float_to_bf16(master[i]).bits);
    REQUIRE(p2[i].bits == p[i].bits);
  }
  CHECK(std::isnan(w1[5]));
  CHECK(std::isnan(bf16_to_float(p[5])));
  // and the values are AdamW's: fp64 by the formula from the same state
  std::vector<double> rw(w0.begin(), w0.end()), rm(m0.begin(), m0.end()), rv(v0.begin(), v0.end()), rg(g.begin(), g.end());
  adamw_ref(rw, rm, rv, rg, s);
  for (size_t i = 0; i < n; ++i)
    if (i != 5) REQUIRE(w1[i] == Approx(rw[i]).margin(1e-7).epsilon(1e-5));
}

// One call over several tensors (a bucket) with decay spans must give bitwise the result of
// one call per tensor with its own weight decay; bad spans are refused.
TEST_CASE("adamw: spans of decayed and undecayed tensors equal one call per tensor", "[kernels][adamw]") {
  const std::vector<AdamWSpan> spans = {{7, false}, {300, true}, {301, false}, {310, false}, {5000, true}};
  const size_t n = spans.back().end;
  std::vector<float> w0(n), m0(n), v0(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    w0[i] = float(0.05 * std::cos(0.21 * double(i)));
    m0[i] = float(1e-3 * std::sin(0.13 * double(i)));
    v0[i] = float(1e-6 * (1.2 + std::cos(0.07 * double(i))));
    g[i] = float(0.01 * std::cos(0.9 * double(i) + 0.4));
  }
  AdamWStep s;
  s.lr = 2e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.8f;
  s.t = 2;
  std::vector<float> w1 = w0, m1 = m0, v1 = v0, w2 = w0, m2 = m0, v2 = v0;
  size_t begin = 0;
  for (const AdamWSpan& sp : spans) {
    AdamWStep one = s;
    one.weight_decay = sp.decay ? s.weight_decay : 0.0f;
    adamw_update<float, float>(w1.data() + begin, nullptr, m1.data() + begin, v1.data() + begin, g.data() + begin,
                               sp.end - begin, one);
    begin = sp.end;
  }
  AdamWStep all = s;
  all.spans = spans.data();
  all.num_spans = spans.size();
  adamw_update<float, float>(w2.data(), nullptr, m2.data(), v2.data(), g.data(), n, all);
  CHECK(std::memcmp(w1.data(), w2.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(m1.data(), m2.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(v1.data(), v2.data(), n * sizeof(float)) == 0);
  // the decayed spans really decayed: a weight with zero gradient history still shrinks
  std::vector<float> w(n, 1.0f), m(n, 0.0f), v(n, 0.0f), z(n, 0.0f);
  adamw_update<float, float>(w.data(), nullptr, m.data(), v.data(), z.data(), n, all);
  CHECK(w[0] == 1.0f);
  CHECK(w[7] < 1.0f);
  CHECK(w[300] == 1.0f);
  CHECK(w[4999] < 1.0f);

  const std::vector<AdamWSpan> short_spans = {{7, false}, {300, true}};
  AdamWStep bad = s;
  bad.spans = short_spans.data();
  bad.num_spans = short_spans.size();
  auto run_bad = [&] { adamw_update<float, float>(w2.data(), nullptr, m2.data(), v2.data(), g.data(), n, bad); };
  REQUIRE_THROWS_WITH(run_bad(), Catch::Contains("the spans cover 300 of 5000 elements"));
  const std::vector<AdamWSpan> backwards = {{300, false}, {7, true}};
  bad.spans = backwards.data();
  REQUIRE_THROWS_WITH(run_bad(), Catch::Contains("span 1 ends at 7"));
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
