// comm/transport_thread.cpp: ranks as threads of one process (tests, comm-trace), and the
// slot-ring channel that thread and shm share.
//
// The thread transport is the shm transport without processes: rank r's inbox is a
// heap SlotRing instead of a shared mapping, the ring code is the same.
#include <vector>

#include "comm/ring_communicator.h"
#include "comm/transports.h"

namespace rz {
namespace {

class SlotChannel final : public RingChannel {
 public:
  SlotChannel(SlotRing to_right, SlotRing from_left, int rank, int nranks, double timeout_s, bool check_pids,
              std::shared_ptr<void> keep)
      : to_right_(to_right), from_left_(from_left), keep_(std::move(keep)) {
    right_.peer_rank = (rank + 1) % nranks;
    left_.peer_rank = (rank - 1 + nranks) % nranks;
    right_.timeout_s = left_.timeout_s = timeout_s;
    right_.check_pid = left_.check_pid = check_pids;
  }
  ~SlotChannel() override { close(); }
  void send(const void* src, size_t bytes, MsgTag tag) override { to_right_.send(src, bytes, tag, right_); }
  void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume) override {
    from_left_.recv(bytes, tag, consume, left_);
  }
  size_t max_message_bytes() const override { return to_right_.slot_bytes(); }
  void close() override {
    to_right_.close();
    from_left_.close();
  }

 private:
  SlotRing to_right_, from_left_;
  PeerWatch right_, left_;
  std::shared_ptr<void> keep_;
};

}  // namespace

std::unique_ptr<RingChannel> make_slot_channel(SlotRing to_right, SlotRing from_left, int rank, int nranks,
                                               double timeout_s, bool check_pids, std::shared_ptr<void> keep) {
  return std::make_unique<SlotChannel>(to_right, from_left, rank, nranks, timeout_s, check_pids, std::move(keep));
}

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int nranks, const CommOptions& options) {
  RZ_CHECK(nranks >= 1 && nranks <= 4096, "thread communicators: expected 1..4096 ranks, found %d", nranks);
  CommOptions opts = resolve_comm_options(options);
  std::vector<std::unique_ptr<Communicator>> comms;
  if (nranks == 1) {
    comms.push_back(std::make_unique<RingCommunicator>(0, 1, "thread", nullptr, opts));
    return comms;
  }
  // inboxes[r] is the edge (r-1) -> r; all ranks share ownership of all of them.
  auto inboxes = std::make_shared<std::vector<std::unique_ptr<HeapSlotRing>>>();
  for (int r = 0; r < nranks; ++r)
    inboxes->push_back(std::make_unique<HeapSlotRing>(kSlotsPerEdge, slot_bytes_for(opts)));
  for (int r = 0; r < nranks; ++r) {
    SlotRing& to_right = (*inboxes)[(r + 1) % nranks]->ring();
    SlotRing& from_left = (*inboxes)[r]->ring();
    auto ch = make_slot_channel(to_right, from_left, r, nranks, opts.timeout_s, false, inboxes);
    comms.push_back(std::make_unique<RingCommunicator>(r, nranks, "thread", std::move(ch), opts));
  }
  return comms;
}

}  // namespace rz
