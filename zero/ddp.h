// zero/ddp.h: data parallel with bucketed AllReduce overlapped with backward.
//
// Every rank keeps everything: the params (model), one full gradient buffer in padded
// bucket coordinates (grads, model precision), and AdamW state for all P parameters
// (m, v; plus fp32 master weights in bf16 mode). Backward accumulates into the buffer
// across micro-steps; on the last micro-step each bucket is all_reduce_async(avg)'d on the
// comm thread the moment grads_ready covers it, while backward goes on with the layers
// below. step() waits for the last bucket, computes the global norm the same way the
// ZeRO strategies do (see zero/clip.h), and runs AdamW on everything.
#pragma once

#include "base/memory.h"
#include "zero/strategy_core.h"

namespace rz {

class DDPStrategy final : public StrategyCore {
 public:
  DDPStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts);

  StrategyKind kind() const override { return StrategyKind::ddp; }
  void* grad_ptr(size_t offset, size_t count) override;
  StepStats step(float lr) override;

  std::vector<std::pair<size_t, size_t>> owned_ranges() const override;
  std::vector<std::pair<size_t, size_t>> param_ranges() const override { return owned_ranges(); }
  // Checkpoint state (ddp.cpp): everything, in layout order.
  void visit_optimizer_state(const StateChunkFn& fn) const override;
  void set_master_chunk(size_t begin, const float* data, size_t n) override;
  void set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) override;

 private:
  void begin_window() override;
  void submit_bucket(int b) override;

  PaddedGradBuffer grads_;       // (padded_total) model precision, MemTag::grads
  Buffer<float> master_;         // (P) bf16 mode only, MemTag::master
  Buffer<float> m_, v_;          // (P) MemTag::adam_m / adam_v
};

}  // namespace rz
