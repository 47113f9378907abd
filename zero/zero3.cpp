#include "zero/zero3.h"

#include <algorithm>
#include <cstring>

#include "base/bf16.h"
#include "base/check.h"
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

Zero3Strategy::Zero3Strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts)
    : Zero2Strategy(model, comm, opts, /*defer_moments=*/true) {
  const int L = model.config().num_layers;
  num_units_ = L + 2;
  units_ = param_unit_ranges(layout_, L);
  for (auto [begin, end] : units_) {
    const int b0 = plan_.bucket_of(begin), b1 = plan_.bucket_of(end - 1);
    RZ_ENFORCE_EQ(plan_.buckets[b0].begin, begin);  // the plan is cut at unit boundaries
    RZ_ENFORCE_EQ(plan_.buckets[b1].end, end);
    unit_buckets_.emplace_back(b0, b1);
  }
  // This rank's shard of the parameters, bucket by bucket from the model's full params.
  owned_params_.allocate(MemTag::params, plan_.owned_numel() * grad_bytes_);
  const unsigned char* full = static_cast<const unsigned char*>(model.params());
  for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
    auto [lo, hi] = plan_.owned_layout_range(b, rank_);
    std::memcpy(owned_param(b, lo), full + lo * grad_bytes_, (hi - lo) * grad_bytes_);  // padding stays zero
  }
  gather_pool_ = zero3_gather_pool(layout_, L);
  slots_.resize(gather_pool_.general + 1);
  for (int s = 0; s < gather_pool_.general; ++s)
    slots_[s].data.allocate(MemTag::params, gather_pool_.general_elems * grad_bytes_);
  slots_.back().data.allocate(MemTag::params, gather_pool_.embedding_elems * grad_bytes_);
  slot_of_unit_.assign(num_units_, -1);
  model.set_param_gate(this);  // releases the model's full parameter buffer
  allocate_moments();          // only now: start-up never holds the full params and m, v
}

Zero3Strategy::~Zero3Strategy() {
  for (Slot& s : slots_)
    for (auto& w : s.work) {
      try {
        w->wait();  // a gather must not write into a freed buffer
      } catch (...) {
      }
    }
  model_.set_param_gate(nullptr);
}

unsigned char* Zero3Strategy::owned_param(int b, size_t a) const {
  const size_t shard_begin = plan_.buckets[b].begin + static_cast<size_t>(rank_) * plan_.buckets[b].shard;
  return const_cast<unsigned char*>(owned_params_.data()) + (plan_.owned_offset(b) + (a - shard_begin)) * grad_bytes_;
}

int Zero3Strategy::slot_for(int unit) {
  const int emb = num_units_ - 1;
  if (unit == emb) return slots_.back().unit < 0 ? static_cast<int>(slots_.size()) - 1 : -1;
  for (int s = 0; s < gather_pool_.general; ++s)
    if (slots_[s].unit < 0) return s;
  return -1;
}

void Zero3Strategy::start_gather(int unit, int slot) {
  Slot& sl = slots_[slot];
  sl.unit = unit;
  slot_of_unit_[unit] = slot;
  const DType pdt = precision_ == Precision::fp32 ? DType::f32 : DType::bf16;
  const size_t unit_begin = units_[unit].first;
  for (int b = unit_buckets_[unit].first; b <= unit_buckets_[unit].second; ++b) {
    const Bucket& bk = plan_.buckets[b];
    // Our shard of bucket b (the communicator's shard_of(numel, N, rank): S_b elements,
    // fewer or none for the last ranks) lands at its place in the unit buffer.
    trace::BucketLabel label(b);
    CommPurpose purpose("param unit gather");
    sl.work.push_back(comm_.all_gather_async(owned_params_.data() + plan_.owned_offset(b) * grad_bytes_,
                                             sl.data.data() + (bk.begin - unit_begin) * grad_bytes_, bk.numel(),
                                             pdt));
  }
}

void Zero3Strategy::drop(int slot) {
  Slot& sl = slots_[slot];
  for (auto& w : sl.work) w->wait();
  sl.work.clear();
  if (sl.unit >= 0) slot_of_unit_[sl.unit] = -1;
  sl.unit = -1;
  sl.held = false;
}

const void* Zero3Strategy::acquire(int unit, int next) {
  RZ_CHECK(unit >= 0 && unit < num_units_ && next >= -1 && next < num_units_,
           "zero3: unit %d (next %d) outside 0..%d", unit, next, num_units_ - 1);
  if (!window_open_) open_window();  // the forward's gathers belong to this step
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
  gather_exposed_s_ += seconds_since(t0);
  sl.held = true;
  return sl.data.data();
}

void Zero3Strategy::release(int unit) {
  RZ_CHECK(unit >= 0 && unit < num_units_ && slot_of_unit_[unit] >= 0 && slots_[slot_of_unit_[unit]].held,
           "zero3: release of unit %d, which is not acquired", unit);
  drop(slot_of_unit_[unit]);
}

StepStats Zero3Strategy::step(float lr) {
  // AdamW is about to change the owned shards: no gathered copy may outlive the step.
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    RZ_CHECK(!slots_[s].held, "zero3: step with unit %d still acquired", slots_[s].unit);
    if (slots_[s].unit >= 0) drop(s);
  }
  return Zero2Strategy::step(lr);
}

// --- checkpoint state: the parameters are sharded too

void Zero3Strategy::set_params_chunk(size_t begin, const float* data, size_t n) {
  const size_t end = begin + n;
  if (n == 0 || begin >= plan_.total) return;
  for (int b = plan_.bucket_of(begin); b < static_cast<int>(plan_.buckets.size()) && plan_.buckets[b].begin < end; ++b) {
    auto [lo, hi] = plan_.owned_layout_range(b, rank_);
    const size_t a = std::max(lo, begin), e = std::min(hi, end);
    if (a >= e) continue;
    if (precision_ == Precision::fp32)
      std::memcpy(owned_param(b, a), data + (a - begin), (e - a) * sizeof(float));
    else
      be_.f32_to_bf16(reinterpret_cast<bf16*>(owned_param(b, a)), data + (a - begin), e - a);
  }
}

void Zero3Strategy::visit_params_f32(const ParamChunkFn* fn) {
  // Unit by unit through the gate's own buffers (collective: every rank gathers); bf16 is
  // widened a chunk at a time.
  Buffer<float> scratch;
  const size_t chunk = state_chunk_elems();
  for (int u = 0; u < num_units_; ++u) {
    const bool was_open = window_open_;
    const void* p = acquire(u, u + 1 < num_units_ ? u + 1 : -1);
    window_open_ = was_open;  // a checkpoint's gathers are not a training step's
    const size_t begin = units_[u].first, n = units_[u].second - begin;
    if (fn != nullptr) {
      if (precision_ == Precision::fp32) {
        (*fn)(begin, static_cast<const float*>(p), n);
      } else {
        for (size_t i = 0; i < n; i += chunk) {
          const size_t k = std::min(chunk, n - i);
          be_.bf16_to_f32(scratch_for(scratch, std::min(chunk, n)), static_cast<const bf16*>(p) + i, k);
          (*fn)(begin + i, scratch.data(), k);
        }
      }
    }
    release(u);
  }
}

}  // namespace rz
