// tests/test_cpu_paths.cpp: which of the CPU's matmul paths this machine's test run
// exercised, one CTest entry per path (tests/CMakeLists.txt):
//   test_cpu_path_avx2_gemm    fp32 on ringzero's own AVX2 + FMA GEMM (gemm_f32.h)
//   test_cpu_path_onednn_bf16  bf16 on the CPU's bf16 units through oneDNN (matmul_onednn.h)
//   test_cpu_path_eigen        the fallbacks, forced by RINGZERO_FP32_GEMM=eigen and
//                              RINGZERO_BF16_MATMUL=fp32: fp32 on Eigen, bf16 widened to fp32
// A path that cannot run here exits 77 (CTest: skipped) with one line saying why, so a
// green suite on a machine without AVX512_BF16 shows the oneDNN path as not run instead of
// passing it. Each path runs a linear layer's forward and backward at a small odd shape
// against an fp64 sum of the same (rounded) operands. One line per path, for the summary
// scripts/test.sh prints: "cpu matmul path NAME: exercised (...)" or "...: not exercised: WHY".
#include <catch2/catch.hpp>

#include "tests/catch_runner.h"

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_onednn.h"

using namespace rz;

namespace {

float to_float(float x) { return x; }
float to_float(bf16 x) { return bf16_to_float(x); }

template <typename E>
std::vector<E> random_values(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<E> v(n);
  for (E& x : v) {
    if constexpr (std::is_same_v<E, bf16>)
      x = float_to_bf16(nd(g));
    else
      x = nd(g);
  }
  return v;
}

// out (N, OC) = inp (N, C) * w^T (C, OC) + bias; then dinp (N, C) += dout * w and
// dw (OC, C) += dout^T * inp from zero, against fp64 sums, within rel * |ref| + abs.
struct Tol {
  double rel, abs;
};

template <typename E>
void check_linear_layer(Tol tol) {
  const int N = 37, C = 53, OC = 29;
  const auto inp = random_values<E>(size_t(N) * C, 1), w = random_values<E>(size_t(OC) * C, 2),
             bias = random_values<E>(OC, 3), dout = random_values<E>(size_t(N) * OC, 4);
  std::vector<E> out(size_t(N) * OC), dinp(size_t(N) * C), dw(size_t(OC) * C), db(OC);
  matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double ref = to_float(bias[o]);
      for (int c = 0; c < C; ++c) ref += double(to_float(inp[size_t(n) * C + c])) * to_float(w[size_t(o) * C + c]);
      REQUIRE(to_float(out[size_t(n) * OC + o]) == Approx(ref).epsilon(tol.rel).margin(tol.abs));
    }
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double ref = 0;
      for (int o = 0; o < OC; ++o) ref += double(to_float(dout[size_t(n) * OC + o])) * to_float(w[size_t(o) * C + c]);
      REQUIRE(to_float(dinp[size_t(n) * C + c]) == Approx(ref).epsilon(tol.rel).margin(tol.abs));
    }
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c) {
      double ref = 0;
      for (int n = 0; n < N; ++n) ref += double(to_float(dout[size_t(n) * OC + o])) * to_float(inp[size_t(n) * C + c]);
      REQUIRE(to_float(dw[size_t(o) * C + c]) == Approx(ref).epsilon(tol.rel).margin(tol.abs));
    }
}

// fp32: sums of ~50 products in fp32. bf16: the same sum rounded once to bf16, whose
// half ulp is 2^-8 of the value (twice that for margin), plus a little near zero.
constexpr Tol kF32{1e-5, 1e-4}, kBf16{1.0 / 128, 2e-2};

}  // namespace

TEST_CASE("avx2-gemm: fp32 linear layer on gemm_f32", "[avx2-gemm]") {
  REQUIRE(gemm_f32_available());
  check_linear_layer<float>(kF32);
}

TEST_CASE("onednn-bf16: bf16 linear layer on oneDNN", "[onednn-bf16]") {
  REQUIRE(onednn_bf16_matmul_available());
  // The three products must really run on oneDNN here, not fall back on their own.
  const int M = 8, K = 16, N = 24;
  const auto a = random_values<bf16>(size_t(M) * K, 5), b = random_values<bf16>(size_t(K) * N, 6);
  std::vector<bf16> c(size_t(M) * N);
  REQUIRE(onednn_matmul(c.data(), N, {a.data(), K, 1}, {b.data(), N, 1}, nullptr, M, K, N, false, true));
  REQUIRE(onednn_matmul(c.data(), N, {a.data(), K, 1}, {b.data(), 1, K}, nullptr, M, K, N, true, true));
  check_linear_layer<bf16>(kBf16);
}

TEST_CASE("eigen: fp32 and widened bf16 linear layers on Eigen", "[eigen]") {
  REQUIRE_FALSE(gemm_f32_available());
  REQUIRE_FALSE(onednn_bf16_matmul_available());
  check_linear_layer<float>(kF32);
  check_linear_layer<bf16>(kBf16);
}

int main(int argc, char** argv) {
  const std::string path = argc == 2 ? argv[1] : "";
  std::string why, what;
  if (path == "avx2-gemm") {
    if (!gemm_f32_available()) why = "this CPU has no AVX2 + FMA, or RINGZERO_FP32_GEMM=eigen";
    what = "fp32 on ringzero's AVX2 GEMM";
  } else if (path == "onednn-bf16") {
    const std::string status = onednn_bf16_matmul_status();
    if (status.rfind("on: ", 0) != 0) why = status.substr(std::strlen("off: "));
    what = "bf16 on " + status.substr(std::strlen("on: ")) + " and the CPU's bf16 units";
  } else if (path == "eigen") {
    const char* f = std::getenv("RINGZERO_FP32_GEMM");
    const char* b = std::getenv("RINGZERO_BF16_MATMUL");
    if (!f || std::strcmp(f, "eigen") != 0 || !b || std::strcmp(b, "fp32") != 0)
      why = "needs RINGZERO_FP32_GEMM=eigen and RINGZERO_BF16_MATMUL=fp32 (tests/CMakeLists.txt sets them)";
    what = "fp32 on Eigen, bf16 widened to fp32";
  } else {
    std::fprintf(stderr, "usage: test_cpu_paths avx2-gemm|onednn-bf16|eigen (found '%s')\n", path.c_str());
    return 2;
  }
  if (!why.empty()) {
    std::printf("cpu matmul path %s: not exercised: %s\n", path.c_str(), why.c_str());
    return 77;
  }
  const std::string tag = "[" + path + "]";
  const char* args[] = {argv[0], tag.c_str()};
  const int failed = rz::test::run_catch_session(2, const_cast<char**>(args));
  if (failed == 0) std::printf("cpu matmul path %s: exercised (%s)\n", path.c_str(), what.c_str());
  return failed == 0 ? 0 : 1;
}
