// fp32 <-> bf16 conversion on the GPU. Rounding is round-to-nearest-even with NaN kept
// quiet, bit for bit what base/bf16.h does on the CPU (the test checks every class of
// input: ties, NaN, infinities, subnormals).
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace rz::cuda {

namespace {

constexpr int kThreads = 256;

__device__ inline uint16_t round_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// in (n) fp32 -> out (n) bf16 bits
__global__ void f32_to_bf16_kernel(const float* in, uint16_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = round_to_bf16(in[i]);
}

// in (n) bf16 bits -> out (n) fp32
__global__ void bf16_to_f32_kernel(const uint16_t* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __uint_as_float(static_cast<uint32_t>(in[i]) << 16);
}

unsigned grid_for(size_t n) {
  size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks == 0 ? 1 : blocks) : 65535);
}

}  // namespace

void f32_to_bf16(const float* in, bf16* out, size_t n, void* stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, reinterpret_cast<uint16_t*>(out), n);
  CUDA_CHECK_LAUNCH();
}

void bf16_to_f32(const bf16* in, float* out, size_t n, void* stream) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const uint16_t*>(in), out, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rz::cuda
