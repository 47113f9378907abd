// kernels/cuda/cuda_check.h: the CUDA check macros. A failing runtime call becomes an
// rz::Error naming the statement, file:line and CUDA's own error string.
#pragma once

#include <cuda_runtime.h>

#include "base/check.h"

#define CUDA_CHECK(expr)                                                                      \
  do {                                                                                        \
    cudaError_t rz_err_ = (expr);                                                             \
    if (rz_err_ != cudaSuccess)                                                               \
      ::rz::fail(::rz::strfmt("%s:%d: %s failed: %s", __FILE__, __LINE__, #expr,              \
                              cudaGetErrorString(rz_err_)));                                  \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
