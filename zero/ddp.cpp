#include "zero/ddp.h"

#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "zero/clip.h"

namespace rz {

DDPStrategy::DDPStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts)
    : StrategyCore(model, comm, opts), grads_(plan_, grad_bytes_, be_) {
  const Device dev = model.device();
  if (precision_ == Precision::bf16) {
    master_.allocate(MemTag::master, plan_.total, dev);
    // Straight from the bf16 params in the backend's memory (on a GPU a device-to-device
    // conversion): no full-size temporary, on the host or the device.
    be_.bf16_to_f32(master_.data(), static_cast<const bf16*>(model_.params()), plan_.total);
  }
  m_.allocate(MemTag::adam_m, plan_.total, dev);
  v_.allocate(MemTag::adam_v, plan_.total, dev);
}

void DDPStrategy::begin_window() { grads_.zero(); }

void* DDPStrategy::grad_ptr(size_t offset, size_t count) { return grads_.at(offset, count); }

void DDPStrategy::submit_bucket(int b) {
  const Bucket& bk = plan_.buckets[b];
  if (!wide_.enabled()) {
    grad_work_.push_back(comm_.all_reduce_async(grads_.bucket(b), bk.padded, grad_dtype_, ReduceOp::avg));
    return;
  }
  // fp32 reduction (zero/wide_reduce.h): the bucket travels widened; the average comes back
  // into the bf16 bucket rounded once.
  float* wide = nullptr;
  const int i = widen_bucket(b, grads_.bucket(b), &wide);
  bf16* g = reinterpret_cast<bf16*>(grads_.bucket(b));
  OnDone done = OnDone::on_stream([this, i, wide, g, n = bk.padded](void* stream) {
    Backend::StreamScope on(be_, stream);
    be_.f32_to_bf16(g, wide, n);
    wide_.release(i, be_.mark(stream));
  });
  grad_work_.push_back(comm_.all_reduce_async(wide, bk.padded, DType::f32, ReduceOp::avg, done));
}

StepStats DDPStrategy::step(float lr) {
  RZ_CHECK(micro_ == accum_ - 1 && ready_upto_ == plan_.total,
           "step: called before the last micro-step's backward finished");
  wait_grad_work();
  // All N partials from the full averaged gradient, in the order the ZeRO ranks use.
  double norm = norm_from_partials(partials_from_full(be_, plan_, grads_.data(), grad_dtype_));
  if (gate_refuses(norm)) return skipped_stats(norm);
  float scale = clip_scale(norm, opts_.grad_clip);
  ++t_;
  unsigned char* params = static_cast<unsigned char*>(model_.params());
  // One update per bucket: its gradients are contiguous in the padded buffer, its params
  // and optimizer state in layout order.
  for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
    const Bucket& bk = plan_.buckets[b];
    float* master = master_.empty() ? nullptr : master_.data() + bk.begin;
    adamw(b, bk.begin, bk.end, master, params + bk.begin * grad_bytes_, grads_.bucket(b), grad_dtype_,
          m_.data() + bk.begin, v_.data() + bk.begin, lr, scale);
  }
  return finish_stats(norm);
}

std::vector<std::pair<size_t, size_t>> DDPStrategy::owned_ranges() const {
  return {{0, plan_.total}};
}

// --- checkpoint state: everything, in layout order

void DDPStrategy::visit_optimizer_state(const StateChunkFn& fn) const {
  Buffer<float> scratch;
  if (master_.empty()) {  // fp32 mode: the params are the master weights
    const ParamChunkFn pf = [&](size_t, const float* p, size_t n) { fn(StateArray::master, p, n); };
    const_cast<DDPStrategy*>(this)->StrategyCore::visit_params_f32(&pf);  // reads only
  } else {
    visit_stored_f32(StateArray::master, master_.data(), plan_.total, fn, scratch);
  }
  visit_stored_f32(StateArray::m, m_.data(), plan_.total, fn, scratch);
  visit_stored_f32(StateArray::v, v_.data(), plan_.total, fn, scratch);
}

void DDPStrategy::set_master_chunk(size_t begin, const float* data, size_t n) {
  RZ_CHECK(begin <= plan_.total && n <= plan_.total - begin, "set_master_chunk: [%zu, +%zu) outside %zu", begin, n,
           plan_.total);
  model_.set_params_f32(begin, n, data);
  if (!master_.empty()) be_.copy_from_host(master_.data() + begin, data, n * sizeof(float));
}

void DDPStrategy::set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) {
  RZ_CHECK(which != StateArray::master && begin <= plan_.total && n <= plan_.total - begin,
           "set_moment_chunk: [%zu, +%zu) outside %zu", begin, n, plan_.total);
  float* dst = (which == StateArray::m ? m_ : v_).data() + begin;
  be_.copy_from_host(dst, data, n * sizeof(float));
}

}  // namespace rz
