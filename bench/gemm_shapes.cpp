// bench/gemm_shapes.cpp: fp32 GEMM speed at a linear layer's exact shapes, one thread,
// Eigen (the reference) vs oneDNN's fp32 matmul vs ringzero's own packed kernel
// (kernels/cpu/gemm_f32.h), for the three products a linear layer runs:
//   fwd   out (N,OC)      = inp (N,C) * W^T + bias
//   dinp  dinp (N,C)     += dout (N,OC) * W
//   dw    dW (OC,C)      += dout^T * inp
// A fourth column runs oneDNN's bf16 matmul on bf16 copies of the same operands (bf16
// out, fp32 accumulation), where the CPU has AVX512_BF16 or AMX-BF16: the matmuls of the
// bf16 step (`--precision bf16`/`auto` there). ONEDNN_VERBOSE=1 names the implementation
// oneDNN picks for each shape. Elsewhere the column says "-".
// Usage: bench_gemm [N] [C:OC ...]   (default: N=1024, the tiny model's four layers and
// its classifier). Prints GFLOP/s by thread CPU time, candidates alternating,
// best of BENCH_GEMM_ROUNDS (15) rounds, so a busy
// machine inflates the numbers less than wall time would.
#include <omp.h>

#include <Eigen/Core>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/matmul_onednn.h"

using namespace rz;

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVec = Eigen::Matrix<float, 1, Eigen::Dynamic>;

double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Seconds per call of each candidate: rounds of ~20 ms each, the candidates alternating
// round by round (so a burst of load hits all of them), best round kept.
std::vector<double> time_alternating(const std::vector<std::function<void()>>& fs, double flops, int rounds) {
  const int reps = std::clamp(int(1e9 / flops), 1, 200);  // ~20 ms at 50 GFLOP/s
  std::vector<double> best(fs.size(), 1e30);
  for (auto& f : fs) f();
  for (int r = 0; r < rounds; ++r)
    for (size_t c = 0; c < fs.size(); ++c) {
      const double t0 = cpu_s();
      for (int i = 0; i < reps; ++i) fs[c]();
      best[c] = std::min(best[c], (cpu_s() - t0) / reps);
    }
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  Eigen::setNbThreads(1);
  int N = 1024;
  std::vector<std::pair<int, int>> shapes{{128, 384}, {128, 128}, {128, 512}, {512, 128}, {128, 257}};
  const char* r_env = std::getenv("BENCH_GEMM_ROUNDS");
  const int rounds = r_env ? std::max(1, std::atoi(r_env)) : 15;
  if (argc > 1) N = std::atoi(argv[1]);
  if (argc > 2) {
    shapes.clear();
    for (int i = 2; i < argc; ++i) {
      int c = 0, oc = 0;
      if (std::sscanf(argv[i], "%d:%d", &c, &oc) != 2 || c <= 0 || oc <= 0) {
        std::fprintf(stderr, "bench_gemm: shape '%s' is not C:OC\n", argv[i]);
        return 2;
      }
      shapes.emplace_back(c, oc);
    }
  }
  if (N <= 0) {
    std::fprintf(stderr, "bench_gemm: N must be positive\n");
    return 2;
  }
  const bool bf16_units = onednn_bf16_matmul_available();
  std::printf("own kernel: %s; oneDNN bf16 matmul: %s\n", gemm_f32_available() ? "AVX2+FMA" : "not available on this CPU",
              onednn_bf16_matmul_status().c_str());
  std::printf("%-5s %5s %5s %5s | %8s %8s %8s %9s  (GFLOP/s, thread CPU time, 1 thread)\n", "op", "M", "K", "N",
              "eigen", "onednn", "own", "dnn-bf16");
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto [C, OC] : shapes) {
    std::vector<float> inp(size_t(N) * C), w(size_t(OC) * C), bias(OC), out(size_t(N) * OC), dout(size_t(N) * OC),
        dinp(size_t(N) * C), dw(size_t(OC) * C);
    for (auto* v : {&inp, &w, &bias, &dout}) for (float& x : *v) x = nd(g);
    auto narrow = [](const std::vector<float>& v) {
      std::vector<bf16> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_bf16(v[i]);
      return h;
    };
    const std::vector<bf16> inp_h = narrow(inp), w_h = narrow(w), bias_h = narrow(bias), dout_h = narrow(dout);
    std::vector<bf16> out_h(out.size()), dinp_h(dinp.size()), dw_h(dw.size());
    const double flops = 2.0 * N * C * OC;
    Eigen::Map<RowMat> o(out.data(), N, OC), dx(dinp.data(), N, C), dW(dw.data(), OC, C);
    Eigen::Map<const RowMat> x(inp.data(), N, C), W(w.data(), OC, C), d(dout.data(), N, OC);
    Eigen::Map<const RowVec> bv(bias.data(), OC);
    struct Op {
      const char* name;
      int m, k, n;
      std::function<void()> eigen;
      std::function<bool()> onednn;
      std::function<void()> own;
      std::function<bool()> onednn_bf16;
    };
    std::vector<Op> ops{
        {"fwd", N, C, OC,
         [&] {
           o.rowwise() = bv;
           o.noalias() += x * W.transpose();
         },
         [&] { return onednn_matmul(out.data(), OC, {inp.data(), C, 1}, {w.data(), 1, C}, bias.data(), N, C, OC, false, false); },
         [&] { gemm_f32(out.data(), OC, {inp.data(), C, 1}, {w.data(), 1, C}, bias.data(), N, C, OC, false); },
         [&] { return onednn_matmul(out_h.data(), OC, {inp_h.data(), C, 1}, {w_h.data(), 1, C}, bias_h.data(), N, C, OC, false, true); }},
        {"dinp", N, OC, C, [&] { dx.noalias() += d * W; },
         [&] { return onednn_matmul(dinp.data(), C, {dout.data(), OC, 1}, {w.data(), C, 1}, nullptr, N, OC, C, true, false); },
         [&] { gemm_f32(dinp.data(), C, {dout.data(), OC, 1}, {w.data(), C, 1}, nullptr, N, OC, C, true); },
         [&] { return onednn_matmul(dinp_h.data(), C, {dout_h.data(), OC, 1}, {w_h.data(), C, 1}, nullptr, N, OC, C, true, true); }},
        {"dw", OC, N, C, [&] { dW.noalias() += d.transpose() * x; },
         [&] { return onednn_matmul(dw.data(), C, {dout.data(), 1, OC}, {inp.data(), C, 1}, nullptr, OC, N, C, true, false); },
         [&] { gemm_f32(dw.data(), C, {dout.data(), 1, OC}, {inp.data(), C, 1}, nullptr, OC, N, C, true); },
         [&] { return onednn_matmul(dw_h.data(), C, {dout_h.data(), 1, OC}, {inp_h.data(), C, 1}, nullptr, OC, N, C, true, true); }},
    };
    for (auto& op : ops) {
      std::vector<std::function<void()>> fs{op.eigen};
      // oneDNN may be missing or decline a case (then it returns false and computes nothing).
      const bool dnn = op.onednn(), own = gemm_f32_available(), dnn_h = bf16_units && op.onednn_bf16();
      if (dnn) fs.push_back([&] { op.onednn(); });
      if (own) fs.push_back(op.own);
      if (dnn_h) fs.push_back([&] { op.onednn_bf16(); });
      const auto t = time_alternating(fs, flops, rounds);
      size_t at = 1;
      const double te = t[0], td = dnn ? t[at++] : 0.0, to = own ? t[at++] : 0.0, th = dnn_h ? t[at++] : 0.0;
      char bf[16] = "-";
      if (dnn_h) std::snprintf(bf, sizeof bf, "%.1f", flops / th * 1e-9);
      std::printf("%-5s %5d %5d %5d | %8.1f %8.1f %8.1f %9s\n", op.name, op.m, op.k, op.n, flops / te * 1e-9,
                  td > 0 ? flops / td * 1e-9 : 0.0, to > 0 ? flops / to * 1e-9 : 0.0, bf);
    }
  }
  return 0;
}
