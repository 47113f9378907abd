// Sum of squares on the GPU (the global gradient norm's building block). Each block
// reduces its grid-stride slice in fp64 through shared memory and writes one partial;
// the host adds the partials in block order. The order differs from the CPU twin's
// sequential sum, so the two agree to rounding, not bitwise.
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace rz::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

__device__ inline double load_sq(const float* p, size_t i) {
  double x = p[i];
  return x * x;
}
__device__ inline double load_sq(const uint16_t* p, size_t i) {
  double x = __uint_as_float(static_cast<uint32_t>(p[i]) << 16);
  return x * x;
}

// x (n) T -> partials (gridDim.x) fp64
template <typename T>
__global__ void sum_of_squares_kernel(const T* x, size_t n, double* partials) {
  __shared__ double shared[kThreads];
  double acc = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc += load_sq(x, i);
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

template <typename T>
double sum_of_squares(const T* x, size_t n, void* stream) {
  if (n == 0) return 0.0;
  size_t want = (n + kThreads - 1) / kThreads;
  int blocks = static_cast<int>(want < kMaxBlocks ? want : kMaxBlocks);
  double* partials = static_cast<double*>(device_alloc(sizeof(double) * blocks));
  auto s = static_cast<cudaStream_t>(stream);
  sum_of_squares_kernel<T><<<blocks, kThreads, 0, s>>>(x, n, partials);
  std::vector<double> host(static_cast<size_t>(blocks));
  cudaError_t launch = cudaGetLastError();
  cudaError_t copy = launch == cudaSuccess
                         ? cudaMemcpyAsync(host.data(), partials, sizeof(double) * blocks, cudaMemcpyDeviceToHost, s)
                         : launch;
  cudaError_t sync = copy == cudaSuccess ? cudaStreamSynchronize(s) : copy;
  device_free(partials);
  CUDA_CHECK(sync);
  double total = 0.0;
  for (double p : host) total += p;
  return total;
}

}  // namespace

double sum_of_squares_f32(const float* x, size_t n, void* stream) { return sum_of_squares(x, n, stream); }

double sum_of_squares_bf16(const bf16* x, size_t n, void* stream) {
  return sum_of_squares(reinterpret_cast<const uint16_t*>(x), n, stream);
}

}  // namespace rz::cuda
