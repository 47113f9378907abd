// tests/gpu_test_util.h: what the GPU tests share. The GPU is a second backend held
// against the CPU backend (the reference): inputs are made on the host, uploaded, the op
// runs on both, and the GPU's output comes back to be compared element by element with
//   |x - ref| <= atol * rms(ref) + rtol * |ref|
// at tolerances chosen by storage type (tests/gpu_compare.h, tested on the CPU by
// test_gpu_checks). Outputs that an op assigns are poisoned with NaN
// on the GPU first, so an element the kernel never wrote fails the comparison.
//
// Without a CUDA backend in the build, or without a GPU, a GPU test's main() prints why
// and exits with kSkipCode, which tests/CMakeLists.txt registers as SKIP_RETURN_CODE: CTest
// then reports the test as skipped, never as passed.
//
// A program whose tests reach the device only through gpu() may take `--device sim` (first
// argument; gpu_test_main's sim_capable): the backend under test is then the simulated
// device (kernels/sim) instead, which runs everywhere: its ops are the CPU's behind a
// guarded arena, so every comparison is bitwise there, whatever tolerance the test names.
#pragma once

#include <catch2/catch.hpp>

#include "tests/catch_runner.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/bf16.h"
#include "base/memory.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_provider.h"
#include "kernels/registry/device_registry.h"
#include "tests/gpu_compare.h"

namespace rz::test {

constexpr int kSkipCode = 77;

// Why GPU tests cannot run here, or "" when they can: asked of the cuda provider this
// program links (kernels/device_provider.h): the CUDA runtime, none, or the CUDA-on-CPU
// emulator in the tests' *_cuemu programs.
inline std::string gpu_unavailable() { return cuda_provider().unavailable(); }

// The backend under test: cuda:0, or sim:0 with --device sim (bitwise: the CPU's ops).
struct BackendUnderTest {
  Device device{DeviceKind::cuda, 0};
  bool bitwise = false;
};
inline BackendUnderTest& under_test() {
  static BackendUnderTest u;
  return u;
}
// The backend under test, made once per process.
inline Backend& gpu() {
  static std::unique_ptr<Backend> b = make_backend(under_test().device);
  return *b;
}
inline Backend& cpu() { return cpu_backend(); }

template <typename T>
T from_f(float x) {
  if constexpr (std::is_same_v<T, bf16>)
    return float_to_bf16(x);
  else
    return x;
}
template <typename T>
T poison() {
  return from_f<T>(std::numeric_limits<float>::quiet_NaN());
}
template <typename T>
const char* type_name() {
  return std::is_same_v<T, bf16> ? "bf16" : "fp32";
}

template <typename T>
std::vector<T> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<T> v(n);
  for (auto& x : v) {
    float f = normal(rng);
    if (f == 0.0f) f = scale * 1e-3f;  // never zeros
    x = from_f<T>(f);
  }
  return v;
}
inline std::vector<int> random_ints(size_t n, int lo, int hi, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(lo, hi - 1);
  std::vector<int> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// A device copy of a host vector (or n poisoned elements), freed on scope exit.
template <typename T>
class DevBuf {
 public:
  explicit DevBuf(const std::vector<T>& host) : buf_(MemTag::workspace, host.size(), gpu().device()) {
    gpu().copy_from_host(buf_.data(), host.data(), host.size() * sizeof(T));
  }
  static DevBuf poisoned(size_t n) { return DevBuf(std::vector<T>(n, poison<T>())); }
  T* ptr() { return buf_.data(); }
  std::vector<T> host() {
    std::vector<T> out(buf_.size());
    gpu().copy_to_host(out.data(), buf_.data(), buf_.bytes());
    return out;
  }

 private:
  Buffer<T> buf_;
};

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Element-wise comparison (gpu_compare.h's rule); prints the first few offenders and how
// many there were. On a bitwise backend (--device sim) every element must have the
// reference's bits.
template <typename T>
void compare(const std::string& what, const std::vector<T>& got, const std::vector<T>& ref, Tol t) {
  REQUIRE(got.size() == ref.size());
  if (under_test().bitwise) {
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (same_bits(got[i], ref[i])) continue;
      if (bad < 5) UNSCOPED_INFO(what << "[" << i << "]: " << to_f(got[i]) << " vs cpu " << to_f(ref[i]));
      ++bad;
    }
    INFO(what << " (" << ref.size() << " elements): " << bad << " not bitwise the CPU's");
    CHECK(bad == 0);
    return;
  }
  const Outside o = outside_tolerance(got, ref, t);
  if (o.bad > 0) UNSCOPED_INFO(what << ":\n" << o.first);
  INFO(what << " (" << ref.size() << " elements, rms " << o.rms << "): " << o.bad << " outside tolerance");
  CHECK(o.bad == 0);
}

// The main() of a GPU test program (Catch2 without its own main: tests/catch_runner.cpp).
inline int gpu_test_main(int argc, char** argv, const char* program, bool sim_capable = false) {
  if (sim_capable && argc > 2 && std::string(argv[1]) == "--device" && std::string(argv[2]) == "sim") {
    under_test() = BackendUnderTest{Device{DeviceKind::sim, 0}, true};
    argv[2] = argv[0];
    std::printf("%s: on %s against %s, bitwise\n", program, gpu().name().c_str(), cpu().name().c_str());
    return rz::test::run_catch_session(argc - 2, argv + 2);
  }
  const std::string why = gpu_unavailable();
  if (!why.empty()) {
    std::printf("%s: SKIPPED: %s\n", program, why.c_str());
    return kSkipCode;
  }
  std::printf("%s: on %s against %s\n", program, gpu().name().c_str(), cpu().name().c_str());
  return rz::test::run_catch_session(argc, argv);
}

}  // namespace rz::test
