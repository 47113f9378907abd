// comm/transport/thread.cpp: the channels of ranks that are threads of one process (tests,
// comm-trace; comm/factory.cpp's make_thread_communicators).
//
// The thread transport is the shm transport without processes: rank r's inbox is a
// heap SlotRing instead of a shared mapping and the gather board is heap memory too; the
// ring code is the same.
#include <vector>

#include "comm/transport/transports.h"

namespace rz {

std::unique_ptr<RingChannel> make_slot_channel(SlotRing to_right, SlotRing from_left, int rank, int nranks,
                                               double timeout_s, bool check_pids, std::shared_ptr<void> keep) {
  return std::make_unique<SlotChannel>(to_right, from_left, GatherBoard{}, rank, nranks, timeout_s, check_pids,
                                       std::move(keep));
}

std::vector<std::unique_ptr<RingChannel>> make_thread_channels(int nranks, const CommOptions& opts) {
  // inboxes[r] is the edge (r-1) -> r; all ranks share ownership of all of them and the board.
  struct Memory {
    std::vector<std::unique_ptr<HeapSlotRing>> inboxes;
    std::unique_ptr<GatherBoard::Heap> board;
  };
  auto mem = std::make_shared<Memory>();
  for (int r = 0; r < nranks; ++r)
    mem->inboxes.push_back(std::make_unique<HeapSlotRing>(kSlotsPerEdge, slot_bytes_for(opts)));
  if (nranks >= kBoardMinRanks) mem->board = std::make_unique<GatherBoard::Heap>(nranks);
  std::vector<std::unique_ptr<RingChannel>> channels;
  for (int r = 0; r < nranks; ++r) {
    SlotRing& to_right = mem->inboxes[(r + 1) % nranks]->ring();
    SlotRing& from_left = mem->inboxes[r]->ring();
    GatherBoard board;
    if (mem->board)
      board = GatherBoard(mem->board->memory(), mem->board->bytes(), r, nranks, opts.timeout_s,
                          spin_pauses_for(nranks), 0);
    channels.push_back(
        std::make_unique<SlotChannel>(to_right, from_left, board, r, nranks, opts.timeout_s, false, mem));
  }
  return channels;
}

}  // namespace rz
