// comm/transport/thread.cpp: the channels of ranks that are threads of one process (tests,
// comm-trace; comm/factory.cpp's make_thread_communicators), and the slot-ring channel that
// thread and shm share (the class is in transports.h).
//
// The thread transport is the shm transport without processes: rank r's inbox is a
// heap SlotRing instead of a shared mapping, the ring code is the same.
#include <vector>

#include "comm/transport/transports.h"

namespace rz {

std::unique_ptr<RingChannel> make_slot_channel(SlotRing to_right, SlotRing from_left, int rank, int nranks,
                                               double timeout_s, bool check_pids, std::shared_ptr<void> keep) {
  return std::make_unique<SlotChannel>(to_right, from_left, rank, nranks, timeout_s, check_pids, std::move(keep));
}

std::vector<std::unique_ptr<RingChannel>> make_thread_channels(int nranks, const CommOptions& opts) {
  // inboxes[r] is the edge (r-1) -> r; all ranks share ownership of all of them.
  auto inboxes = std::make_shared<std::vector<std::unique_ptr<HeapSlotRing>>>();
  for (int r = 0; r < nranks; ++r)
    inboxes->push_back(std::make_unique<HeapSlotRing>(kSlotsPerEdge, slot_bytes_for(opts)));
  std::vector<std::unique_ptr<RingChannel>> channels;
  for (int r = 0; r < nranks; ++r) {
    SlotRing& to_right = (*inboxes)[(r + 1) % nranks]->ring();
    SlotRing& from_left = (*inboxes)[r]->ring();
    channels.push_back(make_slot_channel(to_right, from_left, r, nranks, opts.timeout_s, false, inboxes));
  }
  return channels;
}

}  // namespace rz
