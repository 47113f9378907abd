// comm/transport/device_ops.cu: comm/'s device kernels (see device_ops.h).
#include "comm/transport/device_ops.h"

#include <cstdint>

#include "base/check.h"
#include "base/cuda_check.h"

namespace rz::comm_cuda {
namespace {

__device__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

__global__ void divide_f32_kernel(float* buf, size_t n, float div) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    buf[i] = buf[i] / div;
}

__global__ void divide_bf16_kernel(uint16_t* buf, size_t n, float div) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    buf[i] = float_to_bf16_bits(__uint_as_float(uint32_t(buf[i]) << 16) / div);
}

// dst = a + b (or (a + b) / div when div > 0), fp32 arithmetic as reduce_elements does it.
__global__ void reduce_f32_kernel(float* dst, const float* a, const float* b, size_t n, float div) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float s = a[i] + b[i];
    dst[i] = div > 0.0f ? s / div : s;
  }
}

__global__ void reduce_bf16_kernel(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, float div) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float s = __uint_as_float(uint32_t(a[i]) << 16) + __uint_as_float(uint32_t(b[i]) << 16);
    dst[i] = float_to_bf16_bits(div > 0.0f ? s / div : s);
  }
}

unsigned grid_for(size_t n, int threads) {
  const size_t want = (n + threads - 1) / threads;
  return static_cast<unsigned>(want < 4096 ? want : 4096);
}

}  // namespace

std::string devices_unavailable(int* count) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (count != nullptr) *count = e == cudaSuccess ? n : 0;
  if (e != cudaSuccess) return strfmt("no usable CUDA driver or device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
  if (n == 0) return "no CUDA device visible to this process";
  return "";
}

void reduce(DType dt, void* dst, const void* a, const void* b, size_t n, int divide_by, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const float div = divide_by > 0 ? static_cast<float>(divide_by) : 0.0f;
  if (dt == DType::f32)
    reduce_f32_kernel<<<grid_for(n, threads), threads, 0, stream>>>(
        static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n, div);
  else
    reduce_bf16_kernel<<<grid_for(n, threads), threads, 0, stream>>>(
        static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n, div);
  CUDA_CHECK_LAUNCH(dt == DType::f32 ? "reduce_f32_kernel" : "reduce_bf16_kernel", stream);
}

void divide_by(void* buf, size_t n, DType dt, int N, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const size_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  const float div = static_cast<float>(N);
  if (dt == DType::f32)
    divide_f32_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(buf), n, div);
  else
    divide_bf16_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint16_t*>(buf), n, div);
  CUDA_CHECK_LAUNCH(dt == DType::f32 ? "divide_f32_kernel" : "divide_bf16_kernel", stream);
}

}  // namespace rz::comm_cuda
