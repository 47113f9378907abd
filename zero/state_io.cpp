// zero/state_io.cpp: the strategies' checkpoint getters and setters, a chunk at a time.
//
// Saving: visit_optimizer_state() hands out the owned master weights, m and v as pointers
// into the strategy's own arrays (host, fp32: every CPU strategy) or, for arrays in device
// memory, a chunk at a time through one scratch buffer; visit_params_f32() does the same
// for the parameters (zero3 gathers one unit at a time; bf16 is widened per chunk).
// Loading: set_master_chunk() / set_moment_chunk() take a chunk in layout coordinates and
// keep what falls in this rank's ranges. Scratch buffers are MemTag::workspace (so the
// tracker sees them) and hold at most state_chunk_elems() floats.
#include <algorithm>
#include <cstring>

#include "base/bf16.h"
#include "base/check.h"
#include "zero/ddp.h"
#include "zero/sharded.h"
#include "zero/zero3.h"

namespace rz {

namespace {

// Allocates `scratch` for n floats unless it already holds that many.
float* scratch_for(Buffer<float>& scratch, size_t n) {
  if (scratch.size() < n) scratch.allocate(MemTag::workspace, n);
  return scratch.data();
}

}  // namespace

size_t Strategy::state_chunk_elems() const {
  const double elems = options().bucket_mb * 1024.0 * 1024.0 / sizeof(float);
  return std::max<size_t>(size_t{1} << 14, elems < 1e15 ? static_cast<size_t>(elems) : size_t{1} << 50);
}

void Strategy::get_optimizer_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) const {
  master.clear();
  m.clear();
  v.clear();
  visit_optimizer_state([&](StateArray a, const float* p, size_t n) {
    std::vector<float>& out = a == StateArray::master ? master : a == StateArray::m ? m : v;
    out.insert(out.end(), p, p + n);
  });
}

void Strategy::params_f32(float* out) {
  const ParamChunkFn fn = [out](size_t begin, const float* p, size_t n) {
    std::memcpy(out + begin, p, n * sizeof(float));
  };
  visit_params_f32(out != nullptr ? &fn : nullptr);
}

// --- StrategyCore: the model's own parameters (ddp, zero1, zero2)

void StrategyCore::visit_params_f32(const ParamChunkFn* fn) {
  if (fn == nullptr) return;
  const size_t total = layout_.total;
  if (precision_ == Precision::fp32 && model_.device().is_cpu()) {
    (*fn)(0, static_cast<const float*>(model_.params()), total);
    return;
  }
  Buffer<float> scratch;
  const size_t chunk = std::min(total, state_chunk_elems());
  for (size_t b = 0; b < total; b += chunk) {
    const size_t n = std::min(chunk, total - b);
    model_.get_params_f32(b, n, scratch_for(scratch, chunk));
    (*fn)(b, scratch.data(), n);
  }
}

void StrategyCore::visit_stored_f32(StateArray array, const float* src, size_t n, const StateChunkFn& fn,
                                    Buffer<float>& scratch) const {
  if (n == 0) return;
  if (model_.device().is_cpu()) {
    fn(array, src, n);
    return;
  }
  const size_t chunk = std::min(n, state_chunk_elems());
  for (size_t i = 0; i < n; i += chunk) {
    const size_t k = std::min(chunk, n - i);
    be_.copy_to_host(scratch_for(scratch, chunk), src + i, k * sizeof(float));
    fn(array, scratch.data(), k);
  }
}

// --- ddp: everything, in layout order

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

// --- zero1, zero2, zero3: the owned shard of every bucket, in bucket order

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

// --- zero3: the parameters are sharded too

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
