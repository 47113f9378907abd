// zero/sharded_params.cpp: zero3's parameter store -- the owned shard, the unit gate and
// its gathers, and the checkpoint's view of sharded parameters.
#include "zero/sharded_params.h"

#include <algorithm>
#include <cstring>

#include "base/bf16.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/trace.h"
#include "comm/debug/flight_recorder.h"

namespace rz {

GatherPool zero3_gather_pool(const ParamLayout& layout, int num_layers) {
  const auto units = param_unit_ranges(layout, num_layers);
  GatherPool pool;
  for (int u = 0; u < num_layers + 1; ++u)
    pool.general_elems = std::max(pool.general_elems, units[u].second - units[u].first);
  pool.general = kUnitsInFlight;
  pool.embedding_elems = units[num_layers + 1].second - units[num_layers + 1].first;
  return pool;
}

ShardedParams::ShardedParams(StrategyContext& cx) : cx_(cx) {
  GPT2& model = cx.model;
  const int L = model.config().num_layers;
  num_units_ = L + 2;
  units_ = param_unit_ranges(cx_.layout, L);
  for (auto [begin, end] : units_) {
    const int b0 = cx_.plan.bucket_of(begin), b1 = cx_.plan.bucket_of(end - 1);
    RZ_ENFORCE_EQ(cx_.plan.buckets[b0].begin, begin);  // the plan is cut at unit boundaries
    RZ_ENFORCE_EQ(cx_.plan.buckets[b1].end, end);
    unit_buckets_.emplace_back(b0, b1);
  }
  // This rank's shard of the parameters, bucket by bucket from the model's full params.
  owned_params_.allocate(MemTag::params, cx_.plan.owned_numel() * cx_.grad_bytes);
  const unsigned char* full = static_cast<const unsigned char*>(model.params());
  for (int b = 0; b < static_cast<int>(cx_.plan.buckets.size()); ++b) {
    auto [lo, hi] = cx_.plan.owned_layout_range(b, cx_.rank);
    std::memcpy(param(b, lo), full + lo * cx_.grad_bytes, (hi - lo) * cx_.grad_bytes);  // padding stays zero
  }
  gather_pool_ = zero3_gather_pool(cx_.layout, L);
  slots_.resize(gather_pool_.general + 1);
  for (int s = 0; s < gather_pool_.general; ++s)
    slots_[s].data.allocate(MemTag::params, gather_pool_.general_elems * cx_.grad_bytes);
  slots_.back().data.allocate(MemTag::params, gather_pool_.embedding_elems * cx_.grad_bytes);
  slot_of_unit_.assign(num_units_, -1);
  model.set_param_gate(this);  // releases the model's full parameter buffer
}

ShardedParams::~ShardedParams() {
  for (Slot& s : slots_)
    for (auto& w : s.work) {
      try {
        w->wait();  // a gather must not write into a freed buffer
      } catch (...) {
      }
    }
  cx_.model.set_param_gate(nullptr);
}

unsigned char* ShardedParams::param(int b, size_t a) const {
  const size_t shard_begin = cx_.plan.buckets[b].begin + static_cast<size_t>(cx_.rank) * cx_.plan.buckets[b].shard;
  return const_cast<unsigned char*>(owned_params_.data()) + (cx_.plan.owned_offset(b) + (a - shard_begin)) * cx_.grad_bytes;
}

int ShardedParams::slot_for(int unit) {
  const int emb = num_units_ - 1;
  if (unit == emb) return slots_.back().unit < 0 ? static_cast<int>(slots_.size()) - 1 : -1;
  for (int s = 0; s < gather_pool_.general; ++s)
    if (slots_[s].unit < 0) return s;
  return -1;
}

void ShardedParams::start_gather(int unit, int slot) {
  Slot& sl = slots_[slot];
  sl.unit = unit;
  slot_of_unit_[unit] = slot;
  const DType pdt = cx_.precision == Precision::fp32 ? DType::f32 : DType::bf16;
  const size_t unit_begin = units_[unit].first;
  for (int b = unit_buckets_[unit].first; b <= unit_buckets_[unit].second; ++b) {
    const Bucket& bk = cx_.plan.buckets[b];
    // Our shard of bucket b (the communicator's shard_of(numel, N, rank): S_b elements,
    // fewer or none for the last ranks) lands at its place in the unit buffer.
    trace::BucketLabel label(b);
    CommPurpose purpose("param unit gather");
    sl.work.push_back(cx_.comm.all_gather_async(owned_params_.data() + cx_.plan.owned_offset(b) * cx_.grad_bytes,
                                             sl.data.data() + (bk.begin - unit_begin) * cx_.grad_bytes, bk.numel(),
                                             pdt));
  }
}

void ShardedParams::drop(int slot) {
  Slot& sl = slots_[slot];
  for (auto& w : sl.work) w->wait();
  sl.work.clear();
  if (sl.unit >= 0) slot_of_unit_[sl.unit] = -1;
  sl.unit = -1;
  sl.held = false;
}

const void* ShardedParams::acquire(int unit, int next) {
  RZ_CHECK(unit >= 0 && unit < num_units_ && next >= -1 && next < num_units_,
           "zero3: unit %d (next %d) outside 0..%d", unit, next, num_units_ - 1);
  if (!cx_.window.open) cx_.window.begin(cx_.comm);  // the forward's gathers belong to this step
  int s = slot_of_unit_[unit];
  RZ_CHECK(s < 0 || !slots_[s].held, "zero3: unit %d acquired twice without a release", unit);
  if (s < 0) {
    s = slot_for(unit);
    if (s < 0) {
      // Only a prefetch that was never used can occupy the slot (a forward cut short):
      // drop one that is not held.
      for (int i = 0; i < static_cast<int>(slots_.size()) - 1 && s < 0; ++i)
        if (!slots_[i].held && unit != num_units_ - 1) s = i;
      RZ_CHECK(s >= 0, "zero3: no free buffer for unit %d (every gathered unit is still in use)", unit);
      drop(s);
    }
    start_gather(unit, s);
  }
  // Prefetch: the next unit's AllGather is queued now, behind this one, and runs on the
  // comm thread while the model computes with `unit`.
  if (next >= 0 && next != unit && slot_of_unit_[next] < 0) {
    const int f = slot_for(next);
    if (f >= 0) start_gather(next, f);
  }
  Slot& sl = slots_[s];
  auto t0 = Clock::now();
  for (auto& w : sl.work) w->wait();
  sl.work.clear();
  cx_.window.gather_exposed_s += seconds_since(t0);
  sl.held = true;
  return sl.data.data();
}

void ShardedParams::release(int unit) {
  RZ_CHECK(unit >= 0 && unit < num_units_ && slot_of_unit_[unit] >= 0 && slots_[slot_of_unit_[unit]].held,
           "zero3: release of unit %d, which is not acquired", unit);
  drop(slot_of_unit_[unit]);
}

void ShardedParams::before_update() {
  // AdamW is about to change the owned shards: no gathered copy may outlive the step.
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    RZ_CHECK(!slots_[s].held, "zero3: step with unit %d still acquired", slots_[s].unit);
    if (slots_[s].unit >= 0) drop(s);
  }
}

// --- checkpoint state: the parameters are sharded too

void ShardedParams::set_chunk_f32(size_t begin, const float* data, size_t n) {
  const size_t end = begin + n;
  if (n == 0 || begin >= cx_.plan.total) return;
  for (int b = cx_.plan.bucket_of(begin); b < static_cast<int>(cx_.plan.buckets.size()) && cx_.plan.buckets[b].begin < end; ++b) {
    auto [lo, hi] = cx_.plan.owned_layout_range(b, cx_.rank);
    const size_t a = std::max(lo, begin), e = std::min(hi, end);
    if (a >= e) continue;
    if (cx_.precision == Precision::fp32)
      std::memcpy(param(b, a), data + (a - begin), (e - a) * sizeof(float));
    else
      cx_.be.f32_to_bf16(reinterpret_cast<bf16*>(param(b, a)), data + (a - begin), e - a);
  }
}

void ShardedParams::visit_f32(const ParamChunkFn* fn) {
  // Unit by unit through the gate's own buffers (collective: every rank gathers); bf16 is
  // widened a chunk at a time.
  Buffer<float> scratch;
  const size_t chunk = cx_.state_chunk_elems();
  for (int u = 0; u < num_units_; ++u) {
    const bool was_open = cx_.window.open;
    const void* p = acquire(u, u + 1 < num_units_ ? u + 1 : -1);
    cx_.window.open = was_open;  // a checkpoint's gathers are not a training step's
    const size_t begin = units_[u].first, n = units_[u].second - begin;
    if (fn != nullptr) {
      if (cx_.precision == Precision::fp32) {
        (*fn)(begin, static_cast<const float*>(p), n);
      } else {
        for (size_t i = 0; i < n; i += chunk) {
          const size_t k = std::min(chunk, n - i);
          cx_.be.bf16_to_f32(StrategyContext::scratch_for(scratch, std::min(chunk, n)), static_cast<const bf16*>(p) + i, k);
          (*fn)(begin + i, scratch.data(), k);
        }
      }
    }
    release(u);
  }
}

}  // namespace rz
