// kernels/cuda/convert.cu: fp32 <-> bf16 and the accumulation of gradient shards.
// Rounding is round-to-nearest-even with NaN kept quiet (common.cuh's round_to_bf16),
// bit for bit what base/bf16.h does on the CPU.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

// out (n) bf16 <- in (n) fp32
__global__ void f32_to_bf16_kernel(bf16_t* out, const float* in, size_t n) {
  RZ_GRID_STRIDE(i, n) out[i] = round_to_bf16(in[i]);
}

// out (n) fp32 <- in (n) bf16 (exact)
__global__ void bf16_to_f32_kernel(float* out, const bf16_t* in, size_t n) {
  RZ_GRID_STRIDE(i, n) out[i] = load(in[i]);
}

// dst (n) fp32 = (assign ? 0 : dst) + src (n)
template <typename S>
__global__ void accumulate_f32_kernel(float* dst, const S* src, size_t n, bool assign) {
  RZ_GRID_STRIDE(i, n) dst[i] = (assign ? 0.0f : dst[i]) + load(src[i]);
}

// dst (n) bf16 = src (assign), or round(dst + src) added in fp32 (src (n) bf16)
__global__ void accumulate_bf16_kernel(bf16_t* dst, const bf16_t* src, size_t n, bool assign) {
  RZ_GRID_STRIDE(i, n) dst[i] = assign ? src[i] : round_to_bf16(load(dst[i]) + load(src[i]));
}

}  // namespace

void accumulate_bf16(bf16_t* dst, const bf16_t* src, size_t n, bool assign, cudaStream_t s) {
  if (n == 0) return;
  accumulate_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, n, assign);
  CUDA_CHECK_LAUNCH("accumulate_bf16_kernel", s);
}

void f32_to_bf16(bf16_t* out, const float* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(out, in, n);
  CUDA_CHECK_LAUNCH("f32_to_bf16_kernel", s);
}

void bf16_to_f32(float* out, const bf16_t* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(out, in, n);
  CUDA_CHECK_LAUNCH("bf16_to_f32_kernel", s);
}

template <typename S>
void accumulate_f32(float* dst, const S* src, size_t n, bool assign, cudaStream_t s) {
  if (n == 0) return;
  accumulate_f32_kernel<S><<<grid_for(n), kThreads, 0, s>>>(dst, src, n, assign);
  CUDA_CHECK_LAUNCH("accumulate_f32_kernel", s);
}

template void accumulate_f32<float>(float*, const float*, size_t, bool, cudaStream_t);
template void accumulate_f32<bf16_t>(float*, const bf16_t*, size_t, bool, cudaStream_t);

}  // namespace rz::cuda
