// zero/grad_sync.h: the first axis of a strategy -- how gradients are synchronised.
//
//   kind                  backward writes into                    collective, when                       result
//   all_reduce            one full buffer (padded buckets)        AllReduce(avg) per bucket, last        the full averaged gradient
//                                                                 micro-step only
//   reduce_scatter_last   one full buffer (padded buckets)        ReduceScatter(avg) per bucket, last    the owned shard (model precision)
//                                                                 micro-step only
//   reduce_scatter_every  staging buckets in flight               ReduceScatter(avg) per bucket, every   the owned shard, accumulated
//                         (zero/staged_grads.h)                   micro-step                             over micro-steps
//
// The strategy (zero/strategy.h) follows backward's grads_ready and calls submit_bucket(b)
// for each bucket that is complete when communication is due; the collectives run on the
// comm thread, overlapped with the rest of backward. wait() blocks on them (that time is
// "exposed", StepWindow). Afterwards averaged(b, a) points at the averaged gradient of
// layout element a, and global_norm() is the same number on every rank, computed from N
// shard partials in one fixed order (zero/clip.h), whichever kind.
//
// A bf16 run with --grad-reduce-dtype fp32 widens each bucket into an fp32 reduce buffer
// (zero/wide_reduce.h) before its collective; those buffers belong to the sync too.
//
// Legend: N ranks, P = layout.total parameters, S_b = shard of bucket b (padded_b / N).
#pragma once

#include <cstddef>
#include <vector>

#include "zero/state_bytes.h"
#include "zero/strategy_context.h"
#include "zero/wide_reduce.h"

namespace rz {

enum class GradSyncKind : int { all_reduce, reduce_scatter_last, reduce_scatter_every };
// From a strategy's traits (zero/strategy_options.h): a replicated optimizer needs the full
// averaged gradient; a sharded one its owned shard, staged bucket by bucket when the
// gradients are sharded too.
GradSyncKind grad_sync_kind(const StrategyTraits& t);

// zero2's staging pool (zero/staged_grads.h explains it): `general` buffers of
// general_elems each and one reserved buffer of reserved_elems for the last bucket, all in
// the model's precision. Empty for the kinds that keep a full gradient buffer instead.
struct StagingPool {
  int general = 0;                   // general buffers (K)
  std::vector<size_t> general_elems;  // (K) their sizes: the K largest buckets other than the last, padded, largest first
  size_t reserved_elems = 0;         // the last (wte's) bucket, padded
  size_t total_elems() const {
    size_t t = reserved_elems;
    for (size_t e : general_elems) t += e;
    return t;
  }
};

// The bytes a sync of this kind keeps for a plan: grads (the full buffer and/or the owned
// shard), staging, wide. The one rule: the built sync reports through it, and `ringzero
// memory` predicts with it.
void grad_sync_bytes(GradSyncKind kind, const BucketPlan& plan, Precision precision, const StagingPool& staging,
                     bool grad_shard_fp32, const WidePool& wide, ExactStateBytes& e);

class GradSync {
 public:
  // Allocates the fp32 reduce buffers where a bf16 run reduces in fp32.
  explicit GradSync(StrategyContext& cx);
  virtual ~GradSync() = default;
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  virtual GradSyncKind kind() const = 0;
  // Backward's storage for [offset, offset + count), inside one bucket (GradSink::grad_ptr).
  virtual void* grad_ptr(size_t offset, size_t count) = 0;
  // Micro-step 0, before backward: a new accumulation window.
  virtual void begin_window() {}
  // Every micro-step, after begin_window() on micro-step 0.
  virtual void begin_micro() {}
  // True where every micro-step communicates (else only the last one).
  virtual bool communicates_every_micro_step() const { return false; }
  // Bucket b's gradients are final for this backward (micro-step `micro`): start its collective.
  virtual void submit_bucket(int b, int micro) = 0;
  // Waits on every pending gradient collective; the blocked time counts as exposed.
  void wait();
  // After wait(): the averaged gradient of layout element a of bucket b (a in the range of
  // b this rank updates), in averaged_dtype().
  virtual const void* averaged(int b, size_t a) = 0;
  virtual DType averaged_dtype() const = 0;
  // After wait(): the global L2 norm of the averaged gradient (host collectives for the
  // sharded kinds).
  virtual double global_norm() = 0;

  virtual StagingPool staging_pool() const { return {}; }
  const WidePool& wide_pool() const { return wide_.pool(); }
  void add_bytes(ExactStateBytes& e) const {
    grad_sync_bytes(kind(), cx_.plan, cx_.precision, staging_pool(), cx_.opts.grad_shard_fp32, wide_pool(), e);
  }

 protected:
  // --grad-reduce-dtype fp32: widens bucket b's bf16 gradients `grads` (padded elements)
  // into a free fp32 buffer and returns its index; *wide is the buffer.
  int widen_bucket(int b, const void* grads, float** wide);
  // The global norm from this rank's owned shard's partial and everyone else's.
  double owned_norm(const void* owned, DType dtype);

  StrategyContext& cx_;
  std::vector<WorkHandle> work_;  // pending gradient collectives
  WideReduceBuffers wide_;        // the fp32 buffers when buckets are reduced in fp32
};

// ddp: every rank keeps one full gradient buffer in padded bucket coordinates (model
// precision); backward accumulates into it across micro-steps; on the last micro-step each
// complete bucket is all_reduce_async(avg)'d the moment grads_ready covers it.
class AllReduceGrads final : public GradSync {
 public:
  explicit AllReduceGrads(StrategyContext& cx);
  GradSyncKind kind() const override { return GradSyncKind::all_reduce; }
  void* grad_ptr(size_t offset, size_t count) override { return grads_.at(offset, count); }
  void begin_window() override { grads_.zero(); }
  void submit_bucket(int b, int micro) override;
  const void* averaged(int b, size_t a) override;
  DType averaged_dtype() const override { return cx_.grad_dtype; }
  double global_norm() override;

 private:
  PaddedGradBuffer grads_;  // (padded_total) model precision, MemTag::grads
};

// zero1: the full buffer as ddp's, but each complete bucket of the last micro-step is
// reduce_scatter_async(avg)'d into this rank's owned gradient shard (model precision).
class ReduceScatterGrads final : public GradSync {
 public:
  explicit ReduceScatterGrads(StrategyContext& cx);
  GradSyncKind kind() const override { return GradSyncKind::reduce_scatter_last; }
  void* grad_ptr(size_t offset, size_t count) override { return grads_.at(offset, count); }
  void begin_window() override { grads_.zero(); }
  void submit_bucket(int b, int micro) override;
  const void* averaged(int b, size_t a) override;
  DType averaged_dtype() const override { return cx_.grad_dtype; }
  double global_norm() override { return owned_norm(owned_grads_.data(), cx_.grad_dtype); }

 private:
  PaddedGradBuffer grads_;             // (padded_total) model precision, MemTag::grads
  Buffer<unsigned char> owned_grads_;  // (owned_numel) model precision, MemTag::grads
};

}  // namespace rz
