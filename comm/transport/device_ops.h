// comm/transport/device_ops.h: the few kernels comm/ runs on device buffers (comm/transport/device_ops.cu,
// built only with CUDA): avg's division by N on the owner (nccl), and the cuda transport's
// reduction, both in fp32 and rounded to bf16 as base/bf16.h rounds (nearest even, quiet
// NaN), so the GPU ring gives bitwise the CPU ring's results. comm/ may not include
// kernels/ (scripts/check-layering.sh), so these live here. Beside them, the one question
// both GPU paths (the cuda transport, nccl) ask before they start: is there a GPU at all.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "comm/communicator.h"

namespace rz::comm_cuda {

// Why this process cannot use a GPU (no usable driver, or no device visible), or "" when it
// can; count, when not null, receives the number of visible devices.
std::string devices_unavailable(int* count = nullptr);

// buf[i] = buf[i] / N for n elements of dtype dt, on stream. Checks the launch.
void divide_by(void* buf, size_t n, DType dt, int N, cudaStream_t stream);

// ring.h's reduce_elements on the device: dst[i] = a[i] + b[i] in fp32 (bf16 rounded once),
// divided by divide_by in fp32 first when divide_by > 0. dst may alias a or b. Checks the launch.
void reduce(DType dt, void* dst, const void* a, const void* b, size_t n, int divide_by, cudaStream_t stream);

}  // namespace rz::comm_cuda
