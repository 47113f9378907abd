// zero/optimizer_state.cpp: AdamW's state, full or the owned shard, and its update.
#include "zero/optimizer_state.h"

#include <algorithm>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"

namespace rz {

void optimizer_state_bytes(bool sharded, const BucketPlan& plan, Precision precision, ExactStateBytes& e) {
  const size_t optimized = sharded ? plan.owned_numel() : plan.total;  // elements with master, m, v
  e.master = precision == Precision::bf16 ? optimized * 4 : 0;
  e.adam_m = e.adam_v = optimized * 4;
}

OptimizerState::OptimizerState(StrategyContext& cx, bool sharded) : cx_(cx), sharded_(sharded) {
  if (cx.precision != Precision::bf16) return;
  const BucketPlan& plan = cx.plan;
  const bf16* params = static_cast<const bf16*>(cx.model.params());
  if (!sharded) {
    master_.allocate(MemTag::master, plan.total, cx.model.device());
    // Straight from the bf16 params in the backend's memory (on a GPU a device-to-device
    // conversion): no full-size temporary, on the host or the device.
    cx.be.bf16_to_f32(master_.data(), params, plan.total);
    return;
  }
  // Bucket by bucket from the model's bf16 params: no full-size fp32 copy.
  master_.allocate(MemTag::master, plan.owned_numel(), cx.model.device());
  for (int b = 0; b < static_cast<int>(plan.buckets.size()); ++b) {
    auto [lo, hi] = plan.owned_layout_range(b, cx.rank);
    cx.be.bf16_to_f32(master_.data() + plan.owned_offset(b), params + lo, hi - lo);
  }
}

void OptimizerState::allocate_moments() {
  const size_t n = sharded_ ? cx_.plan.owned_numel() : cx_.plan.total;
  m_.allocate(MemTag::adam_m, n, cx_.model.device());
  v_.allocate(MemTag::adam_v, n, cx_.model.device());
}

std::pair<size_t, size_t> OptimizerState::range(int b) const {
  if (sharded_) return cx_.plan.owned_layout_range(b, cx_.rank);
  return {cx_.plan.buckets[b].begin, cx_.plan.buckets[b].end};
}

size_t OptimizerState::offset(int b) const {
  return sharded_ ? cx_.plan.owned_offset(b) : cx_.plan.buckets[b].begin;
}

std::vector<std::pair<size_t, size_t>> OptimizerState::owned_ranges() const {
  if (!sharded_) return {{0, cx_.plan.total}};
  return owned_layout_ranges(cx_.plan, cx_.rank);
}

void OptimizerState::update(int b, size_t lo, size_t hi, void* param, const void* grad, DType grad_dtype, float lr,
                            float grad_scale) {
  if (hi <= lo) return;
  const size_t n = hi - lo;
  const size_t o = offset(b);
  float* master = master_.empty() ? nullptr : master_.data() + o;  // null in fp32 mode, where param is the master
  float* m = m_.data() + o;
  float* v = v_.data() + o;
  // The bucket's tensors clipped to [lo, hi), as spans of the call (kernels/cpu/adamw.h).
  const Bucket& bk = cx_.plan.buckets[b];
  std::vector<AdamWSpan> spans;
  for (int i = bk.first_tensor; i < bk.first_tensor + bk.num_tensors; ++i) {
    const ParamTensor& tn = cx_.layout.tensors[i];
    const size_t a = std::max(lo, tn.offset), e = std::min(hi, tn.offset + tn.numel);
    if (a < e) spans.push_back(AdamWSpan{e - lo, tn.weight_decay});
  }
  AdamWStep s;
  s.lr = lr;
  s.beta1 = cx_.opts.adamw.beta1;
  s.beta2 = cx_.opts.adamw.beta2;
  s.eps = cx_.opts.adamw.eps;
  s.weight_decay = cx_.opts.adamw.weight_decay;
  s.grad_scale = grad_scale;
  s.t = t;
  s.spans = spans.data();
  s.num_spans = spans.size();
  if (cx_.precision == Precision::fp32) {
    // fp32 mode: the params are the master weights.
    RZ_CHECK(grad_dtype == DType::f32, "adamw: fp32 params with %s gradients", dtype_name(grad_dtype));
    cx_.be.adamw_update(static_cast<float*>(param), nullptr, m, v, static_cast<const float*>(grad), n, s);
  } else if (grad_dtype == DType::bf16) {
    cx_.be.adamw_update(static_cast<bf16*>(param), master, m, v, static_cast<const bf16*>(grad), n, s);
  } else {
    // bf16 mode with an fp32 owned gradient shard (--grad-shard-fp32).
    cx_.be.adamw_update(static_cast<bf16*>(param), master, m, v, static_cast<const float*>(grad), n, s);
  }
}

void OptimizerState::chunk_to_owned(size_t begin, const float* data, size_t n, float* owned) const {
  const BucketPlan& plan = cx_.plan;
  const size_t end = begin + n;
  if (n == 0 || begin >= plan.total) return;
  for (int b = plan.bucket_of(begin); b < static_cast<int>(plan.buckets.size()) && plan.buckets[b].begin < end; ++b) {
    auto [lo, hi] = plan.owned_layout_range(b, cx_.rank);
    const size_t a = std::max(lo, begin), e = std::min(hi, end);
    if (a < e)
      cx_.be.copy_from_host(owned + plan.owned_offset(b) + (a - lo), data + (a - begin), (e - a) * sizeof(float));
  }
}

void OptimizerState::set_chunk(StateArray which, size_t begin, const float* data, size_t n) {
  Buffer<float>& dst = which == StateArray::master ? master_ : which == StateArray::m ? m_ : v_;
  if (dst.empty()) return;  // fp32 mode has no master copy
  if (sharded_)
    chunk_to_owned(begin, data, n, dst.data());
  else
    cx_.be.copy_from_host(dst.data() + begin, data, n * sizeof(float));
}

}  // namespace rz
