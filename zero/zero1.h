// zero/zero1.h: ZeRO stage 1 -- optimizer states sharded, gradients whole.
//
// Like ddp, backward accumulates into a full gradient buffer (padded bucket coordinates,
// model precision). On the last micro-step each complete bucket is reduce_scatter_async
// (avg)'d into this rank's owned gradient shard (model precision), overlapped with the rest
// of backward; step() then updates only the owned shard (zero/sharded.h) and all-gathers
// the params.
#pragma once

#include "zero/sharded.h"

namespace rz {

class Zero1Strategy final : public ShardedStrategy {
 public:
  Zero1Strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts);

  StrategyKind kind() const override { return StrategyKind::zero1; }
  void* grad_ptr(size_t offset, size_t count) override;
  StepStats step(float lr) override;

 private:
  void begin_window() override;
  void submit_bucket(int b) override;

  PaddedGradBuffer grads_;             // (padded_total) model precision, MemTag::grads
  Buffer<unsigned char> owned_grads_;  // (owned_numel) model precision, MemTag::grads
};

}  // namespace rz
