// comm/transport/slot_ring.h: a single-producer single-consumer ring of fixed-size message slots.
//
// One SlotRing is the inbox of one directed ring edge (left -> me). It lives in memory
// both sides can see: a POSIX shared-memory mapping for shm, plain heap memory for the
// thread transport, and the tcp reader thread's private inbox. The sender copies each
// segment once into a free slot and publishes it; the receiver reduces from the slot in
// place and releases it. `head` counts published messages, `tail` consumed ones; slot i
// of message m is m % nslots. Both counters are 32-bit words so a side that has nothing
// to do sleeps on them with a futex (shared, so it works across processes).
//
// Small messages cost the cache lines they touch, not their bytes (an 8-byte AllReduce
// at 2 ranks is one message each way), so a message touches as few as it can: each
// slot's meta is one cache line that carries the message's sequence number, tag, size
// and, up to kInlineBytes, the payload itself. The receiver polls that line (not `head`)
// and reads the payload from it: one line crosses the cores per small message. The sender
// reads `tail` only when its own last reading says the ring is full, and the two
// waiting flags sit on lines of their own, written only around a futex sleep. `head` is
// still stored after every message, for a receiver that sleeps on it.
//
// Waiting (comm/transport/wait.h): spin 64 pause instructions (none when the ranks
// outnumber the cores), then yield the core for up to 2 ms, and only then futex-sleep in
// short slices, checking between slices the closed flag, the deadline and (shm) whether
// the peer process still exists. A receiver whose spin found nothing notes its core in the
// header, so that a sender on the same core can tell (comm/transport/core_spread.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "comm/ring/channel.h"
#include "comm/options.h"

namespace rz {

// Payloads of at most this many bytes travel in the slot's meta line itself.
constexpr size_t kInlineBytes = 40;

struct alignas(64) SlotMeta {
  std::atomic<uint32_t> seq;  // m + 1 once message m is published in this slot (0: none yet)
  uint32_t tag;
  uint64_t bytes;
  uint32_t is_inline;         // 1: the payload is `inline_payload`, not the slot's data
  uint32_t pad;
  unsigned char inline_payload[kInlineBytes];
};
static_assert(sizeof(SlotMeta) == 64, "a slot's meta is one cache line");

struct SlotRingHeader {
  uint32_t magic;
  uint32_t nslots;
  uint64_t slot_bytes;
  alignas(64) std::atomic<uint32_t> head;              // messages published by the sender
  alignas(64) std::atomic<uint32_t> tail;              // messages consumed by the receiver
  alignas(64) std::atomic<uint32_t> sender_waiting;    // 1 while the sender sleeps on tail
  alignas(64) std::atomic<uint32_t> receiver_waiting;  // 1 while the receiver sleeps on head
  // Where the receiver last waited (its spin found nothing): (message it waited for << 32) |
  // (its core + 1); 0 before the first such wait. The sender reads it (core_spread.h).
  alignas(64) std::atomic<uint64_t> receiver_idle;
  alignas(64) std::atomic<uint32_t> closed;            // set by either side; wakes both
  std::atomic<int32_t> sender_pid;
  std::atomic<int32_t> receiver_pid;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// How a waiting side learns about its peer (for errors and liveness).
struct PeerWatch {
  int peer_rank = -1;         // named in errors
  double timeout_s = kCommTimeoutDefaultS;  // bound on one wait
  bool check_pid = false;     // shm: the peer is another process whose pid is in the header
  std::function<bool()> stop; // optional: true aborts the wait quietly (tcp reader shutdown)
  // optional, receive waits only: called with this rank's core when the spin found nothing,
  // after the ring's header has noted it (thread and shm: the CoreSpread of core_spread.h)
  std::function<void(int cpu)> on_idle;
  int spin_pauses = 64;       // pause instructions before the first yield (spin_pauses_for)
};

// The spin for a ring of nranks ranks on this host: 64 pauses while every rank can have a
// core of its own (sched_getaffinity of this process), none when the ranks outnumber the
// cores, where a spinning rank only burns the time slice the rank it waits for needs.
// Measured on the 2-core VM, 8-byte AllReduce: N = 4 10.0 us without the spin vs 17.3
// with it; N = 2 0.41 us with it vs 0.78 without (bench/results/comm-targets-2026-11-30e.md).
int spin_pauses_for(int nranks);

class SlotRing {
 public:
  static constexpr uint32_t kMagic = 0x525a5333u;  // "RZS3": inline payloads, receiver_idle
  static size_t mapping_bytes(uint32_t nslots, size_t slot_bytes);
  // Writes a fresh header into mem (mapping_bytes() long, zeroed).
  static void format(void* mem, uint32_t nslots, size_t slot_bytes);

  SlotRing() = default;
  // Attaches to a formatted mapping of `bytes` bytes; rejects a bad header.
  SlotRing(void* mem, size_t bytes);

  size_t slot_bytes() const { return hdr_->slot_bytes; }
  SlotRingHeader* header() { return hdr_; }

  // Producer side: waits for a free slot, copies, publishes. Returns false if watch.stop fired.
  bool send(const void* src, size_t bytes, MsgTag tag, const PeerWatch& watch);
  // Producer side, zero-copy: waits for a free slot and returns it (nullptr if stopped);
  // publish() makes it visible.
  void* acquire(const PeerWatch& watch);
  void publish(size_t bytes, MsgTag tag);
  // Consumer side: waits for the next message, checks tag and size, consumes in place.
  void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume,
            const PeerWatch& watch);

  // Consumer side: whether a message is waiting (without taking it).
  bool has_message() const;
  // Producer side: the core the receiver noted while waiting for one of the last
  // kRecentMessages messages sent or the next one; -1 when it noted none since.
  static constexpr uint32_t kRecentMessages = 4;
  int receiver_idle_cpu() const;
  // Producer side: waits until the receiver has consumed every published message (the
  // sender of direct references may then change the memory they point to).
  void wait_consumed(const PeerWatch& watch);

  void close();

 private:
  template <typename Ready, typename OnIdle>
  void wait_for(std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiting, const Ready& ready,
                const PeerWatch& watch, bool sending, const OnIdle& on_idle);
  bool wait_free_slot(const PeerWatch& watch);  // false: watch.stop fired
  void publish_meta(size_t bytes, MsgTag tag, bool is_inline);
  SlotMeta* meta() const {
    return reinterpret_cast<SlotMeta*>(reinterpret_cast<char*>(hdr_) + sizeof(SlotRingHeader));
  }
  char* slot(uint32_t i);

  SlotRingHeader* hdr_ = nullptr;
  // The producer's last reading of hdr_->tail. Only the producer side (send, acquire,
  // publish) reads or writes it: the tcp inbox's reader thread, or the one channel that
  // holds this copy of the ring (thread, shm).
  uint32_t producer_tail_ = 0;
};

// A process-local SlotRing (thread transport, tcp reader inbox).
class HeapSlotRing {
 public:
  HeapSlotRing(uint32_t nslots, size_t slot_bytes);
  ~HeapSlotRing();
  HeapSlotRing(const HeapSlotRing&) = delete;
  HeapSlotRing& operator=(const HeapSlotRing&) = delete;
  SlotRing& ring() { return ring_; }
  const SlotRing& ring() const { return ring_; }

 private:
  void* mem_ = nullptr;
  size_t bytes_ = 0;
  SlotRing ring_;
};

}  // namespace rz
