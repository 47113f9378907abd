// comm/transport/slot_ring.cpp: the slot ring's wait, publish and consume paths (see slot_ring.h).
#include "comm/transport/slot_ring.h"

#include <sched.h>

#include <cstring>
#include <new>

#include "base/memory.h"
#include "base/process.h"
#include "comm/transport/wait.h"

namespace rz {
namespace {

constexpr size_t kAlign = 64;
size_t round_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

size_t SlotRing::mapping_bytes(uint32_t nslots, size_t slot_bytes) {
  return round_up(sizeof(SlotRingHeader) + nslots * sizeof(SlotMeta)) + nslots * round_up(slot_bytes);
}

void SlotRing::format(void* mem, uint32_t nslots, size_t slot_bytes) {
  auto* h = new (mem) SlotRingHeader{};
  h->nslots = nslots;
  h->slot_bytes = slot_bytes;
  auto* metas = reinterpret_cast<SlotMeta*>(static_cast<char*>(mem) + sizeof(SlotRingHeader));
  for (uint32_t i = 0; i < nslots; ++i) new (metas + i) SlotMeta{};
  h->magic = kMagic;
}

SlotRing::SlotRing(void* mem, size_t bytes) : hdr_(static_cast<SlotRingHeader*>(mem)) {
  RZ_CHECK(bytes >= sizeof(SlotRingHeader) && hdr_->magic == kMagic,
           "slot ring: mapping of %zu bytes has no valid header (magic %08x)", bytes,
           bytes >= sizeof(SlotRingHeader) ? hdr_->magic : 0u);
  RZ_CHECK(hdr_->nslots >= 1 && hdr_->nslots <= 1024 && mapping_bytes(hdr_->nslots, hdr_->slot_bytes) <= bytes,
           "slot ring: header says %u slots of %llu bytes, which does not fit the %zu-byte mapping",
           hdr_->nslots, static_cast<unsigned long long>(hdr_->slot_bytes), bytes);
}

char* SlotRing::slot(uint32_t i) {
  char* base = reinterpret_cast<char*>(hdr_) + round_up(sizeof(SlotRingHeader) + hdr_->nslots * sizeof(SlotMeta));
  return base + static_cast<size_t>(i % hdr_->nslots) * round_up(hdr_->slot_bytes);
}

int spin_pauses_for(int nranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return nranks <= cores ? 64 : 0;
}

template <typename Ready, typename OnIdle>
void SlotRing::wait_for(std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiting, const Ready& ready,
                        const PeerWatch& watch, bool sending, const OnIdle& on_idle) {
  double next_pid_check_s = 0.05;
  auto check = [&](double waited_s) {
    if (watch.stop && watch.stop()) return false;
    if (hdr_->closed.load() != 0)
      throw PeerError(watch.peer_rank, strfmt("peer rank %d closed the channel", watch.peer_rank));
    if (waited_s >= watch.timeout_s)
      throw PeerError(watch.peer_rank,
                      strfmt("timed out after %.0f s waiting for rank %d to %s (raise --comm-timeout or "
                             "RINGZERO_COMM_TIMEOUT if that rank is just slow)",
                             watch.timeout_s, watch.peer_rank, sending ? "take data" : "send data"));
    if (watch.check_pid && waited_s >= next_pid_check_s) {
      const int pid = sending ? hdr_->receiver_pid.load() : hdr_->sender_pid.load();
      if (process_gone(pid))
        throw PeerError(watch.peer_rank,
                        strfmt("peer rank %d closed the channel (its process %d died)", watch.peer_rank, pid));
      next_pid_check_s = waited_s + 0.05;
    }
    return true;
  };
  wait_on_word(word, waiting, watch.spin_pauses, ready, check, on_idle);
}

// Producer side: true once the slot of message `head` is free (the receiver has consumed
// message head - nslots), false if watch.stop fired first. tail is read only when the
// last reading of it says the ring is full.
bool SlotRing::wait_free_slot(const PeerWatch& watch) {
  const uint32_t h = hdr_->head.load(std::memory_order_relaxed);
  auto free_slot = [&] { return h - producer_tail_ < hdr_->nslots; };
  if (free_slot()) return true;
  auto read_tail = [&] {
    producer_tail_ = hdr_->tail.load(std::memory_order_acquire);
    return free_slot();
  };
  wait_for(hdr_->tail, hdr_->sender_waiting, read_tail, watch, true, [] {});
  return read_tail();
}

void* SlotRing::acquire(const PeerWatch& watch) {
  if (!wait_free_slot(watch)) return nullptr;  // stopped
  return slot(hdr_->head.load(std::memory_order_relaxed));
}

// The message's fields, then its sequence number (release: the receiver that sees it sees
// the payload), then head for a receiver asleep on it.
void SlotRing::publish_meta(size_t bytes, MsgTag tag, bool is_inline) {
  const uint32_t h = hdr_->head.load(std::memory_order_relaxed);
  SlotMeta& m = meta()[h % hdr_->nslots];
  m.tag = static_cast<uint32_t>(tag);
  m.bytes = bytes;
  m.is_inline = is_inline ? 1 : 0;
  m.seq.store(h + 1, std::memory_order_release);
  hdr_->head.store(h + 1, std::memory_order_seq_cst);
  if (hdr_->receiver_waiting.load(std::memory_order_seq_cst) != 0) futex_wake(&hdr_->head);
}

void SlotRing::publish(size_t bytes, MsgTag tag) { publish_meta(bytes, tag, false); }

bool SlotRing::send(const void* src, size_t bytes, MsgTag tag, const PeerWatch& watch) {
  RZ_CHECK(bytes <= hdr_->slot_bytes, "slot ring: a %zu-byte message exceeds the %llu-byte slot", bytes,
           static_cast<unsigned long long>(hdr_->slot_bytes));
  if (!wait_free_slot(watch)) return false;
  const uint32_t h = hdr_->head.load(std::memory_order_relaxed);
  const bool is_inline = bytes <= kInlineBytes;
  void* dst = is_inline ? static_cast<void*>(meta()[h % hdr_->nslots].inline_payload) : slot(h);
  if (bytes > 0) std::memcpy(dst, src, bytes);
  publish_meta(bytes, tag, is_inline);
  return true;
}

void SlotRing::recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume,
                    const PeerWatch& watch) {
  const uint32_t t = hdr_->tail.load(std::memory_order_relaxed);
  SlotMeta& m = meta()[t % hdr_->nslots];
  auto on_idle = [&] {
    if (!watch.on_idle) return;
    const int cpu = sched_getcpu();
    hdr_->receiver_idle.store((static_cast<uint64_t>(t) << 32) | static_cast<uint32_t>(cpu + 1),
                              std::memory_order_relaxed);
    watch.on_idle(cpu);
  };
  wait_for(hdr_->head, hdr_->receiver_waiting, [&] { return m.seq.load(std::memory_order_acquire) == t + 1; },
           watch, false, on_idle);
  if (m.tag != static_cast<uint32_t>(tag) || m.bytes != bytes) {
    static const char* names[] = {"?", "data", "debug fingerprint", "barrier", "direct reference"};
    auto name = [&](uint32_t x) { return x < 5 ? names[x] : names[0]; };
    throw PeerError(watch.peer_rank,
                    strfmt("rank %d sent a %llu-byte %s message where a %zu-byte %s message was expected: "
                           "the ranks are not running the same collective (--comm-debug, or RINGZERO_COMM_DEBUG=1, on every "
                           "rank finds the first disagreement)",
                           watch.peer_rank, static_cast<unsigned long long>(m.bytes), name(m.tag), bytes,
                           name(static_cast<uint32_t>(tag))));
  }
  consume(m.is_inline != 0 ? static_cast<const void*>(m.inline_payload) : slot(t));
  hdr_->tail.store(t + 1, std::memory_order_seq_cst);
  if (hdr_->sender_waiting.load(std::memory_order_seq_cst) != 0) futex_wake(&hdr_->tail);
}

bool SlotRing::has_message() const {
  const uint32_t t = hdr_->tail.load(std::memory_order_relaxed);
  return meta()[t % hdr_->nslots].seq.load(std::memory_order_acquire) == t + 1;
}

int SlotRing::receiver_idle_cpu() const {
  const uint64_t v = hdr_->receiver_idle.load(std::memory_order_relaxed);
  const uint32_t waited_for = static_cast<uint32_t>(v >> 32), core = static_cast<uint32_t>(v);
  const uint32_t h = hdr_->head.load(std::memory_order_relaxed);
  // It waited for one of the last few messages sent, or the next: recent (a 2-rank small
  // AllReduce sends two messages each way, and a receiver on another core finds most without
  // waiting). Older notes say where it was, not where it is.
  return core != 0 && h - waited_for <= kRecentMessages ? static_cast<int>(core) - 1 : -1;
}

void SlotRing::wait_consumed(const PeerWatch& watch) {
  const uint32_t h = hdr_->head.load(std::memory_order_relaxed);
  wait_for(hdr_->tail, hdr_->sender_waiting, [&] { return hdr_->tail.load(std::memory_order_acquire) == h; }, watch,
           true, [] {});
}

void SlotRing::close() {
  if (hdr_ == nullptr) return;
  hdr_->closed.store(1);
  futex_wake(&hdr_->head);
  futex_wake(&hdr_->tail);
}

HeapSlotRing::HeapSlotRing(uint32_t nslots, size_t slot_bytes) {
  bytes_ = SlotRing::mapping_bytes(nslots, slot_bytes);
  mem_ = tracked_alloc(MemTag::comm, bytes_);
  SlotRing::format(mem_, nslots, slot_bytes);
  ring_ = SlotRing(mem_, bytes_);
}

HeapSlotRing::~HeapSlotRing() { tracked_free(MemTag::comm, mem_, bytes_); }

}  // namespace rz
