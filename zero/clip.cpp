#include "zero/clip.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/bf16.h"
#include "base/check.h"
#include "comm/debug/flight_recorder.h"

namespace rz {

double shard_sum_squares(Backend& be, const void* x, size_t n, DType dtype) {
  if (n == 0) return 0.0;
  return dtype == DType::f32 ? be.sum_squares(static_cast<const float*>(x), n)
                             : be.sum_squares(static_cast<const bf16*>(x), n);
}

std::vector<double> partials_from_full(Backend& be, const BucketPlan& plan, const void* padded_grads,
                                       DType dtype) {
  const size_t es = dtype_size(dtype);
  const unsigned char* base = static_cast<const unsigned char*>(padded_grads);
  std::vector<double> partial(plan.nranks, 0.0);
  for (int r = 0; r < plan.nranks; ++r)
    for (const Bucket& b : plan.buckets)
      partial[r] += shard_sum_squares(be, base + (b.padded_offset + r * b.shard) * es, b.shard, dtype);
  return partial;
}

double partial_from_owned(Backend& be, const BucketPlan& plan, const void* owned, DType dtype) {
  const size_t es = dtype_size(dtype);
  const unsigned char* base = static_cast<const unsigned char*>(owned);
  double partial = 0.0;
  for (int b = 0; b < static_cast<int>(plan.buckets.size()); ++b)
    partial += shard_sum_squares(be, base + plan.owned_offset(b) * es, plan.buckets[b].shard, dtype);
  return partial;
}

double norm_from_partials(const std::vector<double>& partials) {
  double s = 0.0;
  for (double p : partials) s += p;
  return std::sqrt(s);
}

std::vector<double> all_gather_partials(HostCollectives& hc, double mine) {
  Communicator& comm = hc.comm();
  const int n = comm.size();
  std::vector<double> all(n, 0.0);
  all[comm.rank()] = mine;
  // Each double travels as two fp32 words; the in-place AllGather only copies them.
  CommPurpose purpose("grad norm");
  hc.all_gather(reinterpret_cast<const float*>(all.data()) + 2 * comm.rank(), reinterpret_cast<float*>(all.data()),
                2 * static_cast<size_t>(n));
  RZ_CHECK(std::memcmp(&all[comm.rank()], &mine, sizeof mine) == 0,
           "grad-norm all_gather changed rank %d's own partial", comm.rank());
  return all;
}

float clip_scale(double norm, float clip) {
  if (clip <= 0.0f || !std::isfinite(norm)) return 1.0f;
  double s = static_cast<double>(clip) / (norm + 1e-6);
  return s < 1.0 ? static_cast<float>(s) : 1.0f;
}

}  // namespace rz
