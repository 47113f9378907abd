#include "zero/sharded.h"

#include <algorithm>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "comm/debug/flight_recorder.h"
#include "zero/clip.h"

namespace rz {

ShardedStrategy::ShardedStrategy(GPT2& model, Communicator& comm, const StrategyOptions& opts, bool defer_moments)
    : StrategyCore(model, comm, opts) {
  const size_t owned = plan_.owned_numel();
  const Device dev = model.device();
  if (precision_ == Precision::bf16) {
    // Bucket by bucket from the model's bf16 params: no full-size fp32 copy.
    master_.allocate(MemTag::master, owned, dev);
    const bf16* params = static_cast<const bf16*>(model_.params());
    for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
      auto [lo, hi] = plan_.owned_layout_range(b, rank_);
      be_.bf16_to_f32(master_.data() + plan_.owned_offset(b), params + lo, hi - lo);
    }
  }
  if (!defer_moments) allocate_moments();
}

void ShardedStrategy::allocate_moments() {
  m_.allocate(MemTag::adam_m, plan_.owned_numel(), model_.device());
  v_.allocate(MemTag::adam_v, plan_.owned_numel(), model_.device());
}

StepStats ShardedStrategy::step_owned(const void* owned_grads, DType gdt, float lr) {
  double mine = partial_from_owned(be_, plan_, owned_grads, gdt);
  double norm = norm_from_partials(all_gather_partials(host_comm_, mine));
  if (gate_refuses(norm)) return skipped_stats(norm);
  float scale = clip_scale(norm, opts_.grad_clip);
  ++t_;

  const unsigned char* grads = static_cast<const unsigned char*>(owned_grads);
  const size_t gsize = dtype_size(gdt);
  for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
    auto [lo, hi] = plan_.owned_layout_range(b, rank_);
    if (lo >= hi) continue;
    // This rank's shard of bucket b starts at lo: owned index owned_offset(b).
    const size_t o = plan_.owned_offset(b);
    adamw(b, lo, hi, master_.empty() ? nullptr : master_.data() + o, owned_param(b, lo), grads + o * gsize, gdt,
          m_.data() + o, v_.data() + o, lr, scale);
  }

  publish_params();
  return finish_stats(norm);
}

unsigned char* ShardedStrategy::owned_param(int, size_t a) const {
  return static_cast<unsigned char*>(const_cast<void*>(model_.params())) + a * grad_bytes_;
}

void ShardedStrategy::publish_params() {
  // Every rank's updated shard to everyone, bucket by bucket, in place. The count is the
  // bucket's unpadded size: the communicator's shards of it are exactly ours (S_b =
  // ceil(numel / N)), and the padding never exists in the params.
  unsigned char* params = static_cast<unsigned char*>(model_.params());
  std::vector<WorkHandle> gathers;
  CommPurpose purpose("param all-gather");
  const DType pdt = precision_ == Precision::fp32 ? DType::f32 : DType::bf16;
  for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
    const Bucket& bk = plan_.buckets[b];
    auto r = plan_.owned_layout_range(b, rank_);
    trace::BucketLabel label(b);
    gathers.push_back(comm_.all_gather_async(params + r.first * grad_bytes_,
                                             params + bk.begin * grad_bytes_, bk.numel(), pdt));
  }
  for (auto& w : gathers) w->wait();
}

std::vector<std::pair<size_t, size_t>> ShardedStrategy::owned_ranges() const {
  return owned_layout_ranges(plan_, rank_);
}

// --- checkpoint state: the owned shard of every bucket, in bucket order (zero1, zero2,
// zero3), straight between the owned arrays and the chunks

void ShardedStrategy::visit_optimizer_state(const StateChunkFn& fn) const {
  Buffer<float> scratch;  // used only when the arrays live in device memory
  for (StateArray a : {StateArray::master, StateArray::m, StateArray::v}) {
    for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
      auto [lo, hi] = plan_.owned_layout_range(b, rank_);
      if (hi == lo) continue;
      const float* p;
      if (a == StateArray::master)  // fp32 mode: the owned parameters are the master weights
        p = master_.empty() ? reinterpret_cast<const float*>(owned_param(b, lo)) : master_.data() + plan_.owned_offset(b);
      else
        p = (a == StateArray::m ? m_ : v_).data() + plan_.owned_offset(b);
      visit_stored_f32(a, p, hi - lo, fn, scratch);
    }
  }
}

void ShardedStrategy::chunk_to_owned(size_t begin, const float* data, size_t n, float* owned) const {
  const size_t end = begin + n;
  if (n == 0 || begin >= plan_.total) return;
  for (int b = plan_.bucket_of(begin); b < static_cast<int>(plan_.buckets.size()) && plan_.buckets[b].begin < end; ++b) {
    auto [lo, hi] = plan_.owned_layout_range(b, rank_);
    const size_t a = std::max(lo, begin), e = std::min(hi, end);
    if (a < e) be_.copy_from_host(owned + plan_.owned_offset(b) + (a - lo), data + (a - begin), (e - a) * sizeof(float));
  }
}

void ShardedStrategy::set_master_chunk(size_t begin, const float* data, size_t n) {
  RZ_CHECK(begin <= plan_.total && n <= plan_.total - begin, "set_master_chunk: [%zu, +%zu) outside %zu", begin, n,
           plan_.total);
  set_params_chunk(begin, data, n);
  if (!master_.empty()) chunk_to_owned(begin, data, n, master_.data());
}

void ShardedStrategy::set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) {
  RZ_CHECK(which != StateArray::master && begin <= plan_.total && n <= plan_.total - begin,
           "set_moment_chunk: [%zu, +%zu) outside %zu", begin, n, plan_.total);
  chunk_to_owned(begin, data, n, (which == StateArray::m ? m_ : v_).data());
}

}  // namespace rz
