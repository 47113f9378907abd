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
// Nothing here makes a full-size temporary: start-up goes bucket by bucket from the
// parameters to the owned arrays, and the checkpoint getters and setters (sharded.cpp)
// stream between the owned arrays and the file a chunk at a time.
#pragma once

#include "base/memory.h"
#include "zero/strategy_core.h"

namespace rz {

class ShardedStrategy : public StrategyCore {
 public:
  // defer_moments: the subclass calls allocate_moments() itself, later (zero3 does, once the
  // model's full parameter buffer is gone, so that its start-up peak does not hold both).
  ShardedStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts, bool defer_moments = false);

  std::vector<std::pair<size_t, size_t>> owned_ranges() const override;
  // zero1, zero2: every rank holds all the parameters (zero3: its owned shard).
  std::vector<std::pair<size_t, size_t>> param_ranges() const override { return {{0, plan_.total}}; }
  // Checkpoint state (sharded.cpp): straight between the owned arrays and the chunks, bucket by bucket.
  void visit_optimizer_state(const StateChunkFn& fn) const override;
  void set_master_chunk(size_t begin, const float* data, size_t n) override;
  void set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) override;

 protected:
  // owned_grads: (owned_numel) averaged gradient of this rank's shards, dtype grad_dtype.
  StepStats step_owned(const void* owned_grads, DType grad_dtype, float lr);
  // Where the parameter of layout element `a` lives (a in this rank's part of bucket b), in
  // the model's precision: the model's full params here; zero3's owned shard.
  virtual unsigned char* owned_param(int b, size_t a) const;
  // m and v of the owned shard, zeroed (the constructor calls it unless defer_moments).
  void allocate_moments();
  // After AdamW: make the updated shards visible to every rank (all-gather; zero3: nothing).
  virtual void publish_params();
  // The parameters of layout elements [begin, begin + n) from fp32 (zero3: the owned part).
  virtual void set_params_chunk(size_t begin, const float* data, size_t n) { model_.set_params_f32(begin, n, data); }
  // Copies the part of [begin, begin + n) this rank owns into an owned-shard array.
  void chunk_to_owned(size_t begin, const float* data, size_t n, float* owned) const;

  // Checkpoint get / set go a chunk at a time; on a GPU rank through a host scratch of one
  // chunk (StrategyCore::visit_stored_f32).

  Buffer<float> master_;  // (owned_numel) bf16 mode only, MemTag::master; on the model's device
  Buffer<float> m_, v_;   // (owned_numel) MemTag::adam_m / adam_v
};

}  // namespace rz
