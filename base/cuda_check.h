// base/cuda_check.h: the CUDA check macros. A failing runtime or cuBLASLt call
// becomes an rz::Error naming the statement, file:line and the library's own error string;
// a failing kernel launch names the kernel. Header-only, for every module that calls CUDA
// (kernels/cuda, comm/'s cuda transport): it compiles only where the CUDA toolkit's headers
// are on the include path.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>

#include "base/check.h"

#define CUDA_CHECK(expr)                                                                      \
  do {                                                                                        \
    cudaError_t rz_err_ = (expr);                                                             \
    if (rz_err_ != cudaSuccess)                                                               \
      ::rz::fail(::rz::strfmt("%s:%d: %s failed: %s", __FILE__, __LINE__, #expr,              \
                              cudaGetErrorString(rz_err_)));                                  \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                        \
    cublasStatus_t rz_st_ = (expr);                                                           \
    if (rz_st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::rz::fail(::rz::strfmt("%s:%d: %s failed: %s", __FILE__, __LINE__, #expr,              \
                              cublasLtGetStatusString(rz_st_)));                              \
  } while (0)

namespace rz::cuda {
// After a kernel launch: launch-configuration errors surface here, named after the
// kernel. With RINGZERO_CUDA_SYNC=1 in the environment it also waits for the kernel, so an
// error inside it (a bad address) is reported against the kernel that caused it.
inline void check_launch(const char* kernel, cudaStream_t stream, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  static const bool sync_each = [] {
    const char* v = std::getenv("RINGZERO_CUDA_SYNC");
    return v != nullptr && v[0] == '1';
  }();
  if (err == cudaSuccess && sync_each) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) fail(strfmt("%s:%d: kernel %s failed: %s", file, line, kernel, cudaGetErrorString(err)));
}
}  // namespace rz::cuda

#define CUDA_CHECK_LAUNCH(kernel, stream) ::rz::cuda::check_launch(kernel, stream, __FILE__, __LINE__)
