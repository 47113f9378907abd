// zero/param_store.cpp: the replicated parameter stores (ddp; zero1 and zero2, which
// all-gather the updated shards after the step). zero/sharded_params.cpp has zero3's.
#include "zero/param_store.h"

#include <algorithm>

#include "base/trace.h"
#include "comm/debug/flight_recorder.h"

namespace rz {

ParamStoreKind param_store_kind(const StrategyTraits& t) {
  if (t.shards_params) return ParamStoreKind::sharded;
  return t.gathers_params_after_step() ? ParamStoreKind::gathered_after_step : ParamStoreKind::replicated;
}

void param_store_bytes(ParamStoreKind kind, const BucketPlan& plan, Precision precision, const GatherPool& gathered,
                       ExactStateBytes& e) {
  const size_t pb = precision_bytes(precision);
  if (kind == ParamStoreKind::sharded) {
    // The owned parameter shard plus the gathered units in flight.
    e.gathered = gathered.total_elems() * pb;
    e.params = plan.owned_numel() * pb + e.gathered;
  } else {
    e.params = plan.total * pb;
  }
}

unsigned char* ReplicatedParams::param(int, size_t a) const {
  return static_cast<unsigned char*>(const_cast<void*>(cx_.model.params())) + a * cx_.grad_bytes;
}

void ReplicatedParams::publish() {
  if (!gather_after_step_) return;
  // Every rank's updated shard to everyone, bucket by bucket, in place. The count is the
  // bucket's unpadded size: the communicator's shards of it are exactly ours (S_b =
  // ceil(numel / N)), and the padding never exists in the params.
  const BucketPlan& plan = cx_.plan;
  unsigned char* params = static_cast<unsigned char*>(cx_.model.params());
  std::vector<WorkHandle> gathers;
  CommPurpose purpose("param all-gather");
  const DType pdt = cx_.precision == Precision::fp32 ? DType::f32 : DType::bf16;
  for (int b = 0; b < static_cast<int>(plan.buckets.size()); ++b) {
    const Bucket& bk = plan.buckets[b];
    auto r = plan.owned_layout_range(b, cx_.rank);
    trace::BucketLabel label(b);
    gathers.push_back(cx_.comm.all_gather_async(params + r.first * cx_.grad_bytes,
                                                params + bk.begin * cx_.grad_bytes, bk.numel(), pdt));
  }
  for (auto& w : gathers) w->wait();
}

void ReplicatedParams::visit_f32(const ParamChunkFn* fn) {
  if (fn == nullptr) return;
  const size_t total = cx_.layout.total;
  if (cx_.precision == Precision::fp32 && cx_.arrays_on_host()) {
    (*fn)(0, static_cast<const float*>(cx_.model.params()), total);
    return;
  }
  Buffer<float> scratch;
  const size_t chunk = std::min(total, cx_.state_chunk_elems());
  for (size_t b = 0; b < total; b += chunk) {
    const size_t n = std::min(chunk, total - b);
    cx_.model.get_params_f32(b, n, StrategyContext::scratch_for(scratch, chunk));
    (*fn)(b, scratch.data(), n);
  }
}

}  // namespace rz
