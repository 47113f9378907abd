// Tests of the CUDA kernels against their CPU twins. Without a GPU (or a driver) every
// case says so and skips; CI has none, so there these tests only prove the backend links.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/global_norm.h"
#include "kernels/cuda/cuda_kernels.h"

using namespace rz;

static bool have_gpu() {
  static const int n = cuda::device_count();
  if (n == 0) WARN("skipped: no CUDA device visible to this process");
  return n > 0;
}

// A device copy of a host vector, freed on scope exit.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(const std::vector<T>& host) : n(host.size()) {
    ptr = static_cast<T*>(cuda::device_alloc(n * sizeof(T)));
    cuda::copy_to_device(ptr, host.data(), n * sizeof(T));
  }
  explicit DeviceArray(size_t count) : n(count) { ptr = static_cast<T*>(cuda::device_alloc(n * sizeof(T))); }
  ~DeviceArray() { cuda::device_free(ptr); }
  std::vector<T> to_host() const {
    std::vector<T> out(n);
    cuda::copy_to_host(out.data(), ptr, n * sizeof(T));
    return out;
  }
};

TEST_CASE("fp32 -> bf16 on the GPU is bitwise the CPU's round-to-nearest-even") {
  if (!have_gpu()) return;
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                          3.0e38f, -1.17549435e-38f};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 100000; ++i) x.push_back(normal(rng));
  DeviceArray<float> dx(x);
  DeviceArray<bf16> dy(x.size());
  cuda::f32_to_bf16(dx.ptr, dy.ptr, x.size());
  auto y = dy.to_host();
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) mismatches += y[i].bits != float_to_bf16(x[i]).bits;
  REQUIRE(mismatches == 0);

  DeviceArray<float> back(x.size());
  cuda::bf16_to_f32(dy.ptr, back.ptr, x.size());
  auto z = back.to_host();
  for (size_t i = 0; i < x.size(); ++i) {
    float want = bf16_to_float(y[i]);
    REQUIRE(std::memcmp(&z[i], &want, 4) == 0);
  }
}

TEST_CASE("sum of squares on the GPU matches the CPU twin's sequential fp64 sum") {
  if (!have_gpu()) return;
  for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(257), size_t(1000003)}) {
    std::vector<float> x(n);
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (auto& xi : x) xi = u(rng);
    double want = sum_squares(x.data(), n);  // the CPU twin
    DeviceArray<float> dx(x);
    double got = cuda::sum_of_squares_f32(dx.ptr, n);
    REQUIRE(got == Approx(want).epsilon(1e-12).margin(1e-300));
  }
}

TEST_CASE("AdamW on the GPU matches the CPU twin (fp32 and bf16 mixed precision)") {
  if (!have_gpu()) return;
  const size_t n = 100003;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(n), g(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    w[i] = normal(rng);
    g[i] = normal(rng) * 0.1f;
    m[i] = normal(rng) * 0.01f;
    v[i] = std::abs(normal(rng)) * 1e-4f;
  }
  AdamWStep s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  s.t = 7;

  SECTION("fp32") {
    std::vector<float> cw = w, cm = m, cv = v;
    adamw_update<float, float>(cw.data(), nullptr, cm.data(), cv.data(), g.data(), n, s);
    DeviceArray<float> dw(w), dg(g), dm(m), dv(v);
    cuda::adamw_f32(dw.ptr, dw.ptr, dg.ptr, dm.ptr, dv.ptr, n, s);
    auto gw = dw.to_host(), gm = dm.to_host(), gv = dv.to_host();
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(std::abs(gw[i] - cw[i]) <= 1e-6f + 1e-6f * std::abs(cw[i]));
      REQUIRE(std::abs(gm[i] - cm[i]) <= 1e-7f + 1e-6f * std::abs(cm[i]));
      REQUIRE(std::abs(gv[i] - cv[i]) <= 1e-9f + 1e-6f * std::abs(cv[i]));
    }
  }
  SECTION("bf16 params and grads, fp32 master") {
    std::vector<bf16> p(n), gb(n);
    for (size_t i = 0; i < n; ++i) {
      p[i] = float_to_bf16(w[i]);
      gb[i] = float_to_bf16(g[i]);
    }
    std::vector<float> cmaster = w, cm = m, cv = v;
    std::vector<bf16> cp = p;
    adamw_update<bf16, bf16>(cp.data(), cmaster.data(), cm.data(), cv.data(), gb.data(), n, s);
    DeviceArray<float> dmaster(w), dm(m), dv(v);
    DeviceArray<bf16> dp(p), dg(gb);
    cuda::adamw_bf16(dmaster.ptr, dp.ptr, dg.ptr, dm.ptr, dv.ptr, n, s);
    auto gmaster = dmaster.to_host();
    auto gp = dp.to_host();
    size_t param_off_by_more_than_one_ulp = 0;
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(std::abs(gmaster[i] - cmaster[i]) <= 1e-6f + 1e-6f * std::abs(cmaster[i]));
      int diff = int(gp[i].bits) - int(cp[i].bits);
      param_off_by_more_than_one_ulp += diff > 1 || diff < -1;
    }
    REQUIRE(param_off_by_more_than_one_ulp == 0);
  }
}
