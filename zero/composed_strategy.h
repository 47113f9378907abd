// zero/composed_strategy.h: the one Strategy -- a gradient sync, an optimizer state and a
// parameter store (zero/strategy.h's table), picked by the traits row of opts.kind, and the
// step they share.
//
// It is the GradSink backward writes into: it follows grads_ready to know when a bucket is
// complete (ranges arrive in layout order, so one cursor suffices) and hands each complete
// bucket to the sync -- on the last micro-step only, unless the sync communicates on every
// micro-step. It keeps the step's communication accounting (StepWindow): bytes and seconds
// from the communicator's counters, and the time the compute thread spent blocked on
// gradient collectives ("exposed"), from which overlapped = 1 - exposed / (time the
// gradient collectives ran); where parameters are gathered per unit, the same for gathers.
//
// step():  parameters.before_update   (zero3: no gathered unit outlives the step)
//          sync.wait, sync.global_norm  (the same number on every rank)
//          gate -> skipped, or:  clip scale, t += 1, AdamW per bucket on optimizer.range(b)
//          parameters.publish        (zero1, zero2: all-gather the updated shards)
#pragma once

#include <cstddef>
#include <memory>

#include "zero/optimizer_state.h"
#include "zero/strategy.h"
#include "zero/strategy_context.h"
#include "zero/strategy_state.h"

namespace rz {

class ComposedStrategy final : public Strategy, public GradSink {
 public:
  // The parts `row` picks (make_strategy passes opts.kind's row of the traits table).
  ComposedStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts, const StrategyTraits& row);

  GradSink& begin_micro_step(int micro, int accum) override;
  void end_micro_step() override;
  StepStats step(float lr) override;
  CheckpointState& checkpoint_state() override { return state_; }

  const BucketPlan& bucket_plan() const override { return cx_.plan; }
  const StrategyOptions& options() const override { return cx_.opts; }
  const GradSync& grad_sync() const override { return *sync_; }
  const ParamStore& param_store() const override { return *params_; }
  ExactStateBytes state_bytes() const override;

  void* grad_ptr(size_t offset, size_t count) override { return sync_->grad_ptr(offset, count); }
  void grads_ready(size_t begin, size_t end) override;

 private:
  StepStats finish_stats(double grad_norm);  // for the window that ends now

  StrategyContext cx_;
  std::unique_ptr<GradSync> sync_;
  OptimizerState opt_;
  std::unique_ptr<ParamStore> params_;
  StrategyState state_;

  int micro_ = 0, accum_ = 1;
  size_t ready_upto_ = 0;  // grads_ready has covered [0, ready_upto_) in this backward
  int next_bucket_ = 0;    // first bucket not yet complete in this backward
};

}  // namespace rz
