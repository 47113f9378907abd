// zero/wide_reduce.h: bf16 gradient buckets reduced in fp32 (--grad-reduce-dtype fp32).
//
// Why: the ring's ReduceScatter rounds the partial sum of each chunk to the dtype it travels
// in at every one of its N-1 hops (comm/ring/ring.cpp), so a bf16 reduction's error grows with
// N (about sqrt(N) for sums of gradients; docs/comm.md, "The precision of the reduction").
// Sending fp32 partials instead costs twice the bytes per hop. bf16 runs choose:
//   bf16  the bucket travels and is summed in bf16, as it lies (the default);
//   fp32  the bucket is widened into an fp32 buffer once backward finished it, the
//         collective runs on fp32 (on every backend: ring, mpi, nccl), and the collective's
//         OnDone narrows the result back to where the strategy keeps it (ddp's bucket,
//         zero1's owned shard, zero2's owned shard, accumulated), rounding once.
// The fp32 buffers (MemTag::comm) form a pool of K = buckets in flight buffers, each the
// size of the largest padded bucket (wide_reduce_pool()); a bucket that finds none free
// waits for a collective to finish (that wait counts as exposed communication).
// On a GPU the OnDone is the stream form: on a comm stream (nccl) the narrowing is queued
// behind the collective and the buffer goes back with a mark that its next widening
// waits for on the compute stream (as zero2's staging buffers do).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "base/memory.h"
#include "comm/communicator.h"
#include "kernels/backend.h"
#include "zero/buckets.h"

namespace rz {

// How many fp32 buffers of how many elements a strategy with this plan holds when it
// reduces in fp32: min(buckets, buckets_in_flight) buffers of the largest padded bucket.
// The rule lives here once: the strategies allocate it, `ringzero memory` predicts it.
struct WidePool {
  int buffers = 0;
  size_t elems = 0;  // fp32 elements of each
  size_t bytes() const { return static_cast<size_t>(buffers) * elems * sizeof(float); }
};
WidePool wide_reduce_pool(const BucketPlan& plan, int buckets_in_flight);

class WideReduceBuffers {
 public:
  WideReduceBuffers() = default;
  // Allocates the pool on the backend's device (nothing when pool.buffers == 0).
  void allocate(const WidePool& pool, Backend& be);
  bool enabled() const { return !bufs_.empty(); }
  const WidePool& pool() const { return pool_; }

  // Blocks until a buffer is free and returns its index, after the device finished every
  // earlier use of it. A collective in `pending` that failed is rethrown instead of
  // waiting for a release that never comes. Adds the blocked time to *waited_s.
  int acquire(const std::vector<WorkHandle>& pending, double* waited_s);
  float* data(int i) { return bufs_[static_cast<size_t>(i)].data(); }
  // From the collective's OnDone (any thread): buffer i is free once `mark` is reached.
  void release(int i, std::shared_ptr<void> mark);

 private:
  Backend* be_ = nullptr;
  WidePool pool_;
  std::vector<Buffer<float>> bufs_;  // (buffers) x (elems) fp32, MemTag::comm
  std::mutex mu_;
  std::condition_variable released_;
  std::vector<int> free_;
  std::vector<std::shared_ptr<void>> marks_;  // per buffer: Backend::mark after its last narrowing
};

}  // namespace rz
