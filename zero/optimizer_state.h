// zero/optimizer_state.h: the second axis of a strategy -- the optimizer state a rank keeps.
//
//   full         (ddp) AdamW m and v for all P parameters, in layout order; in bf16 mode
//                also the fp32 master weights
//   owned shard  (zero1, zero2, zero3) the same for this rank's shard of every bucket only:
//                the owned shards concatenated in bucket order (owned_numel = padded_total
//                / N elements, padding included so every index maps by one offset)
//
// In fp32 mode the parameters themselves are the master weights, updated in place wherever
// the parameter store keeps them (zero/param_store.h). update() is one AdamW call per
// bucket over the range of it this rank updates; weight decay follows each tensor's flag.
//
// Nothing here makes a full-size temporary: start-up goes bucket by bucket from the
// parameters to the owned arrays, and the checkpoint setters go a chunk at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "base/memory.h"
#include "zero/state_bytes.h"
#include "zero/strategy_context.h"

namespace rz {

// master, adam_m, adam_v of a full or owned-shard optimizer state for a plan.
void optimizer_state_bytes(bool sharded, const BucketPlan& plan, Precision precision, ExactStateBytes& e);

class OptimizerState {
 public:
  // Allocates the fp32 master weights (bf16 mode), converted from the model's parameters,
  // which must still be whole; allocate_moments() adds m and v (the strategy calls it last,
  // so that zero3's start-up never holds the full parameters and m, v at once).
  OptimizerState(StrategyContext& cx, bool sharded);
  OptimizerState(const OptimizerState&) = delete;
  OptimizerState& operator=(const OptimizerState&) = delete;
  void allocate_moments();  // m and v, zeroed

  bool sharded() const { return sharded_; }
  // The layout range [lo, hi) of bucket b that this rank updates (may be empty).
  std::pair<size_t, size_t> range(int b) const;
  // One AdamW update (step() already taken) of layout elements [lo, hi) = range(b) of
  // bucket b, one backend call (one launch on a GPU) for all the tensors in it: param (n,
  // model precision), grad (n, grad_dtype), n = hi - lo.
  void update(int b, size_t lo, size_t hi, void* param, const void* grad, DType grad_dtype, float lr,
              float grad_scale);
  uint64_t t = 0;  // AdamW's t: steps taken so far

  // Checkpoint state (zero/strategy_state.cpp reads the arrays through these).
  std::vector<std::pair<size_t, size_t>> owned_ranges() const;
  const float* master() const { return master_.empty() ? nullptr : master_.data(); }  // null in fp32 mode
  const float* m() const { return m_.data(); }
  const float* v() const { return v_.data(); }
  // Index of layout element lo = range(b).first in the arrays above.
  size_t offset(int b) const;
  // Master values, m or v of [begin, begin + n), for the part of it this rank keeps.
  void set_chunk(StateArray which, size_t begin, const float* data, size_t n);

  void add_bytes(ExactStateBytes& e) const { optimizer_state_bytes(sharded_, cx_.plan, cx_.precision, e); }

 private:
  // Copies the part of [begin, begin + n) this rank owns into an owned-shard array.
  void chunk_to_owned(size_t begin, const float* data, size_t n, float* owned) const;

  StrategyContext& cx_;
  bool sharded_;
  Buffer<float> master_;  // (P or owned_numel) bf16 mode only, MemTag::master; on the model's device
  Buffer<float> m_, v_;   // (P or owned_numel) MemTag::adam_m / adam_v
};

}  // namespace rz
