// zero/strategy_state.cpp: checkpoint state between a strategy's arrays and the chunks.
#include "zero/strategy_state.h"

#include "base/check.h"

namespace rz {

void StrategyState::visit_optimizer_state(const StateChunkFn& fn) const {
  const BucketPlan& plan = cx_.plan;
  Buffer<float> scratch;  // used only when the arrays live in device memory
  if (!opt_.sharded()) {
    // Everything, in layout order.
    if (opt_.master() == nullptr) {  // fp32 mode: the params are the master weights
      const ParamChunkFn pf = [&](size_t, const float* p, size_t n) { fn(StateArray::master, p, n); };
      params_.visit_f32(&pf);  // reads only
    } else {
      cx_.visit_stored_f32(StateArray::master, opt_.master(), plan.total, fn, scratch);
    }
    cx_.visit_stored_f32(StateArray::m, opt_.m(), plan.total, fn, scratch);
    cx_.visit_stored_f32(StateArray::v, opt_.v(), plan.total, fn, scratch);
    return;
  }
  // The owned shard of every bucket, in bucket order.
  for (StateArray a : {StateArray::master, StateArray::m, StateArray::v}) {
    for (int b = 0; b < static_cast<int>(plan.buckets.size()); ++b) {
      auto [lo, hi] = opt_.range(b);
      if (hi == lo) continue;
      const float* p;
      if (a == StateArray::master)  // fp32 mode: the owned parameters are the master weights
        p = opt_.master() == nullptr ? reinterpret_cast<const float*>(params_.param(b, lo)) : opt_.master() + opt_.offset(b);
      else
        p = (a == StateArray::m ? opt_.m() : opt_.v()) + opt_.offset(b);
      cx_.visit_stored_f32(a, p, hi - lo, fn, scratch);
    }
  }
}

void StrategyState::set_master_chunk(size_t begin, const float* data, size_t n) {
  const size_t total = cx_.plan.total;
  RZ_CHECK(begin <= total && n <= total - begin, "set_master_chunk: [%zu, +%zu) outside %zu", begin, n, total);
  params_.set_chunk_f32(begin, data, n);
  opt_.set_chunk(StateArray::master, begin, data, n);
}

void StrategyState::set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) {
  const size_t total = cx_.plan.total;
  RZ_CHECK(which != StateArray::master && begin <= total && n <= total - begin,
           "set_moment_chunk: [%zu, +%zu) outside %zu", begin, n, total);
  opt_.set_chunk(which, begin, data, n);
}

}  // namespace rz
