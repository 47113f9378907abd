// AdamW on the GPU, one thread per element (grid-stride), the arithmetic of the CPU twin
// kernels/cpu/adamw (llm.c's update, decoupled weight decay). Mixed precision: fp32
// master weights and moments; gradients and parameters in fp32 or bf16.
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace rz::cuda {

namespace {

constexpr int kThreads = 256;

__device__ inline float load(const float* p, size_t i) { return p[i]; }
__device__ inline float load(const uint16_t* p, size_t i) {
  return __uint_as_float(static_cast<uint32_t>(p[i]) << 16);
}
__device__ inline void store(float* p, size_t i, float x) { p[i] = x; }
__device__ inline void store(uint16_t* p, size_t i, float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    p[i] = static_cast<uint16_t>((u >> 16) | 0x40);
    return;
  }
  p[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// master, m, v (n) fp32; grad (n) G; param (n) P (fp32 params may alias master).
template <typename G, typename P>
__global__ void adamw_kernel(float* master, P* param, const G* grad, float* m, float* v, size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bias1, float bias2) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float g = load(grad, i) * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float w = master[i];
    w -= lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + weight_decay * w);
    master[i] = w;
    store(param, i, w);
  }
}

unsigned grid_for(size_t n) {
  size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks == 0 ? 1 : blocks) : 65535);
}

void check_step(const AdamWStep& s) {
  RZ_CHECK(s.t >= 1, "adamw: step t must be >= 1, got %llu", (unsigned long long)s.t);
  RZ_CHECK(s.beta1 >= 0.0f && s.beta1 < 1.0f && s.beta2 >= 0.0f && s.beta2 < 1.0f,
           "adamw: betas must be in [0, 1), got %g, %g", double(s.beta1), double(s.beta2));
}

}  // namespace

void adamw_f32(float* master, float* param, const float* grad, float* m, float* v, size_t n,
               const AdamWStep& s, void* stream) {
  check_step(s);
  if (n == 0) return;
  float bias1 = 1.0f - std::pow(s.beta1, float(s.t));
  float bias2 = 1.0f - std::pow(s.beta2, float(s.t));
  adamw_kernel<float, float><<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      master, param, grad, m, v, n, s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale, bias1, bias2);
  CUDA_CHECK_LAUNCH();
}

void adamw_bf16(float* master, bf16* param, const bf16* grad, float* m, float* v, size_t n,
                const AdamWStep& s, void* stream) {
  check_step(s);
  if (n == 0) return;
  float bias1 = 1.0f - std::pow(s.beta1, float(s.t));
  float bias2 = 1.0f - std::pow(s.beta2, float(s.t));
  adamw_kernel<uint16_t, uint16_t><<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      master, reinterpret_cast<uint16_t*>(param), reinterpret_cast<const uint16_t*>(grad), m, v, n,
      s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale, bias1, bias2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rz::cuda
