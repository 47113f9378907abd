// train/schedule.h: the learning-rate schedule (linear warmup, then cosine decay to a floor).
//
//   step s (0-based, the step about to be taken), W warmup steps, S total steps:
//     s < W:   lr * (s + 1) / W                       (never 0 at the first step)
//     s >= W:  lr * (floor + (1 - floor) * 0.5 * (1 + cos(pi * p))),  p = (s - W) / (S - W)
//   so the last step (p close to 1) runs near lr * floor, as in llm.c's train_gpt2.cu.
#pragma once

namespace rz {

struct LrSchedule {
  double lr = 6e-4;      // peak
  int warmup = 0;        // W
  int total_steps = 1;   // S
  double floor = 0.0;    // fraction of lr reached at the end of the decay
  double at(int step) const;
};

}  // namespace rz
