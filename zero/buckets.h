// zero/buckets.h: gradient buckets and the shard each rank owns.
//
// Terms (used the same way in grad_sync.cpp, staged_grads.cpp, optimizer_state.cpp and the tests):
//   layout    the model's flat parameter buffer, in gradient-ready order (model/layout.h).
//   bucket    a run of consecutive WHOLE tensors of the layout. Buckets are cut greedily in
//             layout order: the next tensor joins the current bucket unless that would
//             push it past the capacity (bucket_mb MiB of gradients in the model's
//             precision) and the bucket is not empty. So a tensor bigger than the capacity
//             is a bucket of its own (PyTorch DDP's rule) and any capacity > 0 works.
//   padded    a bucket's element count rounded up to a multiple of N, so that every
//             rank's shard has the same size S = padded / N. The padding sits at the end
//             of the bucket and its gradient is always zero.
//   shard     rank r owns elements [r*S, (r+1)*S) of every bucket (in padded coordinates).
//   padded buffer  all buckets in order, each at its padded_offset; the full gradient
//             buffer of ddp / zero1 uses these coordinates, so a bucket is one contiguous
//             range that a single collective can take. Each padded_offset is a multiple of
//             kBucketAlignBytes: a tensor's gradient then sits at the same alignment in this
//             buffer as in a zero2 staging buffer (both 0 mod 16 bytes at the bucket's start),
//             which is what lets cuBLASLt take the same algorithm, and give the same bits, for
//             ddp, zero1 and zero2 (kernels/gemm_alignment.h). The few elements between one
//             bucket's padding and the next bucket stay zero and belong to no shard.
//
// Every rank builds the same plan from the same layout: no communication is needed to
// agree on it.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "base/memory.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "zero/strategy_options.h"

namespace rz {

// Every bucket starts at a multiple of this many bytes in the padded buffer.
constexpr size_t kBucketAlignBytes = 16;

struct Bucket {
  size_t begin = 0;          // first layout element
  size_t end = 0;            // one past the last layout element
  size_t padded = 0;         // (end - begin) rounded up to a multiple of N
  size_t padded_offset = 0;  // start of the bucket in the padded buffer (kBucketAlignBytes-aligned)
  size_t shard = 0;          // S = padded / N: elements each rank owns
  size_t owned_offset = 0;   // start of its shard in a rank's owned arrays (sum of earlier S)
  int first_tensor = 0;      // index into layout.tensors
  int num_tensors = 0;
  size_t numel() const { return end - begin; }
};

struct BucketPlan {
  int nranks = 1;
  std::vector<Bucket> buckets;  // in layout order
  size_t total = 0;             // layout elements
  size_t padded_total = 0;      // elements of the padded buffer (alignment gaps included)
  size_t owned_total = 0;       // elements a rank owns: the sum of every bucket's S
  size_t max_padded = 0;        // largest bucket (the size of a zero2 staging buffer)

  // Index of the bucket holding layout element `offset` (offset < total).
  int bucket_of(size_t offset) const;
  // Position of layout element `offset` in the padded buffer.
  size_t padded_index(size_t offset) const;
  // Elements a rank owns over all buckets.
  size_t owned_numel() const { return owned_total; }
  // Offset of bucket b's shard inside a rank's concatenated owned shards (sum of earlier S).
  size_t owned_offset(int b) const { return buckets[b].owned_offset; }
  // The layout elements of bucket b that rank `rank` owns: [first, second), possibly empty
  // (a rank whose shard lies entirely in the padding).
  std::pair<size_t, size_t> owned_layout_range(int b, int rank) const;
};

// Throws "expected a bucket size in MiB > 0, found X" unless bucket_mb is finite and > 0.
void check_bucket_mb(double bucket_mb);

// elem_bytes: bytes of one gradient element (4 in fp32, 2 in bf16) -- the capacity counts
// gradient bytes as PyTorch's bucket_cap_mb does. cut_at_units: a bucket also ends where a
// ZeRO-3 unit ends (param_unit_ranges in model/layout.h: a layer, lnf, the embeddings), so
// every unit is a run of whole buckets and can be all-gathered bucket by bucket (zero3
// always; the other strategies on request, to compare with zero3 on the same buckets).
// Throws rz::Error for bucket_mb <= 0 or nranks < 1.
BucketPlan build_bucket_plan(const ParamLayout& layout, double bucket_mb, size_t elem_bytes,
                             int nranks, bool cut_at_units = false);

// The plan strategy `kind` builds over N = nranks ranks: --bucket-mb of gradients in the
// model's precision, cut at units where its traits say so (zero3) or buckets_per_unit
// asks. The one rule: every strategy builds its plan here, and so do the estimators that
// predict a strategy without building it (predicted_state_bytes, plan_memory); reports
// ask the strategy for the plan it built (Strategy::bucket_plan()).
BucketPlan strategy_bucket_plan(const ParamLayout& layout, StrategyKind kind, Precision precision, int nranks,
                                double bucket_mb, bool buckets_per_unit = false);

// The full gradient buffer of ddp and zero1: every gradient, in the model's precision, at
// its padded-bucket position (MemTag::grads). Bucket b is then one contiguous range whose
// padding stays zero, ready to hand to a collective as it is.
class PaddedGradBuffer {
 public:
  // Allocated on the backend's device; zero() goes through the backend too.
  PaddedGradBuffer(const BucketPlan& plan, size_t elem_bytes, Backend& be);
  void zero();  // start a new accumulation window
  // Storage of layout range [offset, offset + count), which lies inside one tensor.
  unsigned char* at(size_t offset, size_t count);
  unsigned char* bucket(int b) { return data_.data() + plan_.buckets[b].padded_offset * elem_bytes_; }
  const unsigned char* data() const { return data_.data(); }

 private:
  const BucketPlan& plan_;
  size_t elem_bytes_;
  Backend& be_;
  Buffer<unsigned char> data_;  // (padded_total) elements
};


}  // namespace rz
