// tests/test_model_reference.h: an independent, naive fp64 GPT-2 for the model tests.
//
// Plain loops over llm.c's parameter order (wte, wpe, ln1w[L], ln1b[L], qkvw[L], ...),
// written from the GPT-2 definition and sharing no code with model/ or kernels/: it
// reads its own flat array, so it also checks ringzero's order conversion. Its gradients
// come from central finite differences of its fp64 loss, so nothing of ringzero's
// backward is assumed either.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace reftest {

struct RefConfig {
  int L, C, NH, V, Vp, maxT;
};

// Offsets of the 16 tensors in llm.c's order.
struct RefOffsets {
  size_t wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb,
      lnfw, lnfb, total;
  explicit RefOffsets(const RefConfig& c) {
    const size_t C = c.C, L = c.L;
    size_t o = 0;
    auto take = [&](size_t n) {
      size_t r = o;
      o += n;
      return r;
    };
    wte = take(size_t(c.Vp) * C);
    wpe = take(size_t(c.maxT) * C);
    ln1w = take(L * C);
    ln1b = take(L * C);
    qkvw = take(L * 3 * C * C);
    qkvb = take(L * 3 * C);
    attprojw = take(L * C * C);
    attprojb = take(L * C);
    ln2w = take(L * C);
    ln2b = take(L * C);
    fcw = take(L * 4 * C * C);
    fcb = take(L * 4 * C);
    fcprojw = take(L * C * 4 * C);
    fcprojb = take(L * C);
    lnfw = take(C);
    lnfb = take(C);
    total = o;
  }
};

inline void ref_layernorm(std::vector<double>& out, const std::vector<double>& x, const double* w,
                          const double* b, int N, int C) {
  out.assign(size_t(N) * C, 0.0);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[size_t(n) * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[size_t(n) * C + c] - m) * (x[size_t(n) * C + c] - m);
    v /= C;
    double s = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = (x[size_t(n) * C + c] - m) * s * w[c] + b[c];
  }
}

// y (N, OC) = x (N, IC) W^T + b, W (OC, IC)
inline void ref_linear(std::vector<double>& y, const std::vector<double>& x, const double* W,
                       const double* b, int N, int IC, int OC) {
  y.assign(size_t(N) * OC, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b ? b[o] : 0.0;
      for (int i = 0; i < IC; ++i) s += x[size_t(n) * IC + i] * W[size_t(o) * IC + i];
      y[size_t(n) * OC + o] = s;
    }
}

// Mean cross-entropy over B*T; logits (B,T,V) unpadded if requested.
inline double ref_forward(const RefConfig& c, const std::vector<double>& p, const int* x, const int* y,
                          int B, int T, std::vector<double>* logits_out = nullptr) {
  RefOffsets o(c);
  const int C = c.C, N = B * T, hs = C / c.NH;
  std::vector<double> h(size_t(N) * C), ln, qkv, att(size_t(N) * C), proj, fc;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < C; ++i)
        h[(size_t(b) * T + t) * C + i] = p[o.wte + size_t(x[b * T + t]) * C + i] + p[o.wpe + size_t(t) * C + i];
  for (int l = 0; l < c.L; ++l) {
    ref_layernorm(ln, h, &p[o.ln1w + size_t(l) * C], &p[o.ln1b + size_t(l) * C], N, C);
    ref_linear(qkv, ln, &p[o.qkvw + size_t(l) * 3 * C * C], &p[o.qkvb + size_t(l) * 3 * C], N, C, 3 * C);
    for (int b = 0; b < B; ++b)
      for (int hd = 0; hd < c.NH; ++hd)
        for (int t = 0; t < T; ++t) {
          std::vector<double> w(t + 1);
          double mx = -1e300, sum = 0;
          for (int t2 = 0; t2 <= t; ++t2) {
            double s = 0;
            for (int i = 0; i < hs; ++i)
              s += qkv[(size_t(b) * T + t) * 3 * C + hd * hs + i] * qkv[(size_t(b) * T + t2) * 3 * C + C + hd * hs + i];
            w[t2] = s / std::sqrt(double(hs));
            mx = std::max(mx, w[t2]);
          }
          for (int t2 = 0; t2 <= t; ++t2) sum += (w[t2] = std::exp(w[t2] - mx));
          for (int i = 0; i < hs; ++i) {
            double a = 0;
            for (int t2 = 0; t2 <= t; ++t2) a += w[t2] / sum * qkv[(size_t(b) * T + t2) * 3 * C + 2 * C + hd * hs + i];
            att[(size_t(b) * T + t) * C + hd * hs + i] = a;
          }
        }
    ref_linear(proj, att, &p[o.attprojw + size_t(l) * C * C], &p[o.attprojb + size_t(l) * C], N, C, C);
    for (size_t i = 0; i < h.size(); ++i) h[i] += proj[i];
    ref_layernorm(ln, h, &p[o.ln2w + size_t(l) * C], &p[o.ln2b + size_t(l) * C], N, C);
    ref_linear(fc, ln, &p[o.fcw + size_t(l) * 4 * C * C], &p[o.fcb + size_t(l) * 4 * C], N, C, 4 * C);
    for (double& v : fc) v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    ref_linear(proj, fc, &p[o.fcprojw + size_t(l) * C * 4 * C], &p[o.fcprojb + size_t(l) * C], N, 4 * C, C);
    for (size_t i = 0; i < h.size(); ++i) h[i] += proj[i];
  }
  ref_layernorm(ln, h, &p[o.lnfw], &p[o.lnfb], N, C);
  std::vector<double> logits;
  ref_linear(logits, ln, &p[o.wte], nullptr, N, C, c.V);  // only the V real rows of wte
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    double mx = -1e300, sum = 0;
    for (int v = 0; v < c.V; ++v) mx = std::max(mx, logits[size_t(n) * c.V + v]);
    for (int v = 0; v < c.V; ++v) sum += std::exp(logits[size_t(n) * c.V + v] - mx);
    loss += mx + std::log(sum) - logits[size_t(n) * c.V + y[n]];
  }
  if (logits_out) *logits_out = logits;
  return loss / N;
}

// d loss / d p by central differences (eps 1e-5 in fp64), for every index in `which`
// (all parameters when empty); others are left 0.
inline std::vector<double> ref_grads_fd(const RefConfig& c, std::vector<double> p, const int* x,
                                        const int* y, int B, int T, const std::vector<size_t>& which = {}) {
  std::vector<double> g(p.size(), 0.0);
  const double eps = 1e-5;
  auto one = [&](size_t i) {
    double keep = p[i];
    p[i] = keep + eps;
    double lp = ref_forward(c, p, x, y, B, T);
    p[i] = keep - eps;
    double lm = ref_forward(c, p, x, y, B, T);
    p[i] = keep;
    g[i] = (lp - lm) / (2 * eps);
  };
  if (which.empty())
    for (size_t i = 0; i < p.size(); ++i) one(i);
  else
    for (size_t i : which) one(i);
  return g;
}

}  // namespace reftest
