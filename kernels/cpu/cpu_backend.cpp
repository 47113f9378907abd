// kernels/cpu/cpu_backend.cpp: Ops<E> and Backend for host memory, forwarding to the
// templated kernels. "Device" memory is host memory, so copies are memcpy and every op
// has finished when it returns.
#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/crossentropy.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/global_norm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace rz {

namespace {

template <typename E>
class CpuOps final : public Ops<E> {
 public:
  void encoder_forward(E* out, const int* inp, const E* wte, const E* wpe, int B, int T, int C) override {
    rz::encoder_forward(out, inp, wte, wpe, B, T, C);
  }
  void encoder_backward(E* dwte, E* dwpe, const E* dout, const int* host_inp, int B, int T, int C) override {
    rz::encoder_backward(dwte, dwpe, dout, host_inp, B, T, C);
  }
  void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* weight, const E* bias,
                         int N, int C) override {
    rz::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                          const float* mean, const float* rstd, int N, int C) override {
    rz::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(E* out, const E* inp, const E* weight, const E* bias, int N, int C, int OC) override {
    rz::matmul_forward(out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight, int N,
                       int C, int OC) override {
    rz::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void attention_forward(E* out, E* att, const E* qkv, int B, int T, int C, int NH, int NKV) override {
    rz::attention_forward(out, att, qkv, B, T, C, NH, NKV);
  }
  void attention_backward(E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C, int NH,
                          int NKV) override {
    rz::attention_backward(dqkv, dout, qkv, att, B, T, C, NH, NKV);
  }
  void attention_forward_flash(E* out, float* lse, const E* qkv, int B, int T, int C, int NH, int NKV) override {
    rz::attention_forward_flash(out, lse, qkv, B, T, C, NH, NKV);
  }
  void attention_backward_flash(E* dqkv, const E* dout, const E* qkv, const float* lse, int B, int T, int C, int NH,
                                int NKV) override {
    rz::attention_backward_flash(dqkv, dout, qkv, lse, B, T, C, NH, NKV);
  }
  void attention_forward_kv(E* out, const E* q, const E* k_cache, const E* v_cache, int B, int Tq, int pos, int Tc,
                            int NH, int NKV, int hs) override {
    rz::attention_forward_kv(out, q, k_cache, v_cache, B, Tq, pos, Tc, NH, NKV, hs);
  }
  void rmsnorm_forward(E* out, float* rstd, const E* inp, const E* weight, int N, int C, float eps) override {
    rz::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(E* dinp, E* dweight, const E* dout, const E* inp, const E* weight, const float* rstd, int N,
                        int C) override {
    rz::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void rope_forward(E* qkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) override {
    rz::rope_forward(qkv, B, T, NH, NKV, hs, pos0, theta);
  }
  void rope_backward(E* dqkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) override {
    rz::rope_backward(dqkv, B, T, NH, NKV, hs, pos0, theta);
  }
  void swiglu_forward(E* out, const E* gate_up, int N, int H) override { rz::swiglu_forward(out, gate_up, N, H); }
  void swiglu_backward(E* dgate_up, const E* dout, const E* gate_up, int N, int H) override {
    rz::swiglu_backward(dgate_up, dout, gate_up, N, H);
  }
  void gelu_forward(E* out, const E* inp, size_t n) override { rz::gelu_forward(out, inp, n); }
  void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n) override {
    rz::gelu_backward(dinp, inp, dout, n);
  }
  void residual_forward(E* out, const E* a, const E* b, size_t n) override { rz::residual_forward(out, a, b, n); }
  void crossentropy_forward(float* losses, float* lse, const E* logits, const int* targets, int N, int V,
                            int Vp) override {
    rz::crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
  }
  void crossentropy_softmax_backward(E* logits, const float* lse, const int* targets, float dloss, int N,
                                     int V, int Vp) override {
    rz::crossentropy_softmax_backward(logits, lse, targets, dloss, N, V, Vp);
  }
};

// ss(x): fixed blocks of kSumBlock elements from the start of the range, each through the
// deterministic kernel, block sums added in block order -- so the result does not depend
// on the number of OpenMP threads.
template <typename X>
double blocked_sum_squares(const X* x, size_t n) {
  if (n == 0) return 0.0;
  const size_t nblocks = (n + kSumBlock - 1) / kSumBlock;
  if (nblocks == 1) return rz::sum_squares(x, n);
  std::vector<double> sums(nblocks);
#pragma omp parallel for schedule(static)
  for (long long b = 0; b < static_cast<long long>(nblocks); ++b) {
    size_t lo = static_cast<size_t>(b) * kSumBlock;
    sums[b] = rz::sum_squares(x + lo, std::min(n, lo + kSumBlock) - lo);
  }
  double s = 0.0;
  for (double v : sums) s += v;
  return s;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend(std::make_unique<CpuOps<float>>(), std::make_unique<CpuOps<bf16>>()) {}

  Device device() const override { return Device{}; }
  std::string name() const override { return strfmt("cpu (%d OpenMP threads)", omp_get_max_threads()); }

  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
  void synchronize() override {}

  void f32_to_bf16(bf16* out, const float* in, size_t n) override { rz::f32_to_bf16(out, in, n); }
  void bf16_to_f32(float* out, const bf16* in, size_t n) override { rz::bf16_to_f32(out, in, n); }

  void accumulate_f32(float* dst, const float* src, size_t n, bool assign) override {
    if (assign)
      copy(dst, src, n * sizeof(float));
    else
      for (size_t i = 0; i < n; ++i) dst[i] += src[i];
  }
  void accumulate_f32(float* dst, const bf16* src, size_t n, bool assign) override {
    for (size_t i = 0; i < n; ++i) dst[i] = (assign ? 0.0f : dst[i]) + bf16_to_float(src[i]);
  }
  void accumulate_bf16(bf16* dst, const bf16* src, size_t n, bool assign) override {
    if (assign)
      copy(dst, src, n * sizeof(bf16));
    else
      for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(bf16_to_float(dst[i]) + bf16_to_float(src[i]));
  }
  double sum_squares(const float* x, size_t n) override { return blocked_sum_squares(x, n); }
  double sum_squares(const bf16* x, size_t n) override { return blocked_sum_squares(x, n); }

  void adamw_update(float* params, float* master, float* m, float* v, const float* grads, size_t n,
                    const AdamWStep& s) override {
    rz::adamw_update(params, master, m, v, grads, n, s);
  }
  void adamw_update(bf16* params, float* master, float* m, float* v, const bf16* grads, size_t n,
                    const AdamWStep& s) override {
    rz::adamw_update(params, master, m, v, grads, n, s);
  }
  void adamw_update(bf16* params, float* master, float* m, float* v, const float* grads, size_t n,
                    const AdamWStep& s) override {
    rz::adamw_update(params, master, m, v, grads, n, s);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

Backend& cpu_backend() {
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  return *cpu;
}

}  // namespace rz
