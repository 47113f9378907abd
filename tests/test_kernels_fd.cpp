// Every CPU kernel's backward against central finite differences of its forward, in fp64.
//
// For a kernel out = f(in), take the scalar objective J = sum(out * w) with fixed random
// weights w, so dJ/dout = w. Backward gets dout = w and must produce dJ/din; the finite
// difference (J(in + e) - J(in - e)) / 2e with e = 1e-6 in fp64 has an error near 1e-9,
// so the bar below (max error / max gradient < 1e-6) is far under 1e-4. Gradient buffers
// start at a nonzero value to check that backward accumulates (+=) where it should.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/crossentropy.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"

using namespace rz;
using Vec = std::vector<double>;

static Vec randn(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (double& x : v) x = d(g);
  return v;
}

static double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic (the accumulated gradient minus its starting value `base`) against the
// central difference of objective() over every element of x.
static void check_fd(const char* what, Vec& x, const Vec& analytic_plus_base, double base,
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

TEST_CASE("encoder backward matches finite differences", "[kernels][fd]") {
  const int B = 2, T = 3, C = 4, Vp = 5, maxT = 4;
  std::vector<int> inp{1, 4, 1, 0, 2, 1};  // token 1 repeats: scatter-add must accumulate
  Vec wte = randn(Vp * C, 1), wpe = randn(maxT * C, 2), w = randn(B * T * C, 3), out(B * T * C);
  auto J = [&] {
    encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, w);
  };
  Vec dwte(Vp * C, 0.25), dwpe(maxT * C, 0.25);
  encoder_backward(dwte.data(), dwpe.data(), w.data(), inp.data(), B, T, C);
  check_fd("dwte", wte, dwte, 0.25, J);
  // wpe row 3 is unused at T=3: its gradient must stay exactly the starting value.
  for (int c = 0; c < C; ++c) CHECK(dwpe[3 * C + c] == 0.25);
  Vec wpe_used(wpe.begin(), wpe.begin() + T * C);
  Vec dwpe_used(dwpe.begin(), dwpe.begin() + T * C);
  auto J2 = [&] {
    std::copy(wpe_used.begin(), wpe_used.end(), wpe.begin());
    return J();
  };
  check_fd("dwpe", wpe_used, dwpe_used, 0.25, J2);
}

TEST_CASE("layernorm backward matches finite differences", "[kernels][fd]") {
  const int N = 5, C = 7;
  Vec inp = randn(N * C, 4, 2.0), weight = randn(C, 5), bias = randn(C, 6), w = randn(N * C, 7);
  Vec out(N * C), mean(N), rstd(N);
  auto J = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    return dot(out, w);
  };
  J();
  Vec dinp(N * C, 0.5), dweight(C, 0.5), dbias(C, 0.5);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(),
                     mean.data(), rstd.data(), N, C);
  check_fd("dinp", inp, dinp, 0.5, J);
  check_fd("dweight", weight, dweight, 0.5, J);
  check_fd("dbias", bias, dbias, 0.5, J);
}

TEST_CASE("matmul backward matches finite differences", "[kernels][fd]") {
  const int N = 6, C = 5, OC = 7;
  Vec inp = randn(N * C, 8), weight = randn(OC * C, 9), bias = randn(OC, 10), w = randn(N * OC, 11);
  Vec out(N * OC);
  auto J = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    return dot(out, w);
  };
  Vec dinp(N * C, -1.0), dweight(OC * C, -1.0), dbias(OC, -1.0);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), N, C, OC);
  check_fd("dinp", inp, dinp, -1.0, J);
  check_fd("dweight", weight, dweight, -1.0, J);
  check_fd("dbias", bias, dbias, -1.0, J);
}

TEST_CASE("matmul forward without bias and float/bf16 agree with fp64", "[kernels]") {
  const int N = 9, C = 33, OC = 17;
  Vec inp = randn(N * C, 12), weight = randn(OC * C, 13), out(N * OC);
  matmul_forward(out.data(), inp.data(), weight.data(), static_cast<const double*>(nullptr), N, C, OC);
  std::vector<float> fi(inp.begin(), inp.end()), fw(weight.begin(), weight.end()), fo(N * OC);
  matmul_forward(fo.data(), fi.data(), fw.data(), static_cast<const float*>(nullptr), N, C, OC);
  std::vector<bf16> bi(N * C), bw(OC * C), bo(N * OC);
  for (size_t i = 0; i < bi.size(); ++i) bi[i] = float_to_bf16(float(inp[i]));
  for (size_t i = 0; i < bw.size(); ++i) bw[i] = float_to_bf16(float(weight[i]));
  matmul_forward(bo.data(), bi.data(), bw.data(), static_cast<const bf16*>(nullptr), N, C, OC);
  for (int i = 0; i < N * OC; ++i) {
    double ref = 0;
    for (int k = 0; k < C; ++k) ref += inp[(i / OC) * C + k] * weight[(i % OC) * C + k];
    REQUIRE(out[i] == Approx(ref).margin(1e-12));
    REQUIRE(fo[i] == Approx(ref).margin(1e-4));
    // bf16 inputs (8 significant bits) and output rounding: about 2^-8 relative per term.
    REQUIRE(bf16_to_float(bo[i]) == Approx(ref).margin(0.15));
  }
}

TEST_CASE("attention backward matches finite differences", "[kernels][fd]") {
  const int B = 2, T = 4, C = 6, NH = 2;
  Vec qkv = randn(B * T * 3 * C, 14), w = randn(B * T * C, 15);
  Vec out(B * T * C), att(B * NH * T * T);
  auto J = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, w);
  };
  J();
  // causality: softmax rows sum to one over t2 <= t and are zero after
  for (int r = 0; r < B * NH * T; ++r) {
    int t = r % T;
    double s = 0;
    for (int t2 = 0; t2 < T; ++t2) {
      if (t2 > t) CHECK(att[r * T + t2] == 0.0);
      s += att[r * T + t2];
    }
    CHECK(s == Approx(1.0).margin(1e-12));
  }
  Vec dqkv(B * T * 3 * C, 0.125);
  attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);
  check_fd("dqkv", qkv, dqkv, 0.125, J);
}

TEST_CASE("attention over several causal row blocks matches finite differences", "[kernels][fd]") {
  // T = 70 spans three of the kernel's 32-query row blocks, the last one partial.
  const int B = 1, T = 70, C = 4, NH = 2;
  Vec qkv = randn(B * T * 3 * C, 16), w = randn(B * T * C, 17);
  Vec out(B * T * C), att(B * NH * T * T);
  auto J = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, w);
  };
  J();
  for (int r = 0; r < B * NH * T; ++r) {
    int t = r % T;
    double s = 0;
    for (int t2 = 0; t2 < T; ++t2) {
      if (t2 > t) CHECK(att[r * T + t2] == 0.0);
      s += att[r * T + t2];
    }
    CHECK(s == Approx(1.0).margin(1e-12));
  }
  Vec dqkv(B * T * 3 * C, -0.25);
  attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);
  check_fd("dqkv (row blocks)", qkv, dqkv, -0.25, J);
}

TEST_CASE("gelu and residual backward match finite differences", "[kernels][fd]") {
  const size_t N = 40;
  Vec inp = randn(N, 16, 2.0), w = randn(N, 17), out(N);
  auto J = [&] {
    gelu_forward(out.data(), inp.data(), N);
    return dot(out, w);
  };
  Vec dinp(N);
  gelu_backward(dinp.data(), inp.data(), w.data(), N);
  check_fd("gelu dinp", inp, dinp, 0.0, J);
  // known values: gelu(0) = 0, gelu(x) -> x for large x
  Vec xs{0.0, 10.0, -10.0}, ys(3);
  gelu_forward(ys.data(), xs.data(), 3);
  CHECK(ys[0] == 0.0);
  CHECK(ys[1] == Approx(10.0).margin(1e-12));
  CHECK(ys[2] == Approx(0.0).margin(1e-12));

  Vec a = randn(N, 18), b = randn(N, 19), r(N);
  auto JR = [&] {
    residual_forward(r.data(), a.data(), b.data(), N);
    return dot(r, w);
  };
  Vec da(N, 1.0), db(N, 2.0);
  residual_backward(da.data(), db.data(), w.data(), N);
  check_fd("residual da", a, da, 1.0, JR);
  check_fd("residual db", b, db, 2.0, JR);
}

TEST_CASE("softmax cross-entropy backward matches finite differences", "[kernels][fd]") {
  const int N = 4, V = 5, Vp = 8;
  Vec logits = randn(N * Vp, 20, 3.0);
  std::vector<int> targets{0, 4, 2, 4};
  Vec losses(N), lse(N);
  const double dloss = 0.25;  // J = dloss * sum of losses, as the mean over N = 4 rows
  auto J = [&] {
    crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
    double s = 0;
    for (double l : losses) s += l;
    return s * dloss;
  };
  J();
  // known answer for row 0: -log softmax(x)[0]
  {
    double mx = -1e300, s = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, logits[v]);
    for (int v = 0; v < V; ++v) s += std::exp(logits[v] - mx);
    CHECK(losses[0] == Approx(mx + std::log(s) - logits[0]).epsilon(1e-14));
  }
  Vec d = logits;
  crossentropy_softmax_backward(d.data(), lse.data(), targets.data(), dloss, N, V, Vp);
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) CHECK(d[n * Vp + v] == 0.0);  // padded columns
  check_fd("dlogits", logits, d, 0.0, [&] {
    // padded columns do not enter the loss: their fd is 0, matching d
    return J();
  });
}
