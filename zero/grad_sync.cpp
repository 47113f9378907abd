// zero/grad_sync.cpp: what every gradient sync shares (the pending collectives, the fp32
// reduce buffers, the sharded norm), and the two kinds that keep a full gradient buffer:
// all_reduce (ddp) and reduce_scatter_last (zero1). zero/staged_grads.cpp has the third.
#include "zero/grad_sync.h"

#include "base/bf16.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/trace.h"
#include "zero/clip.h"

namespace rz {

GradSyncKind grad_sync_kind(const StrategyTraits& t) {
  if (!t.shards_optimizer) return GradSyncKind::all_reduce;
  return t.shards_grads ? GradSyncKind::reduce_scatter_every : GradSyncKind::reduce_scatter_last;
}

void grad_sync_bytes(GradSyncKind kind, const BucketPlan& plan, Precision precision, const StagingPool& staging,
                     bool grad_shard_fp32, const WidePool& wide, ExactStateBytes& e) {
  const size_t pb = precision_bytes(precision);
  const size_t owned = plan.owned_numel();
  if (kind == GradSyncKind::reduce_scatter_every) {
    // The owned shard (model precision, or fp32) and the staging buckets in flight.
    e.grads = owned * (grad_shard_fp32 ? 4 : pb);
    e.staging = staging.total_elems() * pb;
  } else {
    // The full padded buffer, plus the reduce-scattered owned shard where the optimizer is
    // sharded (zero1), both in model precision.
    e.grads = (plan.padded_total + (kind == GradSyncKind::reduce_scatter_last ? owned : 0)) * pb;
  }
  e.wide = wide.bytes();
}

GradSync::GradSync(StrategyContext& cx) : cx_(cx) {
  const DType reduce_dtype = cx.opts.grad_reduce_fp32 ? DType::f32 : cx.grad_dtype;
  if (reduce_dtype != cx.grad_dtype) wide_.allocate(wide_reduce_pool(cx.plan, cx.opts.buckets_in_flight), cx.be);
}

void GradSync::wait() {
  RZ_TRACE_SCOPE("wait for gradient collectives");
  auto t0 = Clock::now();
  for (auto& w : work_) w->wait();
  work_.clear();
  cx_.window.exposed_s += seconds_since(t0);
}

int GradSync::widen_bucket(int b, const void* grads, float** wide) {
  const int i = wide_.acquire(work_, &cx_.window.exposed_s);
  *wide = wide_.data(i);
  cx_.be.bf16_to_f32(*wide, static_cast<const bf16*>(grads), cx_.plan.buckets[b].padded);
  return i;
}

double GradSync::owned_norm(const void* owned, DType dtype) {
  double mine = partial_from_owned(cx_.be, cx_.plan, owned, dtype);
  return norm_from_partials(all_gather_partials(cx_.host_comm, mine));
}

// --- all_reduce (ddp)

AllReduceGrads::AllReduceGrads(StrategyContext& cx) : GradSync(cx), grads_(cx.plan, cx.grad_bytes, cx.be) {}

void AllReduceGrads::submit_bucket(int b, int) {
  const Bucket& bk = cx_.plan.buckets[b];
  if (!wide_.enabled()) {
    work_.push_back(cx_.comm.all_reduce_async(grads_.bucket(b), bk.padded, cx_.grad_dtype, ReduceOp::avg));
    return;
  }
  // fp32 reduction (zero/wide_reduce.h): the bucket travels widened; the average comes back
  // into the bf16 bucket rounded once.
  float* wide = nullptr;
  const int i = widen_bucket(b, grads_.bucket(b), &wide);
  bf16* g = reinterpret_cast<bf16*>(grads_.bucket(b));
  Backend& be = cx_.be;
  OnDone done = OnDone::on_stream([this, &be, i, wide, g, n = bk.padded](void* stream) {
    Backend::StreamScope on(be, stream);
    be.f32_to_bf16(g, wide, n);
    wide_.release(i, be.mark(stream));
  });
  work_.push_back(cx_.comm.all_reduce_async(wide, bk.padded, DType::f32, ReduceOp::avg, done));
}

const void* AllReduceGrads::averaged(int b, size_t a) {
  return grads_.bucket(b) + (a - cx_.plan.buckets[b].begin) * cx_.grad_bytes;
}

double AllReduceGrads::global_norm() {
  // All N partials from the full averaged gradient, in the order the ZeRO ranks use.
  return norm_from_partials(partials_from_full(cx_.be, cx_.plan, grads_.data(), cx_.grad_dtype));
}

// --- reduce_scatter_last (zero1)

ReduceScatterGrads::ReduceScatterGrads(StrategyContext& cx)
    : GradSync(cx), grads_(cx.plan, cx.grad_bytes, cx.be) {
  owned_grads_.allocate(MemTag::grads, cx.plan.owned_numel() * cx.grad_bytes, cx.model.device());
}

void ReduceScatterGrads::submit_bucket(int b, int) {
  const Bucket& bk = cx_.plan.buckets[b];
  unsigned char* owned = owned_grads_.data() + cx_.plan.owned_offset(b) * cx_.grad_bytes;
  if (!wide_.enabled()) {
    work_.push_back(
        cx_.comm.reduce_scatter_async(grads_.bucket(b), owned, bk.padded, cx_.grad_dtype, ReduceOp::avg));
    return;
  }
  // fp32 reduction (zero/wide_reduce.h): in place in the fp32 buffer; the reduced shard is
  // narrowed into the bf16 owned gradient.
  float* wide = nullptr;
  const int i = widen_bucket(b, grads_.bucket(b), &wide);
  float* shard = wide + static_cast<size_t>(cx_.rank) * bk.shard;
  Backend& be = cx_.be;
  OnDone done = OnDone::on_stream([this, &be, i, shard, owned, n = bk.shard](void* stream) {
    Backend::StreamScope on(be, stream);
    be.f32_to_bf16(reinterpret_cast<bf16*>(owned), shard, n);
    wide_.release(i, be.mark(stream));
  });
  work_.push_back(cx_.comm.reduce_scatter_async(wide, shard, bk.padded, DType::f32, ReduceOp::avg, done));
}

const void* ReduceScatterGrads::averaged(int b, size_t a) {
  const size_t shard_begin = cx_.plan.owned_layout_range(b, cx_.rank).first;
  return owned_grads_.data() + (cx_.plan.owned_offset(b) + (a - shard_begin)) * cx_.grad_bytes;
}

}  // namespace rz
