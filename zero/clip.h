// zero/clip.h: the global gradient norm, computed identically by every strategy.
//
// The norm is that of the AVERAGED gradient over all parameters (padding is zero and adds
// nothing). To make ddp, zero1 and zero2 agree to the last bit, it is always summed the
// same way, from per-shard pieces:
//   ss(x)        sum of x[i]^2 in double over a contiguous range: the backend's
//                sum_squares (kernels/backend.h), reproducible to the bit for the same
//                range on one backend (the CPU's: fixed blocks of kSumBlock elements,
//                block sums added in block order, whatever the number of threads).
//   partial[r]   sum over buckets b = 0, 1, ... of ss(shard r of bucket b), in bucket order.
//   norm         sqrt(partial[0] + partial[1] + ... + partial[N-1]), added in rank order.
// zero ranks compute their own partial from the owned shard and all-gather the N partials;
// ddp holds the whole averaged gradient and computes all N partials locally.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "kernels/backend.h"
#include "zero/buckets.h"
#include "zero/host_collectives.h"

namespace rz {

// ss(x) over n elements of dtype (fp32 or bf16) in the backend's memory.
double shard_sum_squares(Backend& be, const void* x, size_t n, DType dtype);

// partial[r] for every r from a full gradient buffer in padded coordinates (ddp).
std::vector<double> partials_from_full(Backend& be, const BucketPlan& plan, const void* padded_grads,
                                       DType dtype);

// This rank's partial from its owned shards, concatenated in bucket order (S_b each).
double partial_from_owned(Backend& be, const BucketPlan& plan, const void* owned, DType dtype);

// sqrt of the partials added in rank order.
double norm_from_partials(const std::vector<double>& partials);

// All-gathers this rank's partial (moved as two fp32 words: all_gather copies bytes and
// does no arithmetic) and returns the N partials in rank order. A host value: through a
// device buffer where the communicator wants one (nccl).
std::vector<double> all_gather_partials(HostCollectives& hc, double mine);

// min(1, clip / (norm + 1e-6)); clip <= 0 disables clipping (scale 1).
float clip_scale(double norm, float clip);

}  // namespace rz
