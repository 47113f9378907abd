// zero/staged_grads.h: the gradient sync of zero2 and zero3 (GradSyncKind::reduce_scatter_every)
// -- no full gradient buffer.
//
// Backward writes into staging buffers (MemTag::comm):
//   general pool  K = --buckets-in-flight buffers, sized like the K largest buckets other
//                 than the last (padded; see zero2_staging_pool);
//   reserved      one buffer for the last bucket, the one holding wte. wte is tied: the
//                 classifier writes its gradient at the very start of backward and the
//                 token embedding finishes it at the very end, so that bucket is staged
//                 for the whole backward. Giving it its own buffer keeps the general pool
//                 free for the layers (with one shared pool of K, K = 1 would deadlock).
// grad_ptr() gives a bucket a zeroed buffer on its first use; when grads_ready completes
// the bucket it is reduce_scatter_async(avg)'d IN PLACE on the comm thread (the reduced
// shard lands in the buffer's own chunk r, so a staging buffer needs no extra room), and
// the OnDone callback copies (first micro-step) or adds (later ones) the shard into the
// owned gradient (MemTag::grads) and returns the buffer to the pool: on the comm thread
// after the reduce-scatter, or, with the nccl backend, queued on the comm stream behind
// it, the buffer's next zeroing waiting for that on the compute stream (stream form). The
// owned gradient is in the model's precision, as the ZeRO paper counts it
// (2 + 2/N + 12/N bytes/param in bf16); StrategyOptions::grad_shard_fp32 keeps it in fp32
// instead, for exact accumulation over many micro-steps. A grad_ptr that finds the pool
// empty waits for a release (that time is "exposed" communication); K is raised to the
// number of buckets one backward unit (a weight and its bias) spans when it is smaller,
// since those are written before either is ready.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "zero/grad_sync.h"

namespace rz {

// The pool allocated for a plan when `requested` buffers in flight are asked for. The rule
// lives here once (staged_grads.cpp): StagedGrads allocates exactly this, and `ringzero
// memory`, which predicts strategies it never builds, asks the same function.
StagingPool zero2_staging_pool(const ParamLayout& layout, const BucketPlan& plan, int requested);

// The fewest general buffers the pool can run with: one for every bucket that one backward
// unit (a (weight, bias) pair, grad_ready_ranges in model/layout.h) spans, since a unit's
// buckets are written before either is ready (the last bucket is excluded: it holds wte
// and has its own reserved buffer).
int min_buckets_in_flight(const ParamLayout& layout, const BucketPlan& plan);

class StagedGrads final : public GradSync {
 public:
  explicit StagedGrads(StrategyContext& cx);

  GradSyncKind kind() const override { return GradSyncKind::reduce_scatter_every; }
  void* grad_ptr(size_t offset, size_t count) override;
  void begin_micro() override;
  bool communicates_every_micro_step() const override { return true; }
  void submit_bucket(int b, int micro) override;
  const void* averaged(int b, size_t a) override;
  DType averaged_dtype() const override { return owned_dtype_; }
  double global_norm() override { return owned_norm(owned_grads_.data(), owned_dtype_); }

  StagingPool staging_pool() const override { return pool_; }
  size_t staging_bytes() const;  // all staging buffers, general and reserved, as allocated

 private:
  int acquire_slot(int b);  // blocks until a buffer is free; returns its index
  // From a collective's OnDone (any thread): the buffer is free again once `read` is reached.
  void release_slot(int slot, std::shared_ptr<void> read);
  // submit_bucket's fp32 reduction (--grad-reduce-dtype fp32) of bucket b staged in `slot`.
  void submit_wide(int b, int slot, unsigned char* owned, bool first);
  unsigned char* slot_data(int slot) { return staging_[slot].data(); }

  StagingPool pool_;                          // zero2_staging_pool() for this plan
  int pool_size_ = 0;                         // pool_.general; index pool_size_ is the reserved one
  std::vector<Buffer<unsigned char>> staging_;  // (pool_size_ + 1) buckets, model precision
  std::vector<int> slot_of_;                  // per bucket in this backward: slot, -1 none, -2 sent
  DType owned_dtype_;                         // the model's precision, or f32 (grad_shard_fp32)
  Buffer<unsigned char> owned_grads_;         // (owned_numel) owned_dtype_, MemTag::grads

  std::mutex mu_;                 // guards free_, busy_ (the comm thread releases)
  std::condition_variable released_;
  std::vector<int> free_;         // free general slots
  std::vector<bool> busy_;        // per slot: handed out and not yet released
  std::vector<bool> sent_;        // per slot: its reduce-scatter is queued (it will be released)
  std::vector<std::shared_ptr<void>> read_;  // per slot: Backend::mark after its last fold (GPU)
};

}  // namespace rz
