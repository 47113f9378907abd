// tests/gpu_compare.h: how the GPU tests compare a GPU's numbers with the CPU's, in plain
// C++ (no Catch, no CUDA) so that tests/test_gpu_checks.cpp can hold every rule to known
// answers on a machine without a GPU; the GPU tests themselves skip there.
//   element-wise   |x - ref| <= atol * rms(ref) + rtol * |ref|, NaN always outside
//   per tensor     ||x - ref|| / ||ref|| (rel_norm)
//   per run        every step's loss, and step 1's grad norm, within a relative bound
// and the shapes that make grid-stride kernels (kernels/cuda/grid.h) take a second pass.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/bf16.h"
#include "kernels/cuda/grid.h"
#include "model/config.h"

namespace rz::test {

inline float to_f(float x) { return x; }
inline float to_f(bf16 x) { return bf16_to_float(x); }

struct Tol {
  double atol;  // times the rms of the reference
  double rtol;
};
template <typename T>
Tol tol() {
  return std::is_same_v<T, bf16> ? Tol{2e-2, 2e-2} : Tol{2e-5, 1e-5};
}

// The elements of got outside the tolerance around ref (NaN is always outside).
struct Outside {
  size_t bad = 0;
  double rms = 0;     // of ref
  std::string first;  // the first few offenders, one per line
};
template <typename T>
Outside outside_tolerance(const std::vector<T>& got, const std::vector<T>& ref, Tol t) {
  Outside o;
  if (got.size() != ref.size()) {
    o.bad = got.size() > ref.size() ? got.size() : ref.size();
    o.first = "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(ref.size()) + "\n";
    return o;
  }
  double ss = 0;
  for (const T& r : ref) ss += double(to_f(r)) * to_f(r);
  o.rms = ref.empty() ? 0.0 : std::sqrt(ss / double(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double x = to_f(got[i]), r = to_f(ref[i]);
    const double bound = t.atol * o.rms + t.rtol * std::fabs(r);
    if (!(std::fabs(x - r) <= bound)) {
      if (o.bad < 5) {
        char line[160];
        std::snprintf(line, sizeof line, "[%zu]: gpu %.9g cpu %.9g bound %.3g\n", i, x, r, bound);
        o.first += line;
      }
      ++o.bad;
    }
  }
  return o;
}

// ||got - ref|| / ||ref|| (||got - ref|| when ref is all zeros); NaN anywhere gives NaN.
inline double rel_norm(const float* got, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Rows of T positions that make (rows, 4C) -- the MLP's GELU and bias broadcast -- one and a
// half grid-stride passes (kernels/cuda/grid.h), so every thread takes a second pass: 1536
// rows of T = 64 and C = 64 with the 65535-block cap (25.2M elements); 2 on the CUDA-on-CPU
// emulator, whose build lowers the cap to 64 blocks.
constexpr int grid_stride_batch(int T, int C) {
  const size_t per_pass = cuda::kMaxGridBlocks * size_t(cuda::kThreads);
  const size_t row = size_t(T) * 4 * size_t(C);
  return int((3 * per_pass / 2 + row - 1) / row);
}

// test_model_cuda's shape past the grid cap: one layer and the byte vocabulary keep the
// CPU reference at a few seconds, and the per-batch-row attention loop runs B times.
struct ModelShape {
  GPT2Config cfg;
  int B, T;
};
inline ModelShape grid_stride_model_shape() {
  ModelShape s;
  s.cfg.num_layers = 1;
  s.cfg.channels = 64;
  s.cfg.num_heads = 4;
  s.cfg.max_seq_len = 64;
  s.cfg.vocab_size = 257;
  finalize_config(s.cfg);
  s.T = 64;
  s.B = grid_stride_batch(s.T, s.cfg.channels);
  return s;
}

// test_zero_gpu's batch per rank for the tiny preset (C = 64): the same grid-stride second
// pass over (B*T, 4C) as above, through `ringzero train`.
constexpr int kLargeSeq = 64, kLargeBatch = grid_stride_batch(kLargeSeq, 64);

// One optimizer step of `train --metrics` (its JSONL lines).
struct StepMetrics {
  int step = 0;
  double loss = NAN, grad_norm = NAN;
};

// The number after "key": in a JSON line (NaN when absent or not a number, e.g. null).
inline double json_number(const std::string& line, const char* key) {
  const std::string k = std::string("\"") + key + "\":";
  const size_t at = line.find(k);
  if (at == std::string::npos) return NAN;
  const char* p = line.c_str() + at + k.size();
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  return end == p ? NAN : v;
}

// Every step in a metrics file; an unreadable file gives none.
inline std::vector<StepMetrics> read_step_metrics(const std::string& path) {
  std::vector<StepMetrics> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const double step = json_number(line, "step");
    if (!(step >= 1)) continue;
    out.push_back(StepMetrics{int(step), json_number(line, "loss"), json_number(line, "grad_norm")});
  }
  return out;
}

// "" when both runs have the same steps, every loss agrees within `rel` (relative to the
// reference) and so does step 1's grad norm (both runs start from the same parameters, so
// step 1 compares the forward and backward alone); otherwise the first difference.
inline std::string compare_step_metrics(const std::vector<StepMetrics>& got, const std::vector<StepMetrics>& ref,
                                        double rel) {
  if (ref.empty()) return "the reference run has no steps";
  if (got.size() != ref.size())
    return "the runs have " + std::to_string(got.size()) + " and " + std::to_string(ref.size()) + " steps";
  auto close = [rel](double x, double r) { return std::fabs(x - r) <= rel * std::fabs(r); };  // false for NaN
  for (size_t i = 0; i < ref.size(); ++i) {
    char why[200];
    if (got[i].step != ref[i].step) {
      std::snprintf(why, sizeof why, "line %zu: step %d vs %d", i + 1, got[i].step, ref[i].step);
      return why;
    }
    if (!close(got[i].loss, ref[i].loss)) {
      std::snprintf(why, sizeof why, "step %d: loss %.7g vs %.7g (relative bound %g)", ref[i].step, got[i].loss,
                    ref[i].loss, rel);
      return why;
    }
    if (i == 0 && !close(got[i].grad_norm, ref[i].grad_norm)) {
      std::snprintf(why, sizeof why, "step %d: grad norm %.7g vs %.7g (relative bound %g)", ref[i].step,
                    got[i].grad_norm, ref[i].grad_norm, rel);
      return why;
    }
  }
  return "";
}

}  // namespace rz::test
