// comm/device_ops.h: the few kernels comm/ runs on device buffers (comm/device_ops.cu,
// built only with CUDA): avg's division by N on the owner, in fp32, rounded to bf16 as
// base/bf16.h rounds (nearest even, quiet NaN). comm/ may not include kernels/
// (scripts/check-layering.sh), so these live here.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "comm/communicator.h"

namespace rz::comm_cuda {

// buf[i] = buf[i] / N for n elements of dtype dt, on stream. Checks the launch.
void divide_by(void* buf, size_t n, DType dt, int N, cudaStream_t stream);

}  // namespace rz::comm_cuda
