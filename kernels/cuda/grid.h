// kernels/cuda/grid.h: the grid of a grid-stride loop (RZ_GRID_STRIDE, common.cuh), in plain
// C++ so that host tests can say which shapes make every thread take more than one pass.
#pragma once

#include <cstddef>

namespace rz::cuda {

// Enough blocks to fill any GPU, capped so the block count is a function of n alone; past
// kMaxGridBlocks * threads elements each thread takes a second (third, ...) pass. The
// CUDA-on-CPU emulator's build lowers the cap (tests/cuemu/CMakeLists.txt), so its tests
// reach the second pass at sizes a CPU runs in milliseconds; every other build keeps 65535.
#ifndef RZ_MAX_GRID_BLOCKS
#define RZ_MAX_GRID_BLOCKS 65535
#endif
constexpr int kThreads = 256;
constexpr size_t kMaxGridBlocks = RZ_MAX_GRID_BLOCKS;
static_assert(kMaxGridBlocks >= 1 && kMaxGridBlocks <= 65535, "the grid cap is a grid.x of 1 .. 65535 blocks");
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
