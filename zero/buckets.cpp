#include "zero/buckets.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"

namespace rz {

BucketPlan build_bucket_plan(const ParamLayout& layout, double bucket_mb, size_t elem_bytes,
                             int nranks) {
  RZ_CHECK(std::isfinite(bucket_mb) && bucket_mb > 0.0,
           "--bucket-mb: expected a size in MiB > 0, got %g", bucket_mb);
  RZ_CHECK(nranks >= 1, "bucket plan: expected at least 1 rank, got %d", nranks);
  RZ_CHECK(elem_bytes == 2 || elem_bytes == 4, "bucket plan: gradient element of %zu bytes", elem_bytes);
  // Capacity in elements, at least one so that the greedy rule always makes progress.
  double cap_d = bucket_mb * 1024.0 * 1024.0 / static_cast<double>(elem_bytes);
  size_t cap = cap_d >= 1.0 ? static_cast<size_t>(cap_d) : 1;
  const size_t n = static_cast<size_t>(nranks);

  BucketPlan plan;
  plan.nranks = nranks;
  plan.total = layout.total;
  Bucket cur;
  auto close = [&](int next_tensor) {
    if (cur.num_tensors == 0) return;
    cur.padded = (cur.numel() + n - 1) / n * n;
    cur.shard = cur.padded / n;
    cur.padded_offset = plan.padded_total;
    plan.padded_total += cur.padded;
    plan.max_padded = std::max(plan.max_padded, cur.padded);
    plan.buckets.push_back(cur);
    cur = Bucket{};
    cur.begin = cur.end = plan.buckets.back().end;
    cur.first_tensor = next_tensor;
  };
  for (int i = 0; i < static_cast<int>(layout.tensors.size()); ++i) {
    const ParamTensor& t = layout.tensors[i];
    RZ_ENFORCE_EQ(t.offset, cur.end);  // the layout is dense and in order
    if (cur.num_tensors > 0 && cur.numel() + t.numel > cap) close(i);
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

size_t BucketPlan::owned_offset(int b) const {
  return buckets[b].padded_offset / static_cast<size_t>(nranks);
}

std::pair<size_t, size_t> BucketPlan::owned_layout_range(int b, int rank) const {
  const Bucket& bk = buckets[b];
  size_t lo = bk.begin + std::min(bk.numel(), static_cast<size_t>(rank) * bk.shard);
  size_t hi = bk.begin + std::min(bk.numel(), static_cast<size_t>(rank + 1) * bk.shard);
  return {lo, hi};
}

int min_buckets_in_flight(const ParamLayout& layout, const BucketPlan& plan) {
  // While backward writes one unit (grad_ready_ranges), every unit before it is reported
  // ready, so the only buckets it can hold open are the ones that unit touches.
  const int last = static_cast<int>(plan.buckets.size()) - 1;
  int need = 1;
  for (auto [begin, end] : grad_ready_ranges(layout)) {
    int b0 = plan.bucket_of(begin);
    int b1 = plan.bucket_of(end - 1);
    need = std::max(need, std::min(b1, last - 1) - b0 + 1);  // general-pool buckets only
  }
  return need;
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
