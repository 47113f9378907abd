// zero/strategy_state.h: a composed strategy's checkpoint state -- its optimizer state and
// its parameter store seen through CheckpointState (zero/checkpoint_state.h).
//
//   full optimizer state    everything, in layout order (one range [0, P))
//   owned-shard state       the owned shard of every bucket, in bucket order, straight
//                           between the owned arrays and the chunks
// In fp32 mode the parameters are the master weights: they come from the parameter store
// (the model's, or zero3's owned shard). On a GPU rank chunks go through a host scratch of
// one chunk (StrategyContext::visit_stored_f32).
#pragma once

#include "zero/checkpoint_state.h"
#include "zero/optimizer_state.h"
#include "zero/param_store.h"
#include "zero/strategy_context.h"

namespace rz {

class StrategyState final : public CheckpointState {
 public:
  StrategyState(StrategyContext& cx, OptimizerState& opt, ParamStore& params) : cx_(cx), opt_(opt), params_(params) {}

  std::vector<std::pair<size_t, size_t>> owned_ranges() const override { return opt_.owned_ranges(); }
  void visit_optimizer_state(const StateChunkFn& fn) const override;
  std::vector<std::pair<size_t, size_t>> param_ranges() const override { return params_.ranges(); }
  void set_master_chunk(size_t begin, const float* data, size_t n) override;
  void set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) override;
  void set_optimizer_step(uint64_t step) override { opt_.t = step; }
  uint64_t optimizer_step() const override { return opt_.t; }
  void visit_params_f32(const ParamChunkFn* fn) override { params_.visit_f32(fn); }
  size_t state_chunk_elems() const override { return cx_.state_chunk_elems(); }

 private:
  StrategyContext& cx_;
  OptimizerState& opt_;
  ParamStore& params_;
};

}  // namespace rz
