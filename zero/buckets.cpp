#include "zero/buckets.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"

namespace rz {

void check_bucket_mb(double bucket_mb) {
  // Past 1 TiB every model is one bucket; the bound keeps the element count in range.
  RZ_CHECK(std::isfinite(bucket_mb) && bucket_mb > 0.0 && bucket_mb <= 1048576.0,
           "expected a bucket size in MiB > 0, found %g (at most 1048576: 1 TiB)", bucket_mb);
}

BucketPlan strategy_bucket_plan(const ParamLayout& layout, StrategyKind kind, Precision precision, int nranks,
                                double bucket_mb, bool buckets_per_unit) {
  return build_bucket_plan(layout, bucket_mb, precision_bytes(precision), nranks,
                           buckets_per_unit || strategy_traits(kind).cuts_buckets_at_units);
}

BucketPlan build_bucket_plan(const ParamLayout& layout, double bucket_mb, size_t elem_bytes,
                             int nranks, bool cut_at_units) {
  check_bucket_mb(bucket_mb);
  RZ_CHECK(nranks >= 1, "bucket plan: expected at least 1 rank, got %d", nranks);
  RZ_CHECK(elem_bytes == 2 || elem_bytes == 4, "bucket plan: gradient element of %zu bytes", elem_bytes);
  // Capacity in elements, at least one so that the greedy rule always makes progress.
  double cap_d = bucket_mb * 1024.0 * 1024.0 / static_cast<double>(elem_bytes);
  size_t cap = cap_d >= 1.0 ? static_cast<size_t>(cap_d) : 1;
  const size_t n = static_cast<size_t>(nranks);
  const size_t align = kBucketAlignBytes / elem_bytes;  // in elements

  BucketPlan plan;
  plan.nranks = nranks;
  plan.total = layout.total;
  Bucket cur;
  auto close = [&](int next_tensor) {
    if (cur.num_tensors == 0) return;
    cur.padded = (cur.numel() + n - 1) / n * n;
    cur.shard = cur.padded / n;
    // Where the buffer starts a bucket changes nothing but its address: the shards (S) and
    // so every reduction are the same with or without the gap.
    cur.padded_offset = (plan.padded_total + align - 1) / align * align;
    cur.owned_offset = plan.owned_total;
    plan.padded_total = cur.padded_offset + cur.padded;
    plan.owned_total += cur.shard;
    plan.max_padded = std::max(plan.max_padded, cur.padded);
    plan.buckets.push_back(cur);
    cur = Bucket{};
    cur.begin = cur.end = plan.buckets.back().end;
    cur.first_tensor = next_tensor;
  };
  int num_layers = 0;
  for (const ParamTensor& t : layout.tensors) num_layers = std::max(num_layers, t.layer + 1);
  for (int i = 0; i < static_cast<int>(layout.tensors.size()); ++i) {
    const ParamTensor& t = layout.tensors[i];
    RZ_ENFORCE_EQ(t.offset, cur.end);  // the layout is dense and in order
    const bool new_unit = cut_at_units && i > 0 &&
                          param_unit_of(t, num_layers) != param_unit_of(layout.tensors[i - 1], num_layers);
    if (cur.num_tensors > 0 && (new_unit || cur.numel() + t.numel > cap)) close(i);
    cur.end += t.numel;
    cur.num_tensors += 1;
  }
  close(static_cast<int>(layout.tensors.size()));
  RZ_ENFORCE_EQ(plan.buckets.empty() ? size_t{0} : plan.buckets.back().end, layout.total);
  return plan;
}

int BucketPlan::bucket_of(size_t offset) const {
  RZ_CHECK(offset < total, "bucket_of: element %zu is outside the layout of %zu", offset, total);
  auto it = std::upper_bound(buckets.begin(), buckets.end(), offset,
                             [](size_t off, const Bucket& b) { return off < b.end; });
  return static_cast<int>(it - buckets.begin());
}

size_t BucketPlan::padded_index(size_t offset) const {
  const Bucket& b = buckets[bucket_of(offset)];
  return b.padded_offset + (offset - b.begin);
}

std::pair<size_t, size_t> BucketPlan::owned_layout_range(int b, int rank) const {
  const Bucket& bk = buckets[b];
  size_t lo = bk.begin + std::min(bk.numel(), static_cast<size_t>(rank) * bk.shard);
  size_t hi = bk.begin + std::min(bk.numel(), static_cast<size_t>(rank + 1) * bk.shard);
  return {lo, hi};
}

PaddedGradBuffer::PaddedGradBuffer(const BucketPlan& plan, size_t elem_bytes, Backend& be)
    : plan_(plan),
      elem_bytes_(elem_bytes),
      be_(be),
      data_(MemTag::grads, plan.padded_total * elem_bytes, be.device()) {}

void PaddedGradBuffer::zero() { be_.zero(data_.data(), data_.bytes()); }

unsigned char* PaddedGradBuffer::at(size_t offset, size_t count) {
  RZ_CHECK(count > 0 && offset + count <= plan_.total, "grad_ptr: range [%zu, +%zu) outside %zu",
           offset, count, plan_.total);
  return data_.data() + plan_.padded_index(offset) * elem_bytes_;
}

}  // namespace rz
