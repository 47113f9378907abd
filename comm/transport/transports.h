// comm/transport/transports.h: how each transport builds a rank's RingChannel (internal to comm/).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/ring/channel.h"
#include "comm/options.h"
#include "comm/rank_env.h"
#include "comm/transport/core_spread.h"
#include "comm/transport/gather_board.h"
#include "comm/transport/slot_ring.h"
#include "comm/rendezvous/store.h"

namespace rz {

// Slots per ring edge: enough that a sender runs a few segments ahead of its receiver.
constexpr uint32_t kSlotsPerEdge = 4;
// A slot holds one segment, and at least a fingerprint message.
inline size_t slot_bytes_for(const CommOptions& opts) { return opts.segment_bytes < 64 ? 64 : opts.segment_bytes; }

// thread and shm: send into the right neighbour's inbox, receive from this rank's inbox;
// from N = 3 small gathers on a board all ranks share (gather_board.h; unattached: none).
// keep holds whatever owns the rings' and the board's memory (heap rings, shm mappings).
// The shm transport extends it with direct reads (comm/transport/shm.cpp).
class SlotChannel : public RingChannel {
 public:
  SlotChannel(SlotRing to_right, SlotRing from_left, GatherBoard board, int rank, int nranks, double timeout_s,
              bool check_pids, std::shared_ptr<void> keep)
      : to_right_(to_right), from_left_(from_left), board_(board), keep_(std::move(keep)) {
    right_.peer_rank = (rank + 1) % nranks;
    left_.peer_rank = (rank - 1 + nranks) % nranks;
    right_.timeout_s = left_.timeout_s = timeout_s;
    right_.check_pid = left_.check_pid = check_pids;
    right_.spin_pauses = left_.spin_pauses = spin_pauses_for(nranks);
    // Ranks that could each have a core note where they wait, and one found sharing its right
    // neighbour's moves. Each pair is watched by its left rank; at N = 2 both are each
    // other's left, so rank 0 only.
    if (left_.spin_pauses > 0 && core_spread_allowed()) {
      const bool watches = nranks > 2 || rank == 0;
      left_.on_idle = [this, watches](int cpu) {
        if (watches) spread_.on_idle(cpu, to_right_.receiver_idle_cpu());
      };
    }
  }
  SlotChannel(const SlotChannel&) = delete;
  SlotChannel& operator=(const SlotChannel&) = delete;
  ~SlotChannel() override { close(); }
  void send(const void* src, size_t bytes, MsgTag tag) override { to_right_.send(src, bytes, tag, right_); }
  void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume) override {
    from_left_.recv(bytes, tag, consume, left_);
  }
  size_t max_message_bytes() const override { return to_right_.slot_bytes(); }
  void close() override {
    to_right_.close();
    from_left_.close();
    board_.close();
  }
  bool gathers_small(size_t bytes) const override { return board_.attached() && bytes <= kBoardPayloadBytes; }
  void gather_small(const void* mine, size_t bytes, uint64_t what, void* all) override {
    board_.gather(mine, bytes, what, all, [this] { return from_left_.has_message(); });
  }

 protected:
  SlotRing to_right_, from_left_;
  GatherBoard board_;
  PeerWatch right_, left_;
  CoreSpread spread_;  // the receiving thread's (left_.on_idle)
  std::shared_ptr<void> keep_;
};

// A slot channel without a gather board (the control and staging channels of the cuda and
// simulated transports, and tests).
std::unique_ptr<RingChannel> make_slot_channel(SlotRing to_right, SlotRing from_left, int rank, int nranks,
                                               double timeout_s, bool check_pids, std::shared_ptr<void> keep);

// Ranks from which the slot transports share a gather board: at N = 2 the one ring hop is
// already a single step each way.
constexpr int kBoardMinRanks = 3;

// thread: ranks that are threads of one process; element r is rank r's channel (nranks >= 2),
// every inbox a heap SlotRing owned by all of them together.
std::vector<std::unique_ptr<RingChannel>> make_thread_channels(int nranks, const CommOptions& opts);

// shm: every rank creates its own inbox in /dev/shm, publishes its name in the store, maps
// the right neighbour's inbox, and unlinks its own once everyone has mapped.
std::unique_ptr<RingChannel> connect_shm_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store);
// RINGZERO_SHM_CMA: false when it is 0 (direct reads off), an error naming it when it is not
// 0 or 1. The factory asks before the rendezvous, so that with a bad value every rank stops
// on its own error rather than some on the store of a rank 0 that stopped first.
bool shm_cma_allowed();

// tcp: every rank listens, publishes host:port in the store, connects to its right
// neighbour and accepts its left one; both prove the job token (comm/rendezvous/job_auth.h).
std::unique_ptr<RingChannel> connect_tcp_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store);

}  // namespace rz
