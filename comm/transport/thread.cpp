// comm/transport/thread.cpp: ranks as threads of one process (tests, comm-trace), and the
// slot-ring channel that thread and shm share (the class is in transports.h).
//
// The thread transport is the shm transport without processes: rank r's inbox is a
// heap SlotRing instead of a shared mapping, the ring code is the same.
#include <vector>

#include "comm/factory.h"
#include "comm/ring/ring_communicator.h"
#include "comm/transport/transports.h"

namespace rz {

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
