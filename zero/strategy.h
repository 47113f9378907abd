// zero/strategy.h: how gradients are synchronised and the optimizer is applied.
//
// A strategy is three independent parts, each owning its buffers and its memory rule:
//   gradient sync    (zero/grad_sync.h)        all-reduce per bucket / reduce-scatter at the
//                                              last micro-step / at every micro-step (staged)
//   optimizer state  (zero/optimizer_state.h)  full / the owned shard
//   parameter store  (zero/param_store.h)      replicated / replicated and gathered after the
//                                              step / sharded and gathered per unit
// and the four strategies are rows of the traits table (zero/strategy_options.h) that pick one
// of each:
//
//   strategy  grads kept on a rank             optimizer state   collectives per step
//   ddp       full buffer                      full              AllReduce(avg) per bucket during backward
//   zero1     full buffer                      owned shard       ReduceScatter per bucket (last micro-step), AllGather params
//   zero2     staging buckets + owned shard    owned shard       ReduceScatter per bucket during backward, AllGather params
//   zero3     as zero2; params sharded too     owned shard       as zero2, but params AllGathered per layer before use
//                                                                 in forward and backward instead of after the step
//
// One class composes them (zero/composed_strategy.h) and runs the step they share: wait for
// the gradient collectives, clip by the global norm, ask the step gate, AdamW on what this
// rank owns, publish the parameters. make_strategy looks the parts up in the traits table.
//
// The training loop drives every strategy the same way:
//   for micro in 0..accum-1:  model.forward(...); model.backward(strategy.begin_micro_step(micro, accum), 1/accum);
//                             strategy.end_micro_step();
//   stats = strategy.step(lr);   // waits for comm, clips, AdamW, all-gathers params
// and a checkpoint reads and writes it through checkpoint_state() (zero/checkpoint_state.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "comm/communicator.h"
#include "model/gpt2.h"
#include "model/grad_sink.h"
#include "zero/buckets.h"
#include "zero/checkpoint_state.h"
#include "zero/grad_sync.h"
#include "zero/param_store.h"
#include "zero/state_bytes.h"
#include "zero/strategy_options.h"

namespace rz {

struct StepStats {
  float grad_norm = 0.0f;          // global L2 norm of the averaged gradient, before clipping
  uint64_t comm_bytes_sent = 0;    // this rank, this step, all collectives
  double comm_seconds = 0.0;       // time spent executing collectives
  double comm_overlapped = 0.0;    // fraction of the gradient-sync time hidden behind backward (0..1)
  double gather_hidden = 0.0;      // zero3: fraction of the parameter all-gather time hidden behind
                                   // forward and backward (0..1); 0 for the others
  bool skipped = false;            // the step gate refused the update (no AdamW, parameters unchanged)
};

// A hook of step(): called with the global gradient norm (the same on every rank) after the
// gradients are synchronised and before AdamW; false skips this step's update. The
// loss-spike guard (train/spike_guard.h) uses it; it may issue blocking collectives.
using StepGate = std::function<bool(double grad_norm)>;

class Strategy {
 public:
  virtual ~Strategy() = default;
  StrategyKind kind() const { return options().kind; }

  // The sink backward writes into for micro-step `micro` of `accum` (0-based).
  virtual GradSink& begin_micro_step(int micro, int accum) = 0;
  // After backward returned.
  virtual void end_micro_step() = 0;
  // After the last micro-step: finish gradient sync, global-norm clip, AdamW (t += 1) on
  // what this rank owns, and bring every rank's model.params() up to date. With a step gate
  // that refuses, only the first part: no AdamW, t unchanged, StepStats::skipped.
  virtual StepStats step(float lr) = 0;
  void set_step_gate(StepGate gate) { gate_ = std::move(gate); }

  // Optimizer state and parameters, for checkpoints (zero/checkpoint_state.h).
  virtual CheckpointState& checkpoint_state() = 0;
  const CheckpointState& checkpoint_state() const { return const_cast<Strategy*>(this)->checkpoint_state(); }

  // What the strategy built, for reports (they ask; they never rebuild it).
  virtual const BucketPlan& bucket_plan() const = 0;
  virtual const StrategyOptions& options() const = 0;
  virtual const GradSync& grad_sync() const = 0;
  virtual const ParamStore& param_store() const = 0;
  // The model-state bytes its parts allocated, per tag (each part reports its own).
  virtual ExactStateBytes state_bytes() const = 0;

 protected:
  StepGate gate_;  // empty: every update applies
};

// The strategy of opts.kind's row in the traits table.
std::unique_ptr<Strategy> make_strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts);
// The strategy a traits row composes, for a row the table does not hold yet (a new
// combination of the three parts, tried before it gets a name): row.shards_optimizer,
// shards_grads and shards_params pick the parts, cuts_buckets_at_units the plan; opts.kind
// (which must be row.kind) still names the device rule and the reports' label.
std::unique_ptr<Strategy> make_strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts,
                                        const StrategyTraits& row);

}  // namespace rz
