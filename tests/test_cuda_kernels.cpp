// Tests of the CUDA kernels against their CPU twins. Without a GPU (or a driver) every
// case says so and skips; CI has none, so there these tests only prove the backend links.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/bf16.h"
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

TEST_CASE("sum of squares on the GPU matches the sequential fp64 sum") {
  if (!have_gpu()) return;
  for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(257), size_t(1000003)}) {
    std::vector<float> x(n);
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    double want = 0.0;
    for (auto& xi : x) {
      xi = u(rng);
      want += double(xi) * double(xi);
    }
    DeviceArray<float> dx(x);
    double got = cuda::sum_of_squares_f32(dx.ptr, n);
    REQUIRE(got == Approx(want).epsilon(1e-12).margin(1e-300));
  }
}
