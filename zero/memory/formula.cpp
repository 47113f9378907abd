#include "zero/memory/formula.h"

#include <algorithm>

#include "base/check.h"
#include "zero/optimizer_state.h"
#include "zero/sharded_params.h"
#include "zero/staged_grads.h"

namespace rz {

PerParamBytes paper_formula(StrategyKind kind, Precision precision, int nranks) {
  RZ_CHECK(nranks >= 1, "ranks: expected at least 1, found %d", nranks);
  const double n = nranks;
  const double pb = static_cast<double>(precision_bytes(precision));  // params and grads
  const bool bf16 = precision == Precision::bf16;
  const StrategyTraits& t = strategy_traits(kind);
  PerParamBytes f;
  f.params = t.shards_params ? pb / n : pb;
  f.grads = t.shards_grads ? pb / n : pb;
  const double opt_div = t.shards_optimizer ? n : 1.0;
  f.master = bf16 ? 4.0 / opt_div : 0.0;  // fp32 mode: the params are the master weights
  f.adam_m = 4.0 / opt_div;
  f.adam_v = 4.0 / opt_div;
  return f;
}

PerParamBytes ringzero_formula(StrategyKind kind, Precision precision, int nranks, bool grad_shard_fp32) {
  PerParamBytes f = paper_formula(kind, precision, nranks);
  if (strategy_traits(kind).shards_grads && grad_shard_fp32)
    f.grads = 4.0 / nranks;  // fp32 owned gradient shard
  return f;
}

ExactStateBytes exact_state_bytes(const BucketPlan& plan, StrategyKind kind, Precision precision,
                                  const StagingPool& staging, bool grad_shard_fp32,
                                  const GatherPool& gathered, const WidePool& wide) {
  // Each part of the strategy this row composes counts its own (zero/strategy.h).
  const StrategyTraits& t = strategy_traits(kind);
  ExactStateBytes e;
  param_store_bytes(param_store_kind(t), plan, precision, gathered, e);
  grad_sync_bytes(grad_sync_kind(t), plan, precision, staging, grad_shard_fp32, wide, e);
  optimizer_state_bytes(t.shards_optimizer, plan, precision, e);
  return e;
}

ExactStateBytes predicted_state_bytes(const ParamLayout& layout, int num_layers, StrategyKind kind,
                                      Precision precision, int nranks, double bucket_mb, int buckets_in_flight,
                                      bool grad_shard_fp32, StagingPool* pool_out, bool grad_reduce_fp32) {
  const BucketPlan plan = strategy_bucket_plan(layout, kind, precision, nranks, bucket_mb);
  return predicted_state_bytes(plan, layout, num_layers, kind, precision, buckets_in_flight, grad_shard_fp32, pool_out,
                               grad_reduce_fp32);
}

ExactStateBytes predicted_state_bytes(const BucketPlan& plan, const ParamLayout& layout, int num_layers,
                                      StrategyKind kind, Precision precision, int buckets_in_flight,
                                      bool grad_shard_fp32, StagingPool* pool_out, bool grad_reduce_fp32) {
  const StrategyTraits& t = strategy_traits(kind);
  // The same pool rules the staged gradient sync and the sharded parameter store allocate
  // by, for the plan the strategy would build.
  const StagingPool pool = t.shards_grads ? zero2_staging_pool(layout, plan, buckets_in_flight) : StagingPool{};
  const GatherPool gathered = t.shards_params ? zero3_gather_pool(layout, num_layers) : GatherPool{};
  if (pool_out) *pool_out = pool;
  // The same rule the strategies allocate their fp32 reduce buffers by (bf16 runs only).
  const WidePool wide = grad_reduce_fp32 && precision == Precision::bf16 ? wide_reduce_pool(plan, buckets_in_flight)
                                                                          : WidePool{};
  return exact_state_bytes(plan, kind, precision, pool, grad_shard_fp32, gathered, wide);
}

}  // namespace rz
