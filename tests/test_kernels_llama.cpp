// The Llama family's CPU kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention): every
// backward against central finite differences in fp64 (tests/fd_util.h), and each forward
// against something independent of the kernel: RMSNorm and SwiGLU against their formula,
// RoPE against the rotation of a known vector in closed form and against the numbers of
// transformers' own LlamaRotaryEmbedding + apply_rotary_pos_emb (tests/fixtures/hf_rope,
// with the script that made them), grouped-query attention against multi-head attention
// on k and v repeated per query head.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/bf16.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "tests/fd_util.h"
#include "tests/test_paths.h"

using namespace rz;
using namespace rz::test;

namespace {

float as_float(float x) { return x; }
float as_float(bf16 x) { return bf16_to_float(x); }
template <typename E>
E from_float(float x) {
  if constexpr (std::is_same_v<E, float>) return x;
  else return float_to_bf16(x);
}
template <typename E>
std::vector<E> narrow(const Vec& v) {
  std::vector<E> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_float<E>(float(v[i]));
  return out;
}

}  // namespace

// --- RMSNorm

TEST_CASE("rmsnorm backward matches finite differences", "[kernels][fd][llama]") {
  const int N = 5, C = 7;
  const double eps = 1e-5;
  Vec inp = randn(N * C, 31, 2.0), weight = randn(C, 32), w = randn(N * C, 33);
  Vec out(N * C), rstd(N);
  auto J = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
    return dot(out, w);
  };
  J();
  for (int n = 0; n < N; ++n) {  // the saved statistic, by its definition
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += inp[n * C + c] * inp[n * C + c];
    CHECK(rstd[n] == Approx(1.0 / std::sqrt(ss / C + eps)).epsilon(1e-14));
  }
  Vec dinp(N * C, 0.5), dweight(C, 0.5);
  rmsnorm_backward(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(), rstd.data(), N, C);
  check_fd("rmsnorm dinp", inp, dinp, 0.5, J);
  check_fd("rmsnorm dweight", weight, dweight, 0.5, J);
}

// fp32 and bf16 against the formula in fp64 on the same (rounded) inputs, rows longer than
// one channel block of the weight gradient (64) with a tail: out to fp32 precision or one
// bf16 rounding (bf16 rounds once, kernels/cpu/rmsnorm.h).
TEMPLATE_TEST_CASE("rmsnorm forward agrees with fp64 on the same values", "[kernels][llama]", float, bf16) {
  using E = TestType;
  const int N = 3, C = 100;
  const float eps = 1e-6f;
  const std::vector<E> inp = narrow<E>(randn(N * C, 34, 3.0)), weight = narrow<E>(randn(C, 35));
  std::vector<E> out(N * C);
  std::vector<float> rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
  const double rel = std::is_same_v<E, bf16> ? 1.0 / 256 : 1e-6;
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += double(as_float(inp[n * C + c])) * as_float(inp[n * C + c]);
    const double r = 1.0 / std::sqrt(ss / C + double(eps));
    CHECK(rstd[n] == Approx(r).epsilon(1e-6));
    for (int c = 0; c < C; ++c) {
      const double want = double(as_float(inp[n * C + c])) * r * as_float(weight[c]);
      CHECK(std::abs(as_float(out[n * C + c]) - want) <= rel * std::abs(want) + 1e-30);
    }
  }
}

// --- RoPE

TEST_CASE("rope backward matches finite differences (q and k rotated, v untouched)", "[kernels][fd][llama]") {
  const int B = 2, T = 3, NH = 4, NKV = 2, hs = 6, pos0 = 5;  // hs/2 = 3: an odd half
  const float theta = 50.0f;
  const int W = (NH + 2 * NKV) * hs;
  Vec qkv = randn(size_t(B) * T * W, 36), w = randn(size_t(B) * T * W, 37), out;
  auto J = [&] {
    out = qkv;
    rope_forward(out.data(), B, T, NH, NKV, hs, pos0, theta);
    return dot(out, w);
  };
  J();
  for (int r = 0; r < B * T; ++r)  // v is the last 2 heads of each row: untouched, bit for bit
    for (int c = (NH + NKV) * hs; c < W; ++c) REQUIRE(out[size_t(r) * W + c] == qkv[size_t(r) * W + c]);
  Vec d = w;  // rope_backward works in place on the gradient: d becomes dJ/dqkv
  rope_backward(d.data(), B, T, NH, NKV, hs, pos0, theta);
  check_fd("rope dqkv", qkv, d, 0.0, J);
}

// A unit vector on dimension i (i < hs/2) of a head at position p must become
// cos(a) e_i + sin(a) e_{i+hs/2} with a = p / theta^(2i/hs), and e_{i+hs/2} must become
// -sin(a) e_i + cos(a) e_{i+hs/2}: the half-split pairs of transformers' rotate_half, in
// closed form (fp64 here, so only the kernel's fp32 inv_freq separates the two).
TEST_CASE("rope rotates a known vector by the closed-form angle", "[kernels][llama]") {
  const int hs = 8, half = hs / 2, NH = 1, NKV = 1, T = 3, pos0 = 11;
  const float theta = 10000.0f;
  const int W = (NH + 2 * NKV) * hs;
  for (int i = 0; i < hs; ++i) {
    CAPTURE(i);
    Vec x(size_t(T) * W, 0.0);
    for (int t = 0; t < T; ++t) x[size_t(t) * W + i] = 1.0, x[size_t(t) * W + hs + i] = 2.0;  // q: 1, k: 2
    std::vector<float> xf(x.begin(), x.end());
    rope_forward(x.data(), 1, T, NH, NKV, hs, pos0, theta);
    rope_forward(xf.data(), 1, T, NH, NKV, hs, pos0, theta);
    const int pair = i % half;
    for (int t = 0; t < T; ++t) {
      const double a = double(pos0 + t) * std::pow(double(theta), -2.0 * pair / hs);
      // where e_i goes: (cos a, sin a) on (pair, pair + half) for the first half; (-sin a, cos a) for the second
      const double to_lo = i < half ? std::cos(a) : -std::sin(a), to_hi = i < half ? std::sin(a) : std::cos(a);
      for (int head = 0; head < 2; ++head) {
        const double scale = head == 0 ? 1.0 : 2.0;
        for (int c = 0; c < hs; ++c) {
          const double want = c == pair ? scale * to_lo : c == pair + half ? scale * to_hi : 0.0;
          const size_t at = size_t(t) * W + size_t(head) * hs + c;
          CHECK(x[at] == Approx(want).margin(1e-6));   // fp64 math on an fp32 inv_freq
          CHECK(xf[at] == Approx(want).margin(2e-6));  // fp32: the angle and cos/sin in fp32 too
        }
      }
      for (int c = 2 * hs; c < W; ++c) CHECK(x[size_t(t) * W + c] == 0.0);  // v untouched
    }
  }
}

// inv_freq as transformers computes it, and positions past 0: row t of a call at pos0 is
// bitwise row pos0 + t of a call at 0 (the KV-cache decode relies on it). The backward
// undoes the forward (a rotation's transpose is its inverse).
TEMPLATE_TEST_CASE("rope: pos0 shifts the positions, backward inverts forward", "[kernels][llama]", float, bf16) {
  using E = TestType;
  const int B = 2, T = 9, NH = 3, NKV = 1, hs = 10, pos0 = 4;
  const int W = (NH + 2 * NKV) * hs;
  const float theta = 10000.0f;
  const Vec src = randn(size_t(B) * W, 38);
  // Row (b, t) of `full` (positions 0 .. T-1) and row (b, t - pos0) of `tail` hold the same values.
  std::vector<E> full(size_t(B) * T * W), tail(size_t(B) * (T - pos0) * W);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < W; ++c) {
        const E v = from_float<E>(float(src[size_t(b) * W + c] * (1.0 + 0.1 * t)));
        full[(size_t(b) * T + t) * W + c] = v;
        if (t >= pos0) tail[(size_t(b) * (T - pos0) + t - pos0) * W + c] = v;
      }
  const std::vector<E> before = full;
  rope_forward(full.data(), B, T, NH, NKV, hs, 0, theta);
  rope_forward(tail.data(), B, T - pos0, NH, NKV, hs, pos0, theta);
  for (int b = 0; b < B; ++b)
    for (int t = pos0; t < T; ++t)
      REQUIRE(std::memcmp(&full[(size_t(b) * T + t) * W], &tail[(size_t(b) * (T - pos0) + t - pos0) * W],
                          size_t(W) * sizeof(E)) == 0);
  rope_backward(full.data(), B, T, NH, NKV, hs, 0, theta);
  const double tol = std::is_same_v<E, bf16> ? 2.0 / 256 : 1e-6;  // bf16: two roundings of values near 1
  for (size_t k = 0; k < full.size(); ++k)
    CHECK(std::abs(as_float(full[k]) - as_float(before[k])) <= tol * (1.0 + std::abs(as_float(before[k]))));
}

TEST_CASE("rope refuses an odd head size and positions fp32 cannot hold", "[kernels][llama]") {
  std::vector<float> x(64);
  REQUIRE_THROWS_WITH(rope_forward(x.data(), 1, 1, 1, 1, 5, 0, 10000.0f), Catch::Contains("head size must be even"));
  REQUIRE_THROWS_WITH(rope_forward(x.data(), 1, 2, 1, 1, 8, (1 << 24) - 1, 10000.0f),
                      Catch::Contains("exact in fp32"));
  REQUIRE_THROWS_WITH(rope_backward(x.data(), 1, 1, 1, 1, 8, 0, 0.5f), Catch::Contains("theta must be finite"));
}

// transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb in fp32 (the fixture's script
// says how it was made): our inv_freq within one ulp of its buffer, our rotation within a
// few fp32 ulps of its output (cos and sin come from different libraries), v untouched.
TEST_CASE("rope matches transformers' apply_rotary_pos_emb (half-split) on a fixture", "[kernels][llama]") {
  const std::string path = std::string(RINGZERO_SOURCE_DIR) + "/tests/fixtures/hf_rope/rope.txt";
  std::ifstream f(path);
  REQUIRE(f.good());
  std::string line;
  int cases = 0;
  auto read_floats = [&](const char* tag, size_t n) {
    std::string l;
    REQUIRE(std::getline(f, l));
    std::istringstream in(l);
    std::string got;
    in >> got;
    REQUIRE(got == tag);
    std::vector<float> v(n);
    for (float& x : v) REQUIRE(in >> x);
    return v;
  };
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream hdr(line);
    std::string word;
    double theta;
    int hs, NH, NKV, T, pos0;
    REQUIRE((hdr >> word >> theta >> hs >> NH >> NKV >> T >> pos0));
    REQUIRE(word == "case");
    CAPTURE(theta, hs, NH, NKV, T, pos0);
    const size_t n = size_t(T) * (NH + 2 * NKV) * hs;
    const std::vector<float> inv = read_floats("inv_freq", size_t(hs) / 2), in = read_floats("in", n),
                             want = read_floats("out", n);
    for (int i = 0; i < hs / 2; ++i) {
      const float ours = rope_inv_freq(float(theta), hs, i);
      CHECK(std::abs(ours - inv[i]) <= std::abs(inv[i]) * 1.2e-7f);  // at most one ulp apart
    }
    std::vector<float> got = in;
    rope_forward(got.data(), 1, T, NH, NKV, hs, pos0, float(theta));
    double worst = 0;
    for (size_t k = 0; k < n; ++k) worst = std::max(worst, std::abs(double(got[k]) - want[k]) / (1.0 + std::abs(want[k])));
    INFO("worst |ours - transformers| / (1 + |transformers|) = " << worst);
    CHECK(worst < 4e-6);
    ++cases;
  }
  CHECK(cases == 3);
}

// --- SwiGLU

TEST_CASE("swiglu backward matches finite differences", "[kernels][fd][llama]") {
  const int N = 4, H = 9;
  Vec gate_up = randn(size_t(N) * 2 * H, 39, 2.0), w = randn(size_t(N) * H, 40), out(size_t(N) * H);
  auto J = [&] {
    swiglu_forward(out.data(), gate_up.data(), N, H);
    return dot(out, w);
  };
  J();
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < H; ++c) {  // the formula: silu(gate) * up, silu(x) = x / (1 + exp(-x))
      const double g = gate_up[size_t(n) * 2 * H + c], u = gate_up[size_t(n) * 2 * H + H + c];
      CHECK(out[size_t(n) * H + c] == Approx(g / (1.0 + std::exp(-g)) * u).epsilon(1e-14));
    }
  Vec d(gate_up.size(), 7.0);  // assigned: the poison must be overwritten everywhere
  swiglu_backward(d.data(), w.data(), gate_up.data(), N, H);
  check_fd("swiglu dgate_up", gate_up, d, 0.0, J);
}

// fp32 and bf16 in the tails: no NaN or inf where exp(-x) overflows, silu -> 0 far below 0
// and -> x far above, the gradient -> 0 and -> up; and a row longer than one chunk (256).
TEMPLATE_TEST_CASE("swiglu is finite and exact in the tails", "[kernels][llama]", float, bf16) {
  using E = TestType;
  const int H = 300, N = 1;
  std::vector<E> gu(2 * H), out(H), d(2 * H), dout(H, from_float<E>(1.0f));
  const float tails[] = {-1e4f, -100.0f, -30.0f, 0.0f, 30.0f, 100.0f, 1e4f};
  for (int c = 0; c < H; ++c) {
    gu[c] = from_float<E>(c < 7 ? tails[c] : 0.01f * float(c - 150));
    gu[H + c] = from_float<E>(2.0f);
  }
  swiglu_forward(out.data(), gu.data(), N, H);
  swiglu_backward(d.data(), dout.data(), gu.data(), N, H);
  for (int c = 0; c < H; ++c) {
    const double x = as_float(gu[c]);
    CAPTURE(c, x);
    REQUIRE(std::isfinite(as_float(out[c])));
    REQUIRE(std::isfinite(as_float(d[c])));
    REQUIRE(std::isfinite(as_float(d[H + c])));
    const double s = 1.0 / (1.0 + std::exp(-x));
    const double rel = std::is_same_v<E, bf16> ? 1.0 / 128 : 1e-5;
    CHECK(std::abs(as_float(out[c]) - 2.0 * x * s) <= rel * std::abs(2.0 * x * s) + 1e-30);
    CHECK(std::abs(as_float(d[H + c]) - x * s) <= rel * std::abs(x * s) + 1e-30);
    // dgate = up * s * (1 + x * (1 - s)) cancels near x = -1.28 (the bracket's two terms
    // nearly meet), so its error is judged against the terms' size, not the small result.
    const double dg = 2.0 * s * (1.0 + x * (1.0 - s));
    const double dg_terms = 2.0 * s * (1.0 + std::abs(x) * (1.0 - s));
    CHECK(std::abs(as_float(d[c]) - dg) <= rel * dg_terms + 1e-30);
  }
}

// --- grouped-query attention

// qkv's row: q (C = NH*hs), then k and v (NKV*hs each).
static int qkv_width(int C, int NH, int NKV) { return C + 2 * NKV * (C / NH); }

static void attention_fd(int B, int T, int NH, int NKV, int hs, bool flash, uint64_t seed) {
  const int C = NH * hs, W = qkv_width(C, NH, NKV);
  CAPTURE(B, T, NH, NKV, hs, flash);
  Vec qkv = randn(size_t(B) * T * W, seed), w = randn(size_t(B) * T * C, seed + 1);
  Vec out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
  std::vector<float> lse(size_t(B) * NH * T);
  auto J = [&] {
    if (flash) attention_forward_flash(out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
    else attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    return dot(out, w);
  };
  J();
  Vec dqkv(qkv.size(), 0.125);
  if (flash) attention_backward_flash(dqkv.data(), w.data(), qkv.data(), lse.data(), B, T, C, NH, NKV);
  else attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
  check_fd(flash ? "flash dqkv" : "dqkv", qkv, dqkv, 0.125, J);
}

TEST_CASE("grouped-query attention backward matches finite differences", "[kernels][fd][llama]") {
  SECTION("materialised, 4 heads on 2 kv heads") { attention_fd(2, 4, 4, 2, 3, false, 41); }
  SECTION("materialised, 3 heads on 1 kv head (multi-query)") { attention_fd(2, 4, 3, 1, 2, false, 43); }
  SECTION("materialised, two causal row blocks") { attention_fd(1, 40, 2, 1, 2, false, 45); }
  // The flash backward recomputes probabilities from an fp32 lse: about 1e-7 relative.
  SECTION("flash, 4 heads on 2 kv heads") { attention_fd(2, 4, 4, 2, 3, true, 47); }
  SECTION("flash, 3 heads on 1 kv head, two row blocks") { attention_fd(1, 40, 3, 1, 2, true, 49); }
}

// Grouped-query attention is multi-head attention on k and v repeated per query head
// (query head h reading kv head h / G, not h % NKV): out, att and lse bitwise (the same
// products on the same values, only the strides differ), dq bitwise, and a kv head's dk
// and dv the sum of its G query heads' (summed in another order: to rounding).
template <typename E>
static void check_gqa_against_repeated(int NH, int NKV, bool flash) {
  const int B = 2, T = 37, hs = 8, C = NH * hs, G = NH / NKV;
  const int W = qkv_width(C, NH, NKV), W3 = 3 * C;
  CAPTURE(NH, NKV, flash);
  const std::vector<E> qkv = narrow<E>(randn(size_t(B) * T * W, 51)), dout = narrow<E>(randn(size_t(B) * T * C, 52));
  std::vector<E> rep(size_t(B) * T * W3);  // (B, T, 3C): kv head h / G copied to head h
  for (size_t r = 0; r < size_t(B) * T; ++r)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < hs; ++i) {
        rep[r * W3 + h * hs + i] = qkv[r * W + h * hs + i];
        rep[r * W3 + C + h * hs + i] = qkv[r * W + C + (h / G) * hs + i];
        rep[r * W3 + 2 * C + h * hs + i] = qkv[r * W + C + NKV * hs + (h / G) * hs + i];
      }
  std::vector<E> out(size_t(B) * T * C), out_r(out.size()), att(size_t(B) * NH * T * T), att_r(att.size());
  std::vector<float> lse(size_t(B) * NH * T), lse_r(lse.size());
  std::vector<E> d(qkv.size(), from_float<E>(0.0f)), d_r(rep.size(), from_float<E>(0.0f));
  if (flash) {
    attention_forward_flash(out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
    attention_forward_flash(out_r.data(), lse_r.data(), rep.data(), B, T, C, NH, NH);
    REQUIRE(std::memcmp(lse.data(), lse_r.data(), lse.size() * sizeof(float)) == 0);
    attention_backward_flash(d.data(), dout.data(), qkv.data(), lse.data(), B, T, C, NH, NKV);
    attention_backward_flash(d_r.data(), dout.data(), rep.data(), lse_r.data(), B, T, C, NH, NH);
  } else {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    attention_forward(out_r.data(), att_r.data(), rep.data(), B, T, C, NH, NH);
    REQUIRE(std::memcmp(att.data(), att_r.data(), att.size() * sizeof(E)) == 0);
    attention_backward(d.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
    attention_backward(d_r.data(), dout.data(), rep.data(), att_r.data(), B, T, C, NH, NH);
  }
  REQUIRE(std::memcmp(out.data(), out_r.data(), out.size() * sizeof(E)) == 0);
  double worst = 0, scale = 0;
  for (size_t r = 0; r < size_t(B) * T; ++r) {
    REQUIRE(std::memcmp(&d[r * W], &d_r[r * W3], size_t(C) * sizeof(E)) == 0);  // dq
    for (int part = 1; part <= 2; ++part)
      for (int g = 0; g < NKV; ++g)
        for (int i = 0; i < hs; ++i) {
          double sum = 0;
          for (int h = g * G; h < (g + 1) * G; ++h) sum += as_float(d_r[r * W3 + part * C + h * hs + i]);
          const double got = as_float(d[r * W + C + (part - 1) * NKV * hs + g * hs + i]);
          worst = std::max(worst, std::abs(got - sum));
          scale = std::max(scale, std::abs(sum));
        }
  }
  INFO("dk, dv: max |grouped - sum over the group| " << worst << ", max |gradient| " << scale);
  CHECK(scale > 0.1);
  CHECK(worst <= (std::is_same_v<E, bf16> ? 2e-2 : 1e-5) * scale);
}

TEST_CASE("grouped-query attention is multi-head attention on repeated k and v", "[kernels][llama]") {
  for (bool flash : {false, true}) {
    check_gqa_against_repeated<float>(6, 2, flash);
    check_gqa_against_repeated<float>(4, 1, flash);
    check_gqa_against_repeated<bf16>(6, 3, flash);
  }
}
