// comm/ring/ring.h: the ring collectives, written once over a RingChannel.
//
// Every function here runs on one rank and talks only to its two neighbours through
// RingContext::channel; the same code serves the thread, shm and tcp transports. The
// algorithm and its terms (chunk, shard, round, segment) are explained in ring.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/memory.h"
#include "comm/ring/channel.h"
#include "comm/communicator.h"
#include "comm/debug/fingerprint.h"

namespace rz {

// What one rank did in one round; comm-trace turns these into round tables
// (one row per rank: sends right, receives left, holds), the seed article's layout.
struct RingRound {
  int rank = 0;
  int nranks = 1;
  CollectiveKind phase = CollectiveKind::all_gather;  // reduce_scatter, all_gather or broadcast
  int round = 0;          // 1 .. N-1 (broadcast: 1)
  bool end = false;       // false: before the round's first send; true: after its last receive
  int sent_chunk = -1;    // chunk index this round sends (-1: none)
  int recv_chunk = -1;    // chunk index this round receives (-1: none)
  const void* data = nullptr;  // begin: the chunk about to be sent; end: the received chunk as held
  size_t data_count = 0;       // elements behind data
  DType dtype = DType::f32;
};

// Sees every round of every collective of one rank, on that rank's comm path.
class RingObserver {
 public:
  virtual ~RingObserver() = default;
  virtual void on_round(const RingRound& r) = 0;
};


// How the ring touches element data in the rank's buffers: HostElements for host memory
// (memmove, reduce_elements, a Buffer), and the cuda transport's (comm/transport/device_ring.h)
// for device memory, which enqueues copies and a reduce kernel on its comm stream: the
// reduction is an argument of the algorithm (gloo), the schedule does not change.
class RingElements {
 public:
  virtual ~RingElements() = default;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // dst and src do not overlap
  // reduce_elements' contract, on the elements' memory.
  virtual void reduce(DType dtype, void* dst, const void* a, const void* b, size_t n, int divide_by) = 0;
  // ReduceScatter's partial-sum chunk: at least bytes, grow-only, owned by the elements.
  virtual void* scratch(size_t bytes) = 0;
  // Host memory: what the host-only shortcuts need (direct reads of a neighbour's buffer, the
  // small AllReduce), which read and reduce the buffers on the CPU.
  virtual bool on_host() const { return false; }
};

// dst[i] = a[i] + b[i] in fp32 arithmetic (bf16 rounded once, RNE); when divide_by > 0
// the sum is divided by it in fp32 before rounding. dst may alias a or b.
void reduce_elements(DType dtype, void* dst, const void* a, const void* b, size_t n, int divide_by);

// The elements of host buffers; scratch is *work, grown on demand (MemTag::comm).
class HostElements final : public RingElements {
 public:
  explicit HostElements(Buffer<unsigned char>* work) : work_(work) {}
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void reduce(DType dtype, void* dst, const void* a, const void* b, size_t n, int divide_by) override {
    reduce_elements(dtype, dst, a, b, n, divide_by);
  }
  void* scratch(size_t bytes) override {
    if (work_->size() < bytes) work_->allocate(MemTag::comm, bytes);
    return work_->data();
  }
  bool on_host() const override { return true; }

 private:
  Buffer<unsigned char>* work_;
};

struct RingContext {
  RingChannel* channel = nullptr;  // null only when nranks == 1
  RingElements* elements = nullptr;  // never null when a collective runs: HostElements for host buffers
  int rank = 0;
  int nranks = 1;
  size_t segment_bytes = 1u << 20;
  RingObserver* observer = nullptr;
  std::atomic<int32_t>* progress = nullptr;   // the flight recorder's word: phase and round reached
  uint64_t bytes_sent = 0;  // payload bytes of the current collective
  uint64_t bytes_recv = 0;
};

// An AllReduce of at most this many bytes takes the small path at N = 2 (where it sends the
// ring's bytes), of at most kSmallAllReduceManyBytes from N = 3 (where it sends (N-1) x M
// instead of the ring's 2(N-1)/N x M: kept to the host values, a loss or a vote, so that
// gradient buckets keep the ring's byte counts), and in either case only when the input
// fits one segment and one slot: N-1 hops, every rank reduces all inputs in the ring's
// order (ring.cpp).
constexpr size_t kSmallAllReduceBytes = 4096;
constexpr size_t kSmallAllReduceManyBytes = 64;
// Whether an AllReduce of `bytes` bytes takes the small path (not when an observer such
// as comm-trace watches the rounds: it shows the ring).
bool small_all_reduce_applies(size_t bytes, int nranks, size_t segment_bytes, size_t max_message_bytes,
                              bool observed);

// The work buffer ring_reduce_scatter keeps partial sums in (RingElements::scratch): one
// chunk, the largest (rank 0's), of a count of elements of elem_bytes each on nranks ranks;
// none on one rank. AllReduce and AllGather work in place.
// zero/memory/plan.cpp predicts a run's comm memory with it.
size_t ring_scratch_bytes(size_t count, int nranks, size_t elem_bytes);
void ring_reduce_scatter(RingContext& ctx, const void* in, void* out, size_t count, DType dtype, ReduceOp op);
void ring_all_reduce(RingContext& ctx, void* buf, size_t count, DType dtype, ReduceOp op);
void ring_all_gather(RingContext& ctx, const void* shard, void* out, size_t count, DType dtype);
void ring_broadcast(RingContext& ctx, void* buf, size_t count, DType dtype, int root);
void ring_barrier(RingContext& ctx);
// Sends this rank's fingerprint right, receives the left one and throws FingerprintError
// (comm/debug/fingerprint.h) naming both on the first difference.
void ring_check_fingerprint(RingContext& ctx, const Fingerprint& fp);

}  // namespace rz
