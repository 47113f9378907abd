// zero/strategy_context.cpp: the facts every part of a strategy shares, checked once, and
// the checkpoint's chunk helpers over backend memory.
#include "zero/strategy_context.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace rz {

StrategyContext::StrategyContext(GPT2& model, Communicator& comm, const StrategyOptions& opts,
                                 const StrategyTraits& row)
    : model(model),
      be(model.backend()),
      comm(comm),
      host_comm(comm, model.backend()),
      opts(opts),
      layout(model.layout()),
      precision(model.precision()),
      grad_dtype(model.precision() == Precision::fp32 ? DType::f32 : DType::bf16),
      grad_bytes(precision_bytes(model.precision())),
      nranks(comm.size()),
      rank(comm.rank()),
      // strategy_bucket_plan's rule, from the row itself.
      plan(build_bucket_plan(model.layout(), opts.bucket_mb, precision_bytes(model.precision()), comm.size(),
                             opts.buckets_per_unit || row.cuts_buckets_at_units)) {
  check_strategy_device(opts.kind, !arrays_on_host(), "device " + device_name(model.device()));
  RZ_CHECK(opts.buckets_in_flight >= 1, "buckets in flight: expected at least 1, found %d",
           opts.buckets_in_flight);
  RZ_CHECK(std::isfinite(opts.grad_clip), "gradient clipping threshold: expected a finite number, found %g",
           static_cast<double>(opts.grad_clip));
}

bool StrategyContext::arrays_on_host() const { return model.device().is_cpu(); }

size_t StrategyContext::state_chunk_elems() const {
  const double elems = opts.bucket_mb * 1024.0 * 1024.0 / sizeof(float);
  return std::max<size_t>(size_t{1} << 14, elems < 1e15 ? static_cast<size_t>(elems) : size_t{1} << 50);
}

float* StrategyContext::scratch_for(Buffer<float>& scratch, size_t n) {
  if (scratch.size() < n) scratch.allocate(MemTag::workspace, n);
  return scratch.data();
}

void StrategyContext::visit_stored_f32(StateArray array, const float* src, size_t n, const StateChunkFn& fn,
                                       Buffer<float>& scratch) const {
  if (n == 0) return;
  if (arrays_on_host()) {
    fn(array, src, n);
    return;
  }
  const size_t chunk = std::min(n, state_chunk_elems());
  for (size_t i = 0; i < n; i += chunk) {
    const size_t k = std::min(chunk, n - i);
    be.copy_to_host(scratch_for(scratch, chunk), src + i, k * sizeof(float));
    fn(array, scratch.data(), k);
  }
}

std::vector<std::pair<size_t, size_t>> owned_layout_ranges(const BucketPlan& plan, int rank) {
  std::vector<std::pair<size_t, size_t>> out;
  for (int b = 0; b < static_cast<int>(plan.buckets.size()); ++b) {
    auto r = plan.owned_layout_range(b, rank);
    if (r.second > r.first) out.push_back(r);
  }
  return out;
}

}  // namespace rz
