// zero/composed_strategy.cpp: the parts a traits row picks, the bucket cursor, the shared
// step and its accounting, and make_strategy.
#include "zero/composed_strategy.h"

#include <algorithm>
#include <iterator>

#include "base/check.h"
#include "base/trace.h"
#include "comm/debug/flight_recorder.h"
#include "zero/clip.h"
#include "zero/sharded_params.h"
#include "zero/staged_grads.h"

namespace rz {

namespace {

std::unique_ptr<GradSync> make_grad_sync(GradSyncKind kind, StrategyContext& cx) {
  switch (kind) {
    case GradSyncKind::all_reduce: return std::make_unique<AllReduceGrads>(cx);
    case GradSyncKind::reduce_scatter_last: return std::make_unique<ReduceScatterGrads>(cx);
    case GradSyncKind::reduce_scatter_every: return std::make_unique<StagedGrads>(cx);
  }
  RZ_FAIL("make_grad_sync: unknown kind %d", static_cast<int>(kind));
}

std::unique_ptr<ParamStore> make_param_store(ParamStoreKind kind, StrategyContext& cx) {
  switch (kind) {
    case ParamStoreKind::replicated: return std::make_unique<ReplicatedParams>(cx, false);
    case ParamStoreKind::gathered_after_step: return std::make_unique<ReplicatedParams>(cx, true);
    case ParamStoreKind::sharded: return std::make_unique<ShardedParams>(cx);
  }
  RZ_FAIL("make_param_store: unknown kind %d", static_cast<int>(kind));
}

}  // namespace

// The parts in the order that keeps the start-up peak low: the optimizer's master weights
// are converted from the model's full parameters before a sharded store takes its shard
// and releases them, and AdamW's m and v come only after that.
ComposedStrategy::ComposedStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts,
                                   const StrategyTraits& row)
    : cx_(model, comm, opts, row),
      sync_(make_grad_sync(grad_sync_kind(row), cx_)),
      opt_(cx_, row.shards_optimizer),
      params_(make_param_store(param_store_kind(row), cx_)),
      state_(cx_, opt_, *params_) {
  opt_.allocate_moments();
}

GradSink& ComposedStrategy::begin_micro_step(int micro, int accum) {
  RZ_CHECK(accum >= 1 && micro >= 0 && micro < accum,
           "begin_micro_step: micro-step %d of %d is out of range", micro, accum);
  RZ_CHECK(micro == 0 || (micro == micro_ + 1 && accum == accum_),
           "begin_micro_step: expected micro-step %d of %d next, got %d of %d", micro_ + 1, accum_,
           micro, accum);
  micro_ = micro;
  accum_ = accum;
  ready_upto_ = 0;
  next_bucket_ = 0;
  if (micro == 0) {
    if (!cx_.window.open) cx_.window.begin(cx_.comm);
    sync_->begin_window();
  }
  sync_->begin_micro();
  return *this;
}

void ComposedStrategy::grads_ready(size_t begin, size_t end) {
  const BucketPlan& plan = cx_.plan;
  RZ_CHECK(begin == ready_upto_ && end >= begin && end <= plan.total,
           "grads_ready: expected a range starting at %zu within %zu, got [%zu, %zu)", ready_upto_,
           plan.total, begin, end);
  ready_upto_ = end;
  const bool communicate = sync_->communicates_every_micro_step() || micro_ == accum_ - 1;
  while (next_bucket_ < static_cast<int>(plan.buckets.size()) && plan.buckets[next_bucket_].end <= ready_upto_) {
    if (communicate) {
      // Its collectives labelled "bucket b" on the trace's comm track and in the flight recorder.
      trace::BucketLabel label(next_bucket_);
      CommPurpose purpose("gradients");
      sync_->submit_bucket(next_bucket_, micro_);
    }
    ++next_bucket_;
  }
}

void ComposedStrategy::end_micro_step() {
  RZ_CHECK(ready_upto_ == cx_.plan.total,
           "end_micro_step: backward reported gradients for %zu of %zu parameters", ready_upto_,
           cx_.plan.total);
}

StepStats ComposedStrategy::step(float lr) {
  params_->before_update();
  RZ_CHECK(micro_ == accum_ - 1 && ready_upto_ == cx_.plan.total,
           "step: called before the last micro-step's backward finished");
  sync_->wait();
  const double norm = sync_->global_norm();
  if (gate_ && !gate_(norm)) {
    StepStats s = finish_stats(norm);
    s.skipped = true;
    return s;
  }
  const float scale = clip_scale(norm, cx_.opts.grad_clip);
  ++opt_.t;
  // One update per bucket, over the part of it this rank owns (all of it with a full
  // optimizer state): its gradients, parameters and optimizer state are each contiguous.
  for (int b = 0; b < static_cast<int>(cx_.plan.buckets.size()); ++b) {
    auto [lo, hi] = opt_.range(b);
    if (lo >= hi) continue;
    opt_.update(b, lo, hi, params_->param(b, lo), sync_->averaged(b, lo), sync_->averaged_dtype(), lr, scale);
  }
  params_->publish();
  return finish_stats(norm);
}

StepStats ComposedStrategy::finish_stats(double grad_norm) {
  const StepWindow& w = cx_.window;
  const CommStats& now = cx_.comm.stats();
  StepStats s;
  s.grad_norm = static_cast<float>(grad_norm);
  CommCounters total_now = now.total(), total_then = w.start.total();
  s.comm_bytes_sent = total_now.bytes_sent - total_then.bytes_sent;
  s.comm_seconds = total_now.seconds - total_then.seconds;
  double grad_s = 0.0;
  for (CollectiveKind k : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter}) {
    int i = static_cast<int>(k);
    grad_s += now.by_kind[i].seconds - w.start.by_kind[i].seconds;
  }
  s.comm_overlapped = grad_s > 0.0 ? std::clamp(1.0 - w.exposed_s / grad_s, 0.0, 1.0) : 0.0;
  if (params_->kind() == ParamStoreKind::sharded) {
    const int ag = static_cast<int>(CollectiveKind::all_gather);
    const double gather_s = now.by_kind[ag].seconds - w.start.by_kind[ag].seconds;
    s.gather_hidden = gather_s > 0.0 ? std::clamp(1.0 - w.gather_exposed_s / gather_s, 0.0, 1.0) : 0.0;
  }
  cx_.window.open = false;
  return s;
}

ExactStateBytes ComposedStrategy::state_bytes() const {
  ExactStateBytes e;
  params_->add_bytes(e, cx_.plan, cx_.precision);
  sync_->add_bytes(e);
  opt_.add_bytes(e);
  return e;
}

std::unique_ptr<Strategy> make_strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts) {
  RZ_CHECK(static_cast<size_t>(opts.kind) < std::size(kStrategyKinds), "make_strategy: unknown strategy %d",
           static_cast<int>(opts.kind));
  return std::make_unique<ComposedStrategy>(model, comm, opts, strategy_traits(opts.kind));
}

std::unique_ptr<Strategy> make_strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts,
                                        const StrategyTraits& row) {
  RZ_ENFORCE_EQ(static_cast<int>(row.kind), static_cast<int>(opts.kind));  // the row names the strategy
  // The combinations the parts cannot make: a staged or sharded part updates only the owned
  // shard, and a sharded parameter store gathers whole units.
  RZ_CHECK(!row.shards_grads || row.shards_optimizer, "make_strategy: sharded gradients need a sharded optimizer");
  RZ_CHECK(!row.shards_params || (row.shards_optimizer && row.cuts_buckets_at_units),
           "make_strategy: sharded parameters need a sharded optimizer and buckets cut at units");
  return std::make_unique<ComposedStrategy>(model, comm, opts, row);
}

}  // namespace rz
