// kernels/cuda/gelu.cu: GELU, tanh approximation (twin of kernels/cpu/gelu.cpp), and
// the residual addition (kernels/cpu/residual.cpp). Elementwise, grid-stride.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;

// out, inp (n); out may alias inp
template <typename E>
__global__ void gelu_forward_kernel(E* out, const E* inp, size_t n) {
  RZ_GRID_STRIDE(i, n) {
    const float x = load(inp[i]);
    out[i] = store<E>(0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x))));
  }
}

// dinp = gelu'(inp) * dout (assigned; dinp may alias dout)
template <typename E>
__global__ void gelu_backward_kernel(E* dinp, const E* inp, const E* dout, size_t n) {
  RZ_GRID_STRIDE(i, n) {
    const float x = load(inp[i]);
    const float th = tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = store<E>(grad * load(dout[i]));
  }
}

// out = a + b (n); out may alias either
template <typename E>
__global__ void residual_forward_kernel(E* out, const E* a, const E* b, size_t n) {
  RZ_GRID_STRIDE(i, n) out[i] = store<E>(load(a[i]) + load(b[i]));
}

}  // namespace

template <typename E>
void gelu_forward(E* out, const E* inp, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_forward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(out, inp, n);
  CUDA_CHECK_LAUNCH("gelu_forward_kernel", s);
}

template <typename E>
void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_backward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
  CUDA_CHECK_LAUNCH("gelu_backward_kernel", s);
}

template <typename E>
void residual_forward(E* out, const E* a, const E* b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  residual_forward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH("residual_forward_kernel", s);
}

#define RZ_INSTANTIATE(E)                                                           \
  template void gelu_forward<E>(E*, const E*, size_t, cudaStream_t);                \
  template void gelu_backward<E>(E*, const E*, const E*, size_t, cudaStream_t);     \
  template void residual_forward<E>(E*, const E*, const E*, size_t, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
