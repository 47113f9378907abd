// kernels/cuda/cuda_backend.h: the CUDA backend's factory, callable from plain C++.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace rz {

// The op table on GPU `index`: kernels launched on one compute stream, matmuls through
// cuBLASLt, memory from cudaMalloc (registered with base/memory's tracker). Fails with one
// line naming the cause when there is no driver, no device, or no device `index`.
std::unique_ptr<Backend> make_cuda_backend(int index);

// GPUs visible to this process; 0 when there is no driver or no device (never throws).
// The GPU tests ask it whether to run or to skip.
int cuda_device_count();

}  // namespace rz
