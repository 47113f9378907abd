// zero/state_bytes.h: the exact bytes of model states on one rank, by memory tag.
//
// Each part of a strategy fills its own fields (zero/grad_sync.h: grads, staging, wide;
// zero/optimizer_state.h: master, adam_m, adam_v; zero/param_store.h: params, gathered),
// for a strategy built or only predicted (zero/memory/formula.h sums the three).
#pragma once

#include <cstddef>

namespace rz {

struct ExactStateBytes {
  size_t params = 0;   // MemTag::params (owned by the model)
  size_t grads = 0;    // MemTag::grads: full padded buffer (ddp, zero1) or owned shard (zero2)
  size_t master = 0;   // MemTag::master: fp32 master weights (bf16 mode only)
  size_t adam_m = 0;   // MemTag::adam_m
  size_t adam_v = 0;   // MemTag::adam_v
  size_t staging = 0;  // MemTag::comm held by the strategy: zero2's and zero3's staging pool
  size_t gathered = 0;  // zero3: the part of `params` that is gathered-unit buffers (working set)
  size_t wide = 0;      // MemTag::comm: the fp32 reduce buffers of --grad-reduce-dtype fp32 (zero/wide_reduce.h)
  size_t total() const { return params + grads + master + adam_m + adam_v + staging + wide; }
};

}  // namespace rz
