// comm/transport/gather_board.h: a table in memory every rank on the host can see, where
// each rank posts a small input and reads everyone else's: a gather in one step.
//
// Why: from N = 3 the small AllReduce (ring.cpp: a loss, a vote, a few floats) passes every
// rank's input around the ring and adds them up locally. Around the ring that is N-1
// dependent hops, each a wake-up of the next rank; with more ranks than cores each is a
// context switch (4 ranks on 2 cores: 6.2 us, against 5.3 us for OpenMPI's vader with
// recursive doubling's 2 rounds; bench/results/small-allreduce-2026-12-02.md). On a board
// rank r writes its input into its own entry and waits until every other entry holds the
// same collective's: one round, and whoever arrives last has released everybody.
//
// Layout: a header, then 2 x N entries of two cache lines. Entry (p, q) holds rank q's
// input of the board collectives of parity p: a rank's s-th gather (s counted from 0 on
// every rank alike) writes entry (s % 2, r) and publishes it with seq = s + 1. Two
// parities are enough: rank q writes its gather s + 2 into entry (s % 2, q) only after
// finishing gather s + 1, which needs every rank's input of s + 1, which each rank posts
// only after it has read everything of gather s. Every post bumps `arrivals`, the futex
// word a rank that waits long enough sleeps on (comm/transport/wait.h).
//
// Each entry also names the collective its input belongs to (`what`, from the caller), so
// ranks that run different programs fail with an error naming the rank, and carries its
// rank's pid, so a waiting rank notices a peer that died (shm).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "comm/options.h"

namespace rz {

// The most bytes one rank may post in one gather.
constexpr size_t kBoardPayloadBytes = 104;

struct alignas(64) BoardEntry {
  std::atomic<uint32_t> seq;  // s + 1 once the input of gather s is here (0: none yet)
  uint32_t bytes;             // the input's size
  uint64_t what;              // the caller's name for the collective (equal on every rank)
  std::atomic<int32_t> pid;   // the posting rank's process (0: not to be checked)
  uint32_t pad;
  unsigned char payload[kBoardPayloadBytes];
};
static_assert(sizeof(BoardEntry) == 128, "an entry is two cache lines");

struct BoardHeader {
  uint32_t magic;
  uint32_t nranks;
  alignas(64) std::atomic<uint32_t> arrivals;  // bumped after every post: what sleepers sleep on
  alignas(64) std::atomic<uint32_t> sleepers;  // ranks asleep on arrivals
  alignas(64) std::atomic<uint32_t> closed;    // set by a rank that failed; wakes everyone
};

// One rank's handle on a board (which someone else owns, like SlotRing's memory).
class GatherBoard {
 public:
  static constexpr uint32_t kMagic = 0x525a4742u;  // "RZGB"
  static size_t mapping_bytes(int nranks);
  // Writes an empty board for nranks ranks into mem (mapping_bytes() long, zeroed).
  static void format(void* mem, int nranks);

  GatherBoard() = default;
  // Attaches rank `rank` to a formatted mapping of `bytes` bytes, rejecting a bad header;
  // pid != 0 is posted for the others' liveness checks (shm), 0 for ranks that are threads.
  GatherBoard(void* mem, size_t bytes, int rank, int nranks, double timeout_s, int spin_pauses, int pid);

  // A board of process-local memory for ranks that are threads (the thread transport).
  class Heap {
   public:
    explicit Heap(int nranks);
    ~Heap();
    Heap(const Heap&) = delete;
    Heap& operator=(const Heap&) = delete;
    void* memory() const { return mem_; }
    size_t bytes() const { return bytes_; }

   private:
    void* mem_ = nullptr;
    size_t bytes_ = 0;
  };

  bool attached() const { return hdr_ != nullptr; }
  // Posts `bytes` (<= kBoardPayloadBytes) bytes at mine and waits for every rank's input of
  // the same gather, which lands in all (rank q's at q x bytes, this rank's own included).
  // Throws PeerError naming a rank that runs another collective, died, closed the board,
  // or did not arrive within the timeout.
  // left_sent() (optional) says whether a ring message from the left neighbour is waiting:
  // while the board is incomplete that means the left neighbour runs another collective,
  // an error at once rather than a wait until the timeout (every ring collective but a
  // broadcast's non-root ranks sends before it waits).
  void gather(const void* mine, size_t bytes, uint64_t what, void* all, const std::function<bool()>& left_sent = {});
  void close();

 private:
  BoardEntry* entry(uint64_t parity, int q) const;

  BoardHeader* hdr_ = nullptr;
  int rank_ = 0, nranks_ = 0;
  double timeout_s_ = kCommTimeoutDefaultS;
  int spin_pauses_ = 0;
  uint64_t gathers_ = 0;  // this rank's gathers so far
};

}  // namespace rz
