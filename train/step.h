// train/step.h: one optimizer step as the trainer takes it, timed: the timing hook the
// benchmarks (bench-step, bench-strategies) run instead of a copy of the step of their own.
//
//   for micro in 0..accum-1:
//     fill(micro, inputs, targets)                       the micro-batch (B, T)
//     forward; backward into strategy.begin_micro_step(micro, accum), scaled 1/accum
//   strategy.step(lr)                                    grad sync wait, clip, AdamW, params
//
// The strategy is built from the settings table's rows as Trainer::setup builds it
// (strategy_options): its AdamW weight decay, clipping, buckets. What train does around this
// (the loss all-reduce between forward and backward, non-finite skips, the spike guard's
// gate, the schedule) is the loop's (train/loop.h); a bench passes a constant lr.
#pragma once

#include <functional>

#include "train/config.h"
#include "zero/strategy.h"

namespace rz {

// The StrategyOptions a config gives (strategy, bucket_mb, buckets_in_flight,
// grad_shard_fp32, grad_reduce_dtype, weight_decay, grad_clip) for a model in `precision`:
// train's and the benches' one translation of those keys.
StrategyOptions strategy_options(const TrainConfig& cfg, Precision precision);

// What one step took. fwd_s and bwd_s sum over the micro-steps; bwd_s ends after the
// backend has finished the backward (GPU: synchronized), opt_s after strategy.step's work.
struct StepTimings {
  double fwd_s = 0, bwd_s = 0, opt_s = 0;
  double cpu_s = 0;  // CPU seconds of the whole process over the step (all threads: compute, comm thread)
  StepStats stats;   // strategy.step's
  double total_s() const { return fwd_s + bwd_s + opt_s; }
};

// Fills micro-step `micro`'s inputs and targets, (B, T) each.
using MicroBatchFn = std::function<void(int micro, int* inputs, int* targets)>;

// One step of `accum` micro-steps of (B, T) tokens on `model` through `strategy`.
StepTimings timed_step(GPT2& model, Strategy& strategy, int B, int T, int accum, float lr, const MicroBatchFn& fill);

}  // namespace rz
