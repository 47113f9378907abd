#include "zero/zero1.h"


#include "base/check.h"

namespace rz {

Zero1Strategy::Zero1Strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts)
    : ShardedStrategy(model, comm, opts), grads_(plan_, grad_bytes_, be_) {
  owned_grads_.allocate(MemTag::grads, plan_.owned_numel() * grad_bytes_, model.device());
}

void Zero1Strategy::begin_window() { grads_.zero(); }

void* Zero1Strategy::grad_ptr(size_t offset, size_t count) { return grads_.at(offset, count); }

void Zero1Strategy::submit_bucket(int b) {
  const Bucket& bk = plan_.buckets[b];
  unsigned char* owned = owned_grads_.data() + plan_.owned_offset(b) * grad_bytes_;
  if (!wide_.enabled()) {
    grad_work_.push_back(comm_.reduce_scatter_async(grads_.bucket(b), owned, bk.padded, grad_dtype_, ReduceOp::avg));
    return;
  }
  // fp32 reduction (zero/wide_reduce.h): in place in the fp32 buffer; the reduced shard is
  // narrowed into the bf16 owned gradient.
  float* wide = nullptr;
  const int i = widen_bucket(b, grads_.bucket(b), &wide);
  float* shard = wide + static_cast<size_t>(rank_) * bk.shard;
  OnDone done = OnDone::on_stream([this, i, shard, owned, n = bk.shard](void* stream) {
    Backend::StreamScope on(be_, stream);
    be_.f32_to_bf16(reinterpret_cast<bf16*>(owned), shard, n);
    wide_.release(i, be_.mark(stream));
  });
  grad_work_.push_back(comm_.reduce_scatter_async(wide, shard, bk.padded, DType::f32, ReduceOp::avg, done));
}

StepStats Zero1Strategy::step(float lr) {
  RZ_CHECK(micro_ == accum_ - 1 && ready_upto_ == plan_.total,
           "step: called before the last micro-step's backward finished");
  wait_grad_work();
  return step_owned(owned_grads_.data(), grad_dtype_, lr);
}

}  // namespace rz
