// comm/ring_communicator.h: the Communicator every transport shares.
//
// A RingCommunicator owns one RingChannel (its transport) and runs the ring algorithms of
// ring.cpp over it. It adds what communicator.h promises on top of the algorithm:
//   - issue order: async collectives queue for this rank's comm thread (started on first
//     use); a blocking call waits for the queue to drain, then runs on the caller's thread
//     (no thread hand-off on the latency path);
//   - errors: a PeerError becomes "rank R: <collective> #seq: <what>", the channel is
//     closed so the neighbours fail at once too, and every later call repeats the error;
//   - RINGZERO_COMM_DEBUG: a fingerprint check with the neighbours before each collective;
//   - CommStats: calls, payload bytes and wall time per collective kind;
//   - the flight recorder (comm/debug/flight_recorder.h): issue, start, the ring's rounds, done
//     or failed, for every collective.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "base/memory.h"
#include "comm/ring/channel.h"
#include "comm/ring/comm_thread.h"
#include "comm/communicator.h"
#include "comm/transport/device_ring.h"
#include "comm/options.h"
#include "comm/debug/flight_recorder.h"
#include "comm/ring/ring.h"

namespace rz {

class RingCommunicator final : public Communicator {
 public:
  // channel may be null only for nranks == 1.
  RingCommunicator(int rank, int nranks, std::string transport, std::unique_ptr<RingChannel> channel,
                   const CommOptions& opts);
  ~RingCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return nranks_; }
  std::string transport_name() const override { return transport_; }
  bool reads_shared_memory() const override {
    const RingChannel* ch = host_channel_ != nullptr ? host_channel_ : channel_.get();
    return ch != nullptr && ch->direct_reads() && ch->reads_shared_memory();
  }

  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* shard, void* out, size_t count, DType dtype) override;
  void broadcast(void* buf, size_t count, DType dtype, int root) override;
  void barrier() override;

  WorkHandle all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op, OnDone on_done) override;
  WorkHandle reduce_scatter_async(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                  OnDone on_done) override;
  WorkHandle all_gather_async(const void* shard, void* out, size_t count, DType dtype, OnDone on_done) override;
  WorkHandle broadcast_async(void* buf, size_t count, DType dtype, int root, OnDone on_done) override;

  const CommStats& stats() const override { return stats_; }
  void reset_stats() override { stats_.reset(); }
  FlightRecorder* flight_recorder() override { return &flight_; }

  // comm-trace watches every round; set it before the first collective.
  void set_observer(RingObserver* observer) { observer_ = observer; }
  // The cuda transport: buffers are on this link's GPU; collectives follow the input stream
  // and end with the comm stream finished (device_ring.h). Set it before the first collective.
  // Collectives on host buffers then run on the channel's host control channel.
  void set_device(std::shared_ptr<DeviceLink> link) {
    device_ = std::move(link);
    host_channel_ = control_channel_of(channel_.get());
  }
  // Keeps an object alive as long as this communicator (rank 0's rendezvous store).
  void keep_alive(std::shared_ptr<void> p) { keep_alive_.push_back(std::move(p)); }
  double timeout_s() const { return opts_.timeout_s; }

 private:
  using Body = std::function<void(RingContext&)>;
  struct Task;
  void execute(CollectiveKind kind, uint64_t seq, Fingerprint fp, const Body& body,
               const std::shared_ptr<void>& input_mark, bool host_path);
  // With a device link: true when every non-empty buffer is host memory (the collective
  // runs on the host channel), false when all are GPU memory; a mix is an error.
  bool host_buffers(const char* op, std::initializer_list<std::pair<const void*, size_t>> bufs) const;
  void run_blocking(CollectiveKind kind, const Fingerprint& fp, Body body, bool host_path = false);
  WorkHandle enqueue(CollectiveKind kind, const Fingerprint& fp, Body body, OnDone on_done, bool host_path = false);
  // One span on this rank's comm track of the trace (base/trace.h) when a window is open.
  void trace_collective(CollectiveKind kind, const Fingerprint& fp, uint64_t seq, uint64_t bytes_sent,
                        std::chrono::steady_clock::time_point t0) const;

  int rank_, nranks_;
  std::string transport_;
  std::unique_ptr<RingChannel> channel_;
  CommOptions opts_;
  RingObserver* observer_ = nullptr;
  std::shared_ptr<DeviceLink> device_;  // the cuda transport; null for host buffers
  RingChannel* host_channel_ = nullptr; // the cuda transport's control channel (host buffers)
  Buffer<unsigned char> work_;
  CommStats stats_;
  FlightRecorder flight_;  // also numbers the collectives (issue order)
  std::string broken_;  // the first communication error; the communicator is unusable after it
  std::vector<std::shared_ptr<void>> keep_alive_;

  CommThread comm_thread_;  // stopped first in the destructor, while what its jobs use lives
};

// The options after the environment: RINGZERO_COMM_TIMEOUT replaces the default timeout,
// RINGZERO_COMM_DEBUG=1 turns debug on. Bad values are errors naming the variable.
CommOptions resolve_comm_options(const CommOptions& opts);

}  // namespace rz
