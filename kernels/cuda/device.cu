// Device management for the CUDA backend: discovery and plain cudaMalloc'd buffers.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace rz::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes > 0) CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void device_free(void* p) {
  if (p != nullptr) CUDA_CHECK(cudaFree(p));
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace rz::cuda
