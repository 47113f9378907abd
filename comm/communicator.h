// comm/communicator.h: the collective interface every strategy talks to.
//
// Terms (used the same way in ring.cpp and the tests):
//   N       number of ranks; rank r sends to rank (r+1)%N and receives from (r-1+N)%N.
//   count   number of elements of the *full* tensor (not bytes, not a shard).
//   shard   rank r's part of a full tensor: shard_of(count, N, r). Shards have
//           S = ceil(count / N) elements, the last ones fewer (possibly zero) when N does
//           not divide count. ReduceScatter leaves shard r of the reduction on rank r;
//           AllGather concatenates the shards in rank order.
//
// Blocking calls return when this rank's part is complete. Async calls return a
// WorkHandle at once; they run in issue order on this rank's comm thread, so compute can
// go on meanwhile. Every wait is bounded by the communicator's timeout: a dead peer
// becomes an rz::Error naming the peer rank and the collective, never a hang.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "base/check.h"

namespace rz {

// A failure that involves a neighbour: closed channel, dead process, timeout, or a
// message that does not match what this rank expected. The communicator prefixes the
// rank and the collective ("rank 1: all_reduce #7: ...").
struct PeerError : Error {
  PeerError(int peer_rank, const std::string& msg) : Error(msg), peer(peer_rank) {}
  int peer;
};

class FlightRecorder;

enum class DType : int { f32, bf16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "fp32", "bf16"

// avg divides the finished sum by N on the rank that owns the shard, in fp32, after the
// last hop; so all_reduce(avg) and reduce_scatter(avg) give bitwise the same shard.
enum class ReduceOp : int { sum, avg };
const char* reduce_op_name(ReduceOp op);

enum class CollectiveKind : int { all_gather, reduce_scatter, all_reduce, broadcast, barrier };
constexpr int kNumCollectiveKinds = 5;
const char* collective_name(CollectiveKind k);  // "all_reduce", ...
// The args of a collective's --trace span (base/trace.h), the same on every backend:
// "bytes_sent":..,"count":..,"dtype":"..","seq":.. and, for bucket >= 0, "bucket":...
std::string comm_span_args(uint64_t bytes_sent, uint64_t count, DType dt, uint64_t seq, int bucket);

struct ShardRange {
  size_t offset = 0;  // first element of the shard in the full tensor
  size_t count = 0;   // elements in the shard (0 for trailing ranks of a tiny tensor)
};
ShardRange shard_of(size_t count, int nranks, int rank);

// Per-collective byte and time counters of one rank. Bytes are payload bytes that this
// rank put on / took off its channels; an AllReduce of M bytes sends 2(N-1)/N x M.
struct CommCounters {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_recv = 0;
  double seconds = 0.0;  // wall time spent executing the collective on the comm path
};

struct CommStats {
  CommCounters by_kind[kNumCollectiveKinds];
  CommCounters total() const;
  void reset() { *this = CommStats{}; }
};

// A pending async collective. wait() rethrows the collective's error, if any.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool done() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// The handle every backend returns: finished exactly once, by the thread that ran the
// collective (the comm thread, or a watchdog), with the collective's error if it failed.
// wait() blocks until then and rethrows that error.
class FinishableWork : public Work {
 public:
  void wait() override;
  bool done() override;
  void finish(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::exception_ptr error_;
};

// What an async collective runs when it is done (e.g. accumulate a reduced shard and
// release a staging buffer). It must not issue collectives. Two forms:
//   host form    OnDone([&] { ... }): runs on the comm thread (NCCL: its watchdog) after the
//                collective finished; the results can be read on the host.
//   stream form  OnDone::on_stream([&](void* stream) { ... }): for work the device can
//                order itself. Where the collective's result is produced on a device stream
//                (the nccl backend), it runs as soon as the collective is queued there,
//                with that stream: work it queues on the stream runs after the collective,
//                and the host never waits for it. Elsewhere (host buffers, the CPU, the
//                ring's cuda transport, which synchronizes its comm stream to finish) it runs
//                like the host form, after the collective, with stream null: the result is
//                ready, and work goes to the caller's usual (compute) stream.
// Either way a handle is done only after the collective and what OnDone queued on its
// stream have finished (NCCL records the handle's event after both). A stream-form OnDone
// that queued work may run before a failing collective has failed: that work may see
// garbage, and the handle still reports the collective's error.
class OnDone {
 public:
  OnDone() = default;
  template <typename F, typename = std::enable_if_t<std::is_invocable_v<F&>>>
  OnDone(F f) : host_(std::move(f)) {}  // NOLINT: lambdas convert, as to std::function
  static OnDone on_stream(std::function<void(void* stream)> f) {
    OnDone d;
    d.stream_ = std::move(f);
    return d;
  }
  explicit operator bool() const { return host_ || stream_; }
  bool stream_form() const { return static_cast<bool>(stream_); }
  // After the collective finished, on the host: either form (the stream form gets null).
  void run_after() const {
    if (host_) host_();
    else if (stream_) stream_(nullptr);
  }
  // Stream form only, right after the collective was queued on `stream`.
  void run_queued(void* stream) const { stream_(stream); }

 private:
  std::function<void()> host_;
  std::function<void(void* stream)> stream_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string transport_name() const = 0;  // "thread", "shm", "tcp"
  // True when the peers read host buffers allocated with Buffer::allocate_shared
  // (base/memory.h) in place with memcpy, so an AllGather into such a buffer costs one copy
  // per hop at memory speed (the shm transport with direct reads, docs/comm.md). Callers
  // that gather into a long-lived host buffer allocate it that way when this is true.
  virtual bool reads_shared_memory() const { return false; }
  // False when every buffer must be device memory (nccl, as NCCL wants): host values (the
  // trainer's scalars) then go through a device buffer (zero/host_collectives.h).
  virtual bool takes_host_buffers() const { return true; }

  // In place: buf holds count elements on entry and the reduction on exit.
  virtual void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  // in: count elements; out: shard_of(count, N, rank()).count elements, either apart from
  // in or exactly in's own chunk (in + shard_of(count, N, rank()).offset elements): an
  // in-place ReduceScatter, which zero2 uses so a staging bucket needs no extra room.
  virtual void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) = 0;
  // shard: this rank's shard_of(count, N, rank()).count elements; out: count elements.
  // shard may alias out + shard offset (in-place AllGather).
  virtual void all_gather(const void* shard, void* out, size_t count, DType dtype) = 0;
  virtual void broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual void barrier() = 0;

  virtual WorkHandle all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op,
                                      OnDone on_done = {}) = 0;
  virtual WorkHandle reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                                          ReduceOp op, OnDone on_done = {}) = 0;
  virtual WorkHandle all_gather_async(const void* shard, void* out, size_t count, DType dtype,
                                      OnDone on_done = {}) = 0;
  virtual WorkHandle broadcast_async(void* buf, size_t count, DType dtype, int root,
                                     OnDone on_done = {}) = 0;

  // Counters since construction or the last reset_stats(); read them when no async
  // collective is in flight (after waiting on its handle).
  virtual const CommStats& stats() const = 0;
  virtual void reset_stats() = 0;

  // The record of this rank's last collectives (comm/debug/flight_recorder.h); every backend
  // keeps one. Null only for a communicator that does not.
  virtual FlightRecorder* flight_recorder() { return nullptr; }
};

}  // namespace rz
