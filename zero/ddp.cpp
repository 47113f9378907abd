#include "zero/ddp.h"

#include <cstring>

#include "base/check.h"
#include "zero/clip.h"

namespace rz {

DDPStrategy::DDPStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts)
    : StrategyCore(model, comm, opts), grads_(plan_, grad_bytes_) {
  if (precision_ == Precision::bf16) {
    master_.allocate(MemTag::master, plan_.total);
    model_.get_params_f32(master_.data());
  }
  m_.allocate(MemTag::adam_m, plan_.total);
  v_.allocate(MemTag::adam_v, plan_.total);
}

void DDPStrategy::begin_window() { grads_.zero(); }

void* DDPStrategy::grad_ptr(size_t offset, size_t count) { return grads_.at(offset, count); }

void DDPStrategy::submit_bucket(int b) {
  const Bucket& bk = plan_.buckets[b];
  grad_work_.push_back(comm_.all_reduce_async(grads_.bucket(b),
                                              bk.padded, grad_dtype_, ReduceOp::avg));
}

StepStats DDPStrategy::step(float lr) {
  RZ_CHECK(micro_ == accum_ - 1 && ready_upto_ == plan_.total,
           "step: called before the last micro-step's backward finished");
  wait_grad_work();
  // All N partials from the full averaged gradient, in the order the ZeRO ranks use.
  double norm = norm_from_partials(partials_from_full(plan_, grads_.data(), grad_dtype_));
  float scale = clip_scale(norm, opts_.grad_clip);
  ++t_;
  unsigned char* params = static_cast<unsigned char*>(model_.params());
  for (const ParamTensor& t : layout_.tensors) {
    float* master = master_.empty() ? nullptr : master_.data() + t.offset;
    adamw(master, params + t.offset * grad_bytes_,
          grads_.at(t.offset, t.numel), grad_dtype_,
          m_.data() + t.offset, v_.data() + t.offset, t.numel, t.weight_decay, lr, scale);
  }
  return finish_stats(norm);
}

std::vector<std::pair<size_t, size_t>> DDPStrategy::owned_ranges() const {
  return {{0, plan_.total}};
}

void DDPStrategy::get_optimizer_state(std::vector<float>& master, std::vector<float>& m,
                                      std::vector<float>& v) const {
  master.resize(plan_.total);
  if (master_.empty())
    model_.get_params_f32(master.data());
  else
    std::memcpy(master.data(), master_.data(), plan_.total * sizeof(float));
  m.assign(m_.data(), m_.data() + plan_.total);
  v.assign(v_.data(), v_.data() + plan_.total);
}

void DDPStrategy::set_optimizer_state(const float* master_full, const float* m_full,
                                      const float* v_full, uint64_t step) {
  model_.set_params_f32(master_full);
  if (!master_.empty()) std::memcpy(master_.data(), master_full, plan_.total * sizeof(float));
  std::memcpy(m_.data(), m_full, plan_.total * sizeof(float));
  std::memcpy(v_.data(), v_full, plan_.total * sizeof(float));
  t_ = step;
}

}  // namespace rz
