// kernels/cuda/swiglu.cu: SwiGLU on the GPU (twin of kernels/cpu/swiglu.cpp). Elementwise,
// grid-stride over the N*H outputs; element (n, c) reads gate gate_up[n, c] and up
// gate_up[n, H + c]. sigmoid(x) = 1 / (1 + expf(-x)): expf overflows to inf far below 0,
// giving sigmoid 0 and silu -0, never NaN.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

// out (N, H) = silu(gate) * up; gate_up (N, 2H)
template <typename E>
__global__ void swiglu_forward_kernel(E* out, const E* gate_up, int H, size_t n) {
  RZ_GRID_STRIDE(k, n) {
    const size_t row = k / H;
    const int c = int(k % H);
    const E* g = gate_up + row * 2 * H;
    const float x = load(g[c]), up = load(g[H + c]);
    out[k] = store<E>(x / (1.0f + expf(-x)) * up);
  }
}

// dgate_up (N, 2H), assigned: dgate = dout * up * s (1 + x (1 - s)), dup = dout * x * s.
template <typename E>
__global__ void swiglu_backward_kernel(E* dgate_up, const E* dout, const E* gate_up, int H, size_t n) {
  RZ_GRID_STRIDE(k, n) {
    const size_t row = k / H;
    const int c = int(k % H);
    const E* g = gate_up + row * 2 * H;
    const float x = load(g[c]), up = load(g[H + c]), dy = load(dout[k]);
    const float s = 1.0f / (1.0f + expf(-x));
    E* dg = dgate_up + row * 2 * H;
    dg[c] = store<E>(dy * up * s * (1.0f + x * (1.0f - s)));
    dg[H + c] = store<E>(dy * x * s);
  }
}

}  // namespace

template <typename E>
void swiglu_forward(E* out, const E* gate_up, int N, int H, cudaStream_t s) {
  const size_t n = size_t(N) * H;
  if (n == 0) return;
  swiglu_forward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(out, gate_up, H, n);
  CUDA_CHECK_LAUNCH("swiglu_forward_kernel", s);
}

template <typename E>
void swiglu_backward(E* dgate_up, const E* dout, const E* gate_up, int N, int H, cudaStream_t s) {
  const size_t n = size_t(N) * H;
  if (n == 0) return;
  swiglu_backward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(dgate_up, dout, gate_up, H, n);
  CUDA_CHECK_LAUNCH("swiglu_backward_kernel", s);
}

#define RZ_INSTANTIATE(E)                                                            \
  template void swiglu_forward<E>(E*, const E*, int, int, cudaStream_t);             \
  template void swiglu_backward<E>(E*, const E*, const E*, int, int, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
