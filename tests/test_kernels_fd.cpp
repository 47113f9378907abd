// Every CPU kernel's backward against central finite differences of its forward, in fp64.
//
// For a kernel out = f(in), take the scalar objective J = sum(out * w) with fixed random
// weights w, so dJ/dout = w. Backward gets dout = w and must produce dJ/din; the finite
// difference (J(in + e) - J(in - e)) / 2e with e = 1e-6 in fp64 has an error near 1e-9,
// so the bar below (max error / max gradient < 1e-6) is far under 1e-4. Gradient buffers
// start at a nonzero value to check that backward accumulates (+=) where it should
// (tests/fd_util.h). The Llama family's kernels have theirs in tests/test_kernels_llama.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <type_traits>
#include <vector>

#include "base/bf16.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/crossentropy.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"
#include "tests/fd_util.h"

using namespace rz;
using namespace rz::test;

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
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
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
  attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH, NH);
  check_fd("dqkv", qkv, dqkv, 0.125, J);
}

TEST_CASE("attention over several causal row blocks matches finite differences", "[kernels][fd]") {
  // T = 70 spans three of the kernel's 32-query row blocks, the last one partial.
  const int B = 1, T = 70, C = 4, NH = 2;
  Vec qkv = randn(B * T * 3 * C, 16), w = randn(B * T * C, 17);
  Vec out(B * T * C), att(B * NH * T * T);
  auto J = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
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
  attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH, NH);
  check_fd("dqkv (row blocks)", qkv, dqkv, -0.25, J);
}

// The flash-style path is held against the materialised one (checked above against
// finite differences): same out, lse equal to the log-sum-exp of the scores, and the same
// gradient up to the rounding of recomputing each probability from lse.
static float as_float(float x) { return x; }
static float as_float(bf16 x) { return bf16_to_float(x); }
template <typename E>
static E from_float(float x) {
  if constexpr (std::is_same_v<E, float>) return x;
  else return float_to_bf16(x);
}

// NKV < NH: grouped-query attention, query head h reading kv head h / (NH / NKV).
template <typename E>
static void check_flash_against_materialised(double grad_tol, int NH = 2, int NKV = 2) {
  const int B = 2, T = 70, C = 24, hs = C / NH;  // 3 row blocks, the last partial
  const int W = C + 2 * NKV * hs, G = NH / NKV;    // qkv's row: q (C), k, v (NKV * hs each)
  const Vec q64 = randn(size_t(B) * T * W, 18), g64 = randn(size_t(B) * T * C, 19);
  std::vector<E> qkv(q64.size()), dout(g64.size());
  for (size_t i = 0; i < q64.size(); ++i) qkv[i] = from_float<E>(float(q64[i]));
  for (size_t i = 0; i < g64.size(); ++i) dout[i] = from_float<E>(float(g64[i]));
  std::vector<E> out_m(size_t(B) * T * C), att(size_t(B) * NH * T * T), out_f(out_m.size(), from_float<E>(-7.0f));
  std::vector<float> lse(size_t(B) * NH * T, -7.0f);
  attention_forward(out_m.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
  attention_forward_flash(out_f.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
  for (size_t i = 0; i < out_m.size(); ++i) REQUIRE(as_float(out_f[i]) == as_float(out_m[i]));  // same products
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        double m = -1e300, sum = 0;
        std::vector<double> sc(t + 1);
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < hs; ++i)
            d += double(as_float(qkv[(size_t(b) * T + t) * W + h * hs + i])) *
                 double(as_float(qkv[(size_t(b) * T + u) * W + C + (h / G) * hs + i]));
          sc[u] = d / std::sqrt(double(hs));
          m = std::max(m, sc[u]);
        }
        for (double x : sc) sum += std::exp(x - m);
        REQUIRE(lse[(size_t(b) * NH + h) * T + t] == Approx(m + std::log(sum)).margin(1e-5));
      }
  std::vector<E> dq_m(qkv.size(), from_float<E>(0.5f)), dq_f(qkv.size(), from_float<E>(0.5f));  // both accumulate
  attention_backward(dq_m.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
  attention_backward_flash(dq_f.data(), dout.data(), qkv.data(), lse.data(), B, T, C, NH, NKV);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < dq_m.size(); ++i) {
    worst = std::max(worst, std::abs(double(as_float(dq_f[i])) - double(as_float(dq_m[i]))));
    scale = std::max(scale, std::abs(double(as_float(dq_m[i])) - 0.5));
  }
  INFO("max |flash - materialised| " << worst << ", max |gradient| " << scale);
  CHECK(scale > 0.1);
  CHECK(worst <= grad_tol * scale);
}

TEST_CASE("flash attention equals the materialised attention", "[kernels][attention]") {
  SECTION("fp32") { check_flash_against_materialised<float>(1e-5); }
  // bf16: the materialised backward reads probabilities rounded to bf16 when saved; the
  // flash one recomputes them in fp32, so the two differ by about one bf16 rounding.
  SECTION("bf16") { check_flash_against_materialised<bf16>(2e-2); }
  SECTION("fp32, grouped-query (6 heads on 2 kv heads)") { check_flash_against_materialised<float>(1e-5, 6, 2); }
  SECTION("bf16, multi-query (3 heads on 1 kv head)") { check_flash_against_materialised<bf16>(2e-2, 3, 1); }
}

// fp32 GELU (on AVX2 + FMA CPUs its own vector code, a sigmoid form of the tanh formula)
// against the formula in double: a few ulp everywhere, the far tails included; a length
// that is not a multiple of 8 (the padded last vector); in place; and the same bits
// wherever a value lies in the buffer (alignment, chunk position).
TEST_CASE("fp32 gelu matches the tanh formula in double, in place and at any offset", "[kernels]") {
  const size_t N = 1203;
  std::vector<float> x(N), d(N);
  std::mt19937 g(21);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (size_t i = 0; i < N; ++i) x[i] = nd(g), d[i] = nd(g);
  const float tails[] = {0.f, -0.f, 1e-30f, -1e-30f, 30.f, -30.f, 100.f, -100.f, 5.f, -5.f, 1e4f, -1e4f};
  for (size_t i = 0; i < sizeof tails / sizeof tails[0]; ++i) x[i * 97] = tails[i];
  std::vector<float> y(N), dx(N);
  gelu_forward(y.data(), x.data(), N);
  gelu_backward(dx.data(), x.data(), d.data(), N);
  const double k = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < N; ++i) {
    // The tanh formula written without its cancellation at large -x (1 + tanh u = 2 s,
    // 1 - tanh^2 u = 4 s (1 - s), s = 1 / (1 + exp(-2u))), so the reference is exact there too.
    const double xi = x[i], u = k * (xi + 0.044715 * xi * xi * xi), e = std::exp(-2.0 * u), sg = 1.0 / (1.0 + e);
    const double want = xi * sg;
    const double one_minus_sg = std::isinf(e) ? 1.0 : e * sg;
    const double grad = sg + 2.0 * xi * sg * one_minus_sg * k * (1.0 + 3.0 * 0.044715 * xi * xi);
    if (std::abs(xi) < 3.0) {  // where the plain formula is exact enough in double: the same values
      const double t = std::tanh(u);
      CHECK(std::abs(want - 0.5 * xi * (1.0 + t)) <= 1e-10 * std::abs(want) + 1e-300);
    }
    INFO("x = " << xi << " gelu " << double(y[i]) << " want " << want << " grad " << double(dx[i]) << " want "
              << grad * d[i]);
    // exp(-2u) in fp32 carries u's own rounding, |2u| x 6e-8 relative: the tolerance grows with it.
    const double rel = 1e-6 * (1.0 + std::min(std::abs(2.0 * u), 80.0));
    // The absolute term admits the fallback (Eigen's fp32 tanh, CPUs without AVX2), whose
    // 1 + tanh u rounds to 0 where gelu is below about 1e-7 |x|.
    CHECK(std::abs(y[i] - want) <= rel * std::abs(want) + 2e-7 * std::abs(xi) + 1e-30);
    CHECK(std::abs(dx[i] - grad * d[i]) <= 2.0 * rel * std::abs(grad * d[i]) + 1e-7 * (1.0 + std::abs(xi)) * std::abs(d[i]) + 1e-30);
  }
  // in place, and from an offset copy (another alignment, another place in the chunk)
  std::vector<float> xi = x, di = d;
  gelu_forward(xi.data(), xi.data(), N);
  gelu_backward(di.data(), x.data(), di.data(), N);
  CHECK(xi == y);
  CHECK(di == dx);
  std::vector<float> xs(N + 3), ys(N + 3);
  std::copy(x.begin(), x.end(), xs.begin() + 3);
  gelu_forward(ys.data() + 3, xs.data() + 3, N);
  CHECK(std::vector<float>(ys.begin() + 3, ys.end()) == y);
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

// bf16 storage runs through an aligned fp32 copy of each row (crossentropy.cpp). Against
// fp64 on the same bf16 values: losses and lse to fp32 precision, dlogits to one bf16
// rounding. V = 37 and Vp = 40 put every row but the first off a 64-byte boundary and
// leave a scalar tail after Eigen's packets; the padding columns must come back zero.
TEST_CASE("bf16 cross-entropy agrees with fp64 on the same values", "[kernels]") {
  const int N = 6, V = 37, Vp = 40;
  const Vec src = randn(size_t(N) * Vp, 23, 4.0);
  std::vector<bf16> logits(src.size());
  for (size_t i = 0; i < src.size(); ++i) logits[i] = float_to_bf16(float(src[i]));
  const std::vector<int> targets{0, 36, 5, 17, 36, 1};
  std::vector<float> losses(N), lse(N);
  crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  const float dloss = 1.0f / N;
  std::vector<bf16> d = logits;
  crossentropy_softmax_backward(d.data(), lse.data(), targets.data(), dloss, N, V, Vp);
  for (int n = 0; n < N; ++n) {
    const bf16* x = logits.data() + size_t(n) * Vp;
    double mx = -1e300, s = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(bf16_to_float(x[v])));
    for (int v = 0; v < V; ++v) s += std::exp(double(bf16_to_float(x[v])) - mx);
    const double want_lse = mx + std::log(s);
    INFO("row " << n);
    CHECK(lse[n] == Approx(want_lse).epsilon(1e-6));
    CHECK(losses[n] == Approx(want_lse - bf16_to_float(x[targets[n]])).margin(1e-5));
    for (int v = 0; v < V; ++v) {
      const double want = (std::exp(double(bf16_to_float(x[v])) - want_lse) - (v == targets[n])) * dloss;
      const double got = bf16_to_float(d[size_t(n) * Vp + v]);
      CHECK(std::abs(got - want) <= std::abs(want) / 256 + 1e-6);  // bf16 keeps 8 significant bits
    }
    for (int v = V; v < Vp; ++v) CHECK(bf16_to_float(d[size_t(n) * Vp + v]) == 0.0f);
  }
}
