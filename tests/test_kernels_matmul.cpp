// tests/test_kernels_matmul.cpp: the linear layers' three products in every storage type
// against an fp64 sum, and oneDNN's strided operands (the bf16-units path) checked in fp32
// so the layouts are tested on any CPU that oneDNN runs on.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "base/bf16.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_onednn.h"

using namespace rz;

namespace {
std::vector<double> randn(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = nd(g);
  return v;
}
template <typename E>
std::vector<E> cast(const std::vector<double>& v) {
  std::vector<E> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<E, bf16>)
      out[i] = float_to_bf16(float(v[i]));
    else
      out[i] = E(v[i]);
  }
  return out;
}
double as_double(float x) { return x; }
double as_double(bf16 x) { return bf16_to_float(x); }
}  // namespace

// bf16 runs on the CPU's bf16 units where it has them (oneDNN), else widened into fp32:
// either way the result must sit within bf16's rounding of the fp64 answer.
TEMPLATE_TEST_CASE("matmul backward accumulates the fp64 answer", "[kernels]", float, bf16) {
  using E = TestType;
  const int N = 13, C = 40, OC = 24;
  const double tol = std::is_same_v<E, bf16> ? 0.25 : 1e-3;
  auto dout = randn(size_t(N) * OC, 1), inp = randn(size_t(N) * C, 2), w = randn(size_t(OC) * C, 3);
  auto dinp0 = randn(size_t(N) * C, 4), dw0 = randn(size_t(OC) * C, 5), db0 = randn(OC, 6);
  // Round the inputs to E first so the reference sees the same operands.
  auto ed = cast<E>(dout), ei = cast<E>(inp), ew = cast<E>(w), edi = cast<E>(dinp0), edw = cast<E>(dw0),
       edb = cast<E>(db0);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = as_double(ed[i]);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] = as_double(ei[i]);
  for (size_t i = 0; i < w.size(); ++i) w[i] = as_double(ew[i]);
  matmul_backward(edi.data(), edw.data(), edb.data(), ed.data(), ei.data(), ew.data(), N, C, OC);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double ref = as_double(cast<E>({dinp0[size_t(n) * C + c]})[0]);
      for (int o = 0; o < OC; ++o) ref += dout[size_t(n) * OC + o] * w[size_t(o) * C + c];
      REQUIRE(as_double(edi[size_t(n) * C + c]) == Approx(ref).margin(tol));
    }
  for (int o = 0; o < OC; ++o) {
    for (int c = 0; c < C; ++c) {
      double ref = as_double(cast<E>({dw0[size_t(o) * C + c]})[0]);
      for (int n = 0; n < N; ++n) ref += dout[size_t(n) * OC + o] * inp[size_t(n) * C + c];
      REQUIRE(as_double(edw[size_t(o) * C + c]) == Approx(ref).margin(tol));
    }
    double ref = as_double(cast<E>({db0[o]})[0]);
    for (int n = 0; n < N; ++n) ref += dout[size_t(n) * OC + o];
    REQUIRE(as_double(edb[o]) == Approx(ref).margin(tol));
  }
}

TEST_CASE("oneDNN strided matmul: plain, transposed, bias and accumulate (fp32)", "[kernels]") {
  const int M = 37, K = 19, N = 23;
  auto a = cast<float>(randn(size_t(M) * K, 7));      // (M, K) row-major
  auto at = std::vector<float>(size_t(K) * M);        // the same matrix stored (K, M)
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) at[size_t(k) * M + i] = a[size_t(i) * K + k];
  auto bt = cast<float>(randn(size_t(N) * K, 8));     // b^T stored (N, K), as a linear weight
  auto bias = cast<float>(randn(N, 9));
  auto c0 = cast<float>(randn(size_t(M) * N, 10));
  auto ref = [&](int i, int j) {
    double s = 0;
    for (int k = 0; k < K; ++k) s += double(a[size_t(i) * K + k]) * bt[size_t(j) * K + k];
    return s;
  };
  std::vector<float> c(size_t(M) * N);
  if (!onednn_matmul(c.data(), N, {a.data(), K, 1}, {bt.data(), 1, K}, bias.data(), M, K, N, false, false)) {
    WARN("built without oneDNN (or oneDNN cannot run fp32 matmul here): strided layouts not exercised");
    return;
  }
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) REQUIRE(c[size_t(i) * N + j] == Approx(ref(i, j) + bias[j]).margin(1e-4));
  // a given transposed (strides swapped), accumulating into c0.
  std::vector<float> acc = c0;
  REQUIRE(onednn_matmul(acc.data(), N, {at.data(), 1, M}, {bt.data(), 1, K}, nullptr, M, K, N, true, false));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      REQUIRE(acc[size_t(i) * N + j] == Approx(ref(i, j) + c0[size_t(i) * N + j]).margin(1e-4));
}

// Thread ranks in one process call oneDNN at the same time (tests/zero_harness.h): every
// thread must get, bitwise, what the same products give when run alone. Each thread runs
// a linear layer's three products (the dweight one contracts over the long N*T side,
// where oneDNN packs operands into its scratchpad) on its own outputs, many times over.
TEMPLATE_TEST_CASE("oneDNN matmul from concurrent threads gives the serial result bitwise", "[kernels]", float,
                   bf16) {
  using E = TestType;
  constexpr bool is_bf16 = std::is_same_v<E, bf16>;
  if (is_bf16 && !onednn_bf16_matmul_available()) {
    WARN("bf16 matmuls do not run on oneDNN here (" << onednn_bf16_matmul_status() << "): not exercised");
    return;
  }
  const int64_t NT = 1024, C = 96, OC = 288;  // (B*T, C) activations, (OC, C) weight
  const auto inp = cast<E>(randn(size_t(NT * C), 11)), w = cast<E>(randn(size_t(OC * C), 12)),
             dout = cast<E>(randn(size_t(NT * OC), 13)), bias = cast<E>(randn(size_t(OC), 14));
  struct Out {
    std::vector<E> out, dinp, dw;
  };
  // fwd: out (NT,OC) = inp * w^T + bias; dinp (NT,C) += dout * w; dw (OC,C) += dout^T * inp.
  auto run = [&](Out& o) {
    o.out.assign(size_t(NT * OC), E{});
    o.dinp.assign(size_t(NT * C), E{});
    o.dw.assign(size_t(OC * C), E{});
    bool ok = onednn_matmul(o.out.data(), OC, {inp.data(), C, 1}, {w.data(), 1, C}, bias.data(), NT, C, OC, false,
                            is_bf16);
    ok = ok && onednn_matmul(o.dinp.data(), C, {dout.data(), OC, 1}, {w.data(), C, 1}, nullptr, NT, OC, C, true,
                             is_bf16);
    ok = ok && onednn_matmul(o.dw.data(), C, {dout.data(), 1, OC}, {inp.data(), C, 1}, nullptr, OC, NT, C, true,
                             is_bf16);
    return ok;
  };
  auto same = [](const std::vector<E>& x, const std::vector<E>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(E)) == 0;
  };
  Out serial;
  bool have = false;
  std::thread([&] {
    omp_set_num_threads(1);  // as a thread rank does
    have = run(serial);
  }).join();
  if (!have) {
    WARN("built without oneDNN (or it cannot run these products here): not exercised");
    return;
  }
  const int threads = 4, repeats = 8;
  std::vector<int> mismatches(threads, 0), failures(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      omp_set_num_threads(1);
      Out o;
      for (int r = 0; r < repeats; ++r) {
        if (!run(o)) ++failures[t];
        if (!same(o.out, serial.out) || !same(o.dinp, serial.dinp) || !same(o.dw, serial.dw)) ++mismatches[t];
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    INFO("thread " << t << " of " << threads << ", " << repeats << " repeats");
    REQUIRE(failures[t] == 0);
    REQUIRE(mismatches[t] == 0);
  }
}
