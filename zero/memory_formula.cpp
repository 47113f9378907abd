#include "zero/memory_formula.h"

#include <algorithm>

#include "base/check.h"
#include "zero/zero2.h"

namespace rz {

PerParamBytes paper_formula(StrategyKind kind, Precision precision, int nranks) {
  RZ_CHECK(nranks >= 1, "ranks: expected at least 1, found %d", nranks);
  const double n = nranks;
  const double pb = static_cast<double>(precision_bytes(precision));  // params and grads
  const bool bf16 = precision == Precision::bf16;
  PerParamBytes f;
  const bool grads_sharded = kind == StrategyKind::zero2 || kind == StrategyKind::zero3;
  f.params = kind == StrategyKind::zero3 ? pb / n : pb;
  f.grads = grads_sharded ? pb / n : pb;
  const double opt_div = kind == StrategyKind::ddp ? 1.0 : n;
  f.master = bf16 ? 4.0 / opt_div : 0.0;  // fp32 mode: the params are the master weights
  f.adam_m = 4.0 / opt_div;
  f.adam_v = 4.0 / opt_div;
  return f;
}

PerParamBytes ringzero_formula(StrategyKind kind, Precision precision, int nranks, bool grad_shard_fp32) {
  PerParamBytes f = paper_formula(kind, precision, nranks);
  if ((kind == StrategyKind::zero2 || kind == StrategyKind::zero3) && grad_shard_fp32)
    f.grads = 4.0 / nranks;  // fp32 owned gradient shard
  return f;
}

ExactStateBytes exact_state_bytes(const BucketPlan& plan, StrategyKind kind, Precision precision,
                                  const StagingPool& staging, bool grad_shard_fp32,
                                  const GatherPool& gathered, const WidePool& wide) {
  const size_t pb = precision_bytes(precision);
  const bool bf16 = precision == Precision::bf16;
  const size_t owned = plan.owned_numel();
  ExactStateBytes e;
  e.params = plan.total * pb;
  switch (kind) {
    case StrategyKind::ddp:
      e.grads = plan.padded_total * pb;
      e.master = bf16 ? plan.total * 4 : 0;
      e.adam_m = e.adam_v = plan.total * 4;
      break;
    case StrategyKind::zero1:
      // The full padded buffer plus the reduce-scattered owned shard, both in model precision.
      e.grads = (plan.padded_total + owned) * pb;
      e.master = bf16 ? owned * 4 : 0;
      e.adam_m = e.adam_v = owned * 4;
      break;
    case StrategyKind::zero3:
      // The owned parameter shard plus the gathered units in flight; the rest is zero2's.
      e.gathered = gathered.total_elems() * pb;
      e.params = owned * pb + e.gathered;
      [[fallthrough]];
    case StrategyKind::zero2:
      e.grads = owned * (grad_shard_fp32 ? 4 : pb);
      e.master = bf16 ? owned * 4 : 0;
      e.adam_m = e.adam_v = owned * 4;
      e.staging = staging.total_elems() * pb;
      break;
  }
  e.wide = wide.bytes();
  return e;
}

ExactStateBytes predicted_state_bytes(const ParamLayout& layout, int num_layers, StrategyKind kind,
                                      Precision precision, int nranks, double bucket_mb, int buckets_in_flight,
                                      bool grad_shard_fp32, StagingPool* pool_out, bool grad_reduce_fp32) {
  const bool z3 = kind == StrategyKind::zero3;
  const BucketPlan plan = build_bucket_plan(layout, bucket_mb, precision_bytes(precision), nranks, z3);
  // The same pool rules Zero2Strategy and Zero3Strategy allocate by, for the plan they would build.
  const StagingPool pool = kind == StrategyKind::zero2 || z3 ? zero2_staging_pool(layout, plan, buckets_in_flight)
                                                             : StagingPool{};
  const GatherPool gathered = z3 ? zero3_gather_pool(layout, num_layers) : GatherPool{};
  if (pool_out) *pool_out = pool;
  // The same rule the strategies allocate their fp32 reduce buffers by (bf16 runs only).
  const WidePool wide = grad_reduce_fp32 && precision == Precision::bf16 ? wide_reduce_pool(plan, buckets_in_flight)
                                                                          : WidePool{};
  return exact_state_bytes(plan, kind, precision, pool, grad_shard_fp32, gathered, wide);
}

}  // namespace rz
