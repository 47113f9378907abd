// kernels/cuda/grid.h: the grid of a grid-stride loop (RZ_GRID_STRIDE, common.cuh), in plain
// C++ so that host tests can say which shapes make every thread take more than one pass.
#pragma once

#include <cstddef>

namespace rz::cuda {

// Enough blocks to fill any GPU, capped so the block count is a function of n alone; past
// kMaxGridBlocks * threads elements each thread takes a second (third, ...) pass.
constexpr int kThreads = 256;
constexpr size_t kMaxGridBlocks = 65535;
inline unsigned grid_for(size_t n, int threads = kThreads) {
  size_t blocks = (n + threads - 1) / threads;
  if (blocks == 0) blocks = 1;
  return static_cast<unsigned>(blocks < kMaxGridBlocks ? blocks : kMaxGridBlocks);
}
// Passes the busiest thread makes over n elements.
inline size_t grid_stride_passes(size_t n, int threads = kThreads) {
  const size_t per_pass = size_t(grid_for(n, threads)) * size_t(threads);
  return n == 0 ? 0 : (n + per_pass - 1) / per_pass;
}

}  // namespace rz::cuda
