// zero/sharded.h: the optimizer half that zero1, zero2 and zero3 share.
//
// Rank r owns shard r of every bucket (zero/buckets.h): S_b elements of bucket b, the
// owned shards concatenated in bucket order make the rank's "owned" arrays (owned_numel =
// padded_total / N elements, padding included so every index maps by one offset). For
// them alone the rank keeps AdamW m and v and, in bf16 mode, the fp32 master weights. In
// fp32 mode the parameters themselves are the master weights and are updated in place:
// the model's full params (zero1, zero2) or zero3's owned parameter shard (owned_param()).
//
// step_owned(): global norm from this rank's partial and everyone else's (zero/clip.h),
// AdamW on the owned pieces of each tensor (weight decay is per tensor), then
// publish_params(): zero1 and zero2 all-gather every bucket's params in place, in the
// model's precision, so each rank ends the step with the full, identical model; zero3
// does nothing (it gathers per layer when the model next reads them).
//
// Nothing here makes a full-size temporary: start-up, get and set of the optimizer state
// go bucket by bucket between the parameters and the owned arrays.
#pragma once

#include "base/memory.h"
#include "zero/strategy_core.h"

namespace rz {

class ShardedStrategy : public StrategyCore {
 public:
  ShardedStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts);

  std::vector<std::pair<size_t, size_t>> owned_ranges() const override;
  void get_optimizer_state(std::vector<float>& master, std::vector<float>& m,
                           std::vector<float>& v) const override;
  void set_optimizer_state(const float* master_full, const float* m_full, const float* v_full,
                           uint64_t step) override;

 protected:
  // owned_grads: (owned_numel) averaged gradient of this rank's shards, dtype grad_dtype.
  StepStats step_owned(const void* owned_grads, DType grad_dtype, float lr);
  // Where the parameter of layout element `a` lives (a in this rank's part of bucket b), in
  // the model's precision: the model's full params here; zero3's owned shard.
  virtual unsigned char* owned_param(int b, size_t a) const;
  // After AdamW: make the updated shards visible to every rank (all-gather; zero3: nothing).
  virtual void publish_params();
  // The model's parameters from a full fp32 array (zero3: only this rank's shard of it).
  virtual void set_params_from_master(const float* master_full) { model_.set_params_f32(master_full); }

  // get / set of the optimizer state on a GPU rank go through owned-size host copies.
  const float* host_view(const Buffer<float>& a, std::vector<float>& tmp) const;
  void set_owned(Buffer<float>& a, const float* full);

  Buffer<float> master_;  // (owned_numel) bf16 mode only, MemTag::master; on the model's device
  Buffer<float> m_, v_;   // (owned_numel) MemTag::adam_m / adam_v
};

}  // namespace rz
