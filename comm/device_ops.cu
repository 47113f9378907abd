// comm/device_ops.cu: comm/'s device kernels (see device_ops.h).
#include "comm/device_ops.h"

#include <cstdint>

#include "base/check.h"

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

}  // namespace

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
  const cudaError_t e = cudaGetLastError();
  RZ_CHECK(e == cudaSuccess, "comm: launching divide_%s_kernel failed: %s", dtype_name(dt), cudaGetErrorString(e));
}

}  // namespace rz::comm_cuda
