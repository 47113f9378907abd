// tests/test_kernels_gemm.cpp: ringzero's own fp32 GEMM (kernels/cpu/gemm_f32.h) against
// its contract, bitwise: every element is one fused multiply-add chain in k order from dst's
// old value (accumulate), the bias, or zero. Odd sizes around the register block (6 x 16),
// the cache blocks (96 rows, 256 k) and the one-row path (M = 1: 8-column blocks, 8 k
// steps per transposed block), every operand layout the linear layers use plus
// far-strided ones (the packed path), poisoned outputs, and 1 vs 2 threads.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/matmul.h"

using namespace rz;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(g);
  return v;
}

// One layout of an (R, S) operand in a buffer: row-major with a padded row, or transposed
// (column-major) with a padded column; `far` pads far enough to take the packed path.
struct Layout {
  bool transposed;
  int64_t pad;
};
struct Operand {
  std::vector<float> buf;
  GemmOperand op;
};
Operand make(int64_t R, int64_t S, Layout l, uint32_t seed) {
  Operand o;
  const int64_t ld = (l.transposed ? R : S) + l.pad;
  o.buf = randn(size_t(ld) * size_t(l.transposed ? S : R) + 1, seed);
  o.op = l.transposed ? GemmOperand{o.buf.data(), 1, ld} : GemmOperand{o.buf.data(), ld, 1};
  return o;
}
float at(const GemmOperand& x, int64_t i, int64_t j) { return x.data[i * x.row_stride + j * x.col_stride]; }

// The contract, as a scalar loop.
void reference(float* dst, int64_t ldd, GemmOperand a, GemmOperand b, const float* bias, int64_t M, int64_t K,
               int64_t N, bool accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = accumulate ? dst[i * ldd + j] : bias ? bias[j] : 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(at(a, i, k), at(b, k, j), acc);
      dst[i * ldd + j] = acc;
    }
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("gemm_f32: bitwise the FMA chain, odd sizes, every layout and start", "[kernels][gemm]") {
  if (!gemm_f32_available()) {
    WARN("this CPU has no AVX2 + FMA (or RINGZERO_FP32_GEMM=eigen): gemm_f32 is not used here");
    return;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t sizes[][3] = {{1, 1, 1},   {5, 3, 17},   {6, 16, 16},  {7, 1, 15},   {13, 40, 33},
                              {97, 300, 31}, {12, 513, 48}, {100, 7, 129}, {193, 257, 18}, {50, 20, 20},
                              {1, 300, 100}, {1, 513, 45}, {1, 7, 9},    {1, 16, 32},   {1, 19, 3}};
  const Layout layouts[] = {{false, 0}, {true, 0}, {false, 3}, {true, 5}, {true, 600}, {false, 9000}, {true, 9000}};
  uint32_t seed = 1;
  for (auto& s : sizes) {
    const int64_t M = s[0], K = s[1], N = s[2];
    for (const Layout& la : layouts)
      for (const Layout& lb : layouts) {
        if ((la.pad > 1000 || lb.pad > 1000) && M * K > 5000) continue;  // far layouts: small sizes only
        Operand a = make(M, K, la, seed++), b = make(K, N, lb, seed++);
        const auto bias = randn(size_t(N), seed++);
        const int64_t ldd = N + 2;
        for (int mode = 0; mode < 3; ++mode) {  // 0: zero start, 1: bias, 2: accumulate
          CAPTURE(M, K, N, la.transposed, la.pad, lb.transposed, lb.pad, mode);
          std::vector<float> got = randn(size_t(M) * ldd, seed++);
          // Poison: a fresh product must overwrite NaNs; the padding columns must stay NaN.
          for (int64_t i = 0; i < M; ++i) {
            if (mode != 2)
              for (int64_t j = 0; j < N; ++j) got[i * ldd + j] = nan;
            got[i * ldd + N] = got[i * ldd + N + 1] = nan;
          }
          std::vector<float> want = got;
          const float* bp = mode == 1 ? bias.data() : nullptr;
          gemm_f32(got.data(), ldd, a.op, b.op, bp, M, K, N, mode == 2);
          reference(want.data(), ldd, a.op, b.op, bp, M, K, N, mode == 2);
          REQUIRE(same_bits(got, want));
        }
      }
  }
}

TEST_CASE("gemm_f32: K = 0 gives the start value; empty products touch nothing", "[kernels][gemm]") {
  if (!gemm_f32_available()) return;
  std::vector<float> dst(6, 7.0f), bias{1, 2, 3};
  const float x = 5.0f;
  gemm_f32(dst.data(), 3, {&x, 1, 1}, {&x, 1, 1}, bias.data(), 2, 0, 3, false);
  REQUIRE(dst == std::vector<float>{1, 2, 3, 1, 2, 3});
  gemm_f32(dst.data(), 3, {&x, 1, 1}, {&x, 1, 1}, nullptr, 2, 0, 3, true);
  REQUIRE(dst == std::vector<float>{1, 2, 3, 1, 2, 3});
  gemm_f32(dst.data(), 3, {&x, 1, 1}, {&x, 1, 1}, nullptr, 0, 4, 3, false);
  gemm_f32(dst.data(), 3, {&x, 1, 1}, {&x, 1, 1}, nullptr, 2, 4, 0, false);
  REQUIRE(dst == std::vector<float>{1, 2, 3, 1, 2, 3});
}

TEST_CASE("gemm_f32 and fp32 matmul: bitwise the same for 1 and 2 threads", "[kernels][gemm]") {
  // Big enough to be split across threads (the kernel runs single-threaded below ~2M MACs).
  const int N = 300, C = 96, OC = 200;
  const auto inp = randn(size_t(N) * C, 11), w = randn(size_t(OC) * C, 12), bias = randn(OC, 13),
             dout = randn(size_t(N) * OC, 14);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> out(size_t(N) * OC), dinp = randn(size_t(N) * C, 15), dw = randn(size_t(OC) * C, 16),
                                            db = randn(OC, 17);
    matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    // One row (sampling's step) wide enough that the one-row path splits its columns.
    std::vector<float> row(2100);
    const auto x = randn(1024, 18), wide = randn(size_t(2100) * 1024, 19);
    matmul_forward(row.data(), x.data(), wide.data(), static_cast<const float*>(nullptr), 1, 1024, 2100);
    omp_set_num_threads(saved);
    out.insert(out.end(), row.begin(), row.end());
    out.insert(out.end(), dinp.begin(), dinp.end());
    out.insert(out.end(), dw.begin(), dw.end());
    out.insert(out.end(), db.begin(), db.end());
    return out;
  };
  REQUIRE(same_bits(run(1), run(2)));
}

// A b packed once (attention's K^T, V, K per head) and multiplied by its top-left corners:
// each product bitwise the FMA chain, K across the 256-step cache block, N ragged and
// smaller than the packed width, a read in place and packed (far-strided).
TEST_CASE("gemm_f32_packed: corners of one packed b, bitwise the FMA chain", "[kernels][gemm]") {
  if (!gemm_f32_available()) {
    WARN("this CPU has no AVX2 + FMA (or RINGZERO_FP32_GEMM=eigen): gemm_f32_packed is not used here");
    return;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t PK = 300, PN = 45;
  uint32_t seed = 500;
  for (const Layout& lb : {Layout{false, 0}, Layout{true, 7}}) {
    Operand b = make(PK, PN, lb, seed++);
    std::vector<float> space(size_t(gemm_f32_packed_floats(PK, PN)), nan);
    const PackedB packed = gemm_f32_pack_b(space.data(), b.op, PK, PN);
    const int64_t corners[][3] = {{32, 32, 45}, {7, 300, 45}, {50, 257, 33}, {6, 1, 16}, {13, 100, 1}, {1, 256, 17}};
    for (auto& c : corners)
      for (const Layout& la : {Layout{false, 3}, Layout{true, 0}, Layout{true, 9000}})
        for (bool accumulate : {false, true}) {
          const int64_t M = c[0], K = c[1], N = c[2], ldd = N + 2;
          CAPTURE(lb.transposed, M, K, N, la.transposed, la.pad, accumulate);
          if (la.pad > 1000 && M * K > 5000) continue;
          Operand a = make(M, K, la, seed++);
          std::vector<float> got = randn(size_t(M) * ldd, seed++);
          for (int64_t i = 0; i < M; ++i) {
            if (!accumulate)
              for (int64_t j = 0; j < N; ++j) got[i * ldd + j] = nan;
            got[i * ldd + N] = got[i * ldd + N + 1] = nan;  // past N: must stay untouched
          }
          std::vector<float> want = got;
          gemm_f32_packed(got.data(), ldd, a.op, packed, M, K, N, accumulate);
          reference(want.data(), ldd, a.op, b.op, nullptr, M, K, N, accumulate);
          REQUIRE(same_bits(got, want));
        }
  }
}
