// cli/step_profile.h: a training step's time split by kernel, for `ringzero bench-step`.
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/config.h"

namespace rz {

// One row of the split: a kernel family's forward and backward milliseconds per step
// (process CPU time, so that other processes on a shared machine do not count).
struct OpTime {
  std::string op;
  double fwd_ms = 0, bwd_ms = 0;
};

// Replays one training step's op calls on a CPU backend (the same ops, shapes and order
// as model/gpt2.cpp's forward and backward, then AdamW over every parameter) on buffers
// of the config's shape, timing each call. Returns the median over `steps` replays after
// `warmup`, one row per kernel family (the classifier's matmul apart from the layers').
std::vector<OpTime> profile_step_ops(Backend& be, const GPT2Config& cfg, Precision prec, int B, int T,
                                     int warmup, int steps);

}  // namespace rz
