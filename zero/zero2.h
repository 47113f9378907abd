// zero/zero2.h: ZeRO stage 2 -- gradients and optimizer states sharded.
//
// There is no full gradient buffer. Backward writes into staging buffers (MemTag::comm):
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
// it, the buffer's next zeroing waiting for that on the compute stream (stream form). The owned gradient is in the model's precision, as the ZeRO paper counts it
// (2 + 2/N + 12/N bytes/param in bf16); StrategyOptions::grad_shard_fp32 keeps it in fp32
// instead, for exact accumulation over many micro-steps. A grad_ptr that finds the pool
// empty waits for a release (that time is "exposed" communication); K is raised to the
// number of buckets one backward unit (a weight and its bias) spans when it is smaller,
// since those are written before either is ready. step() waits for the last shard, then
// runs the shared sharded optimizer (zero/sharded.h).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "zero/sharded.h"

namespace rz {

class Zero2Strategy : public ShardedStrategy {  // zero3 (zero/zero3.h) extends it
 public:
  // defer_moments: as ShardedStrategy's (zero3 allocates AdamW's m and v last).
  Zero2Strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts, bool defer_moments = false);

  StrategyKind kind() const override { return StrategyKind::zero2; }
  void* grad_ptr(size_t offset, size_t count) override;
  StepStats step(float lr) override;

  StagingPool staging_pool() const override { return pool_; }
  size_t staging_bytes() const;  // all staging buffers, general and reserved, as allocated

 protected:
  void begin_window() override {}
  void begin_micro() override;
  void submit_bucket(int b) override;
  bool communicates_every_micro_step() const override { return true; }
  int acquire_slot(int b);  // blocks until a buffer is free; returns its index
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
