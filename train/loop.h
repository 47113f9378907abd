// train/loop.h: one rank's training run, from a resolved and validated TrainConfig.
//
// Every rank runs the same loop; rank 0 alone prints (config table, progress, memory
// report, samples) and writes the model file, the manifest and the metrics:
//
//   connect communicator -> build model (init_random(seed) | --init file) -> strategy
//   -> loaders (train: shuffled by seed; val: file order) -> resume (optional)
//   for step s in [start, steps):
//     lr = schedule(s)
//     for micro in 0..accum-1:
//       forward(next train batch); all_reduce(loss)      (every rank sees a non-finite loss)
//       backward into strategy.begin_micro_step(micro, accum), scaled 1/accum
//     strategy.step(lr)                                   (sync, clip, AdamW, params; the spike
//                                                          guard's gate may skip AdamW)
//     metrics; eval every n; sample every m; checkpoint every k
//
// accum = total_batch_tokens / (B * T * world) and must divide exactly.
//
// Non-finite loss: the loss of each micro-batch is averaged across ranks right after its
// forward, before its backward, so every rank decides the same way. The run stops with a
// message naming the step; with --skip-nonfinite a step whose first micro-batch is
// non-finite is skipped (no backward, no update; its batches are consumed). A non-finite
// loss later in a gradient-accumulation window cannot be skipped (the earlier micro-steps'
// gradients are already in flight in the strategy), so the run stops there too.
//
// Loss-spike guard (--spike-zscore; train/spike_guard.h): the strategy's step gate skips
// the update of a step whose loss (or grad norm) is an outlier over a window of accepted
// steps, on a reduced value and by vote, so every rank skips the same steps. Skips of
// either kind count against max_consecutive_skips; at the bound the run stops.
//
// Flight recorder: the communicator records every collective, labelled with the step
// (set_flight_step) and what it is for (CommPurpose); train/flight.h says where the ranks
// write their records.
//
// Resume: the newest complete checkpoint gives master weights, AdamW m, v and t, the step,
// the loaders' positions and the sampling RNG. With the same world size each rank restores
// its own loader position, so the continuation is bitwise the uninterrupted run (fp32).
// With another world size the position is re-derived: the old ranks had each taken j
// windows of the epoch's permutation, i.e. the first j*N_old of it; each new rank starts at
// window floor(j*N_old / N_new) of its own share (a new epoch if that share is used up).
// The windows near the seam may be seen twice or not at all in that epoch; the order of
// later epochs is unchanged.
#pragma once

#include "train/config.h"

namespace rz {

// Runs training on this process's rank (identity from rank_env_from_environment()).
// Returns 0 on success; bad input throws rz::Error.
int run_training(const TrainConfig& cfg);

}  // namespace rz
