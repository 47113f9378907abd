// kernels/cuda/common.cuh: what every CUDA kernel file shares.
//
// Storage types T are float (fp32 mode) and __nv_bfloat16 (bf16 mode, layout-compatible
// with rz::bf16). Kernels load T into fp32, compute in fp32 (fp64 for sums of squares) and
// round back once on store, round-to-nearest-even with NaN kept quiet: bit for bit what
// base/bf16.h does on the CPU, so a conversion on either side gives the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/cuda_check.h"
#include "kernels/cuda/grid.h"

namespace rz::cuda {

using bf16_t = __nv_bfloat16;

__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(bf16_t x) { return __bfloat162float(x); }

__device__ __forceinline__ bf16_t round_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  uint16_t bits;
  if ((u & 0x7fffffffu) > 0x7f800000u)
    bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  else
    bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return __ushort_as_bfloat16(bits);
}

template <typename T>
__device__ __forceinline__ T store(float x);
template <>
__device__ __forceinline__ float store<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16_t store<bf16_t>(float x) { return round_to_bf16(x); }


#define RZ_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (at most 1024); every thread gets
// the result. The order of additions is fixed by the thread layout, so it is
// deterministic. `scratch` is 32 floats of shared memory, reusable after the call returns.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(x);
}

}  // namespace rz::cuda
