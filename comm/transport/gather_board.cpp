// comm/transport/gather_board.cpp: posting to and waiting on the gather board (gather_board.h).
#include "comm/transport/gather_board.h"

#include <cstring>
#include <new>

#include "base/check.h"
#include "base/memory.h"
#include "base/process.h"
#include "comm/communicator.h"  // PeerError
#include "comm/transport/wait.h"

namespace rz {
namespace {

constexpr size_t kHeaderBytes = (sizeof(BoardHeader) + 63) / 64 * 64;

}  // namespace

size_t GatherBoard::mapping_bytes(int nranks) {
  return kHeaderBytes + 2 * static_cast<size_t>(nranks) * sizeof(BoardEntry);
}

void GatherBoard::format(void* mem, int nranks) {
  auto* h = new (mem) BoardHeader{};
  h->nranks = static_cast<uint32_t>(nranks);
  auto* entries = reinterpret_cast<BoardEntry*>(static_cast<char*>(mem) + kHeaderBytes);
  for (int i = 0; i < 2 * nranks; ++i) new (entries + i) BoardEntry{};
  h->magic = kMagic;
}

GatherBoard::GatherBoard(void* mem, size_t bytes, int rank, int nranks, double timeout_s, int spin_pauses, int pid)
    : hdr_(static_cast<BoardHeader*>(mem)), rank_(rank), nranks_(nranks), timeout_s_(timeout_s),
      spin_pauses_(spin_pauses) {
  RZ_CHECK(bytes >= sizeof(BoardHeader) && hdr_->magic == kMagic && hdr_->nranks == static_cast<uint32_t>(nranks) &&
               bytes >= mapping_bytes(nranks),
           "gather board: a mapping of %zu bytes is not a board for %d ranks", bytes, nranks);
  RZ_CHECK(rank >= 0 && rank < nranks, "gather board: rank %d of %d", rank, nranks);
  entry(0, rank)->pid.store(pid);
  entry(1, rank)->pid.store(pid);
}

BoardEntry* GatherBoard::entry(uint64_t parity, int q) const {
  auto* entries = reinterpret_cast<BoardEntry*>(reinterpret_cast<char*>(hdr_) + kHeaderBytes);
  return entries + parity * static_cast<uint64_t>(nranks_) + static_cast<uint64_t>(q);
}

void GatherBoard::gather(const void* mine, size_t bytes, uint64_t what, void* all,
                         const std::function<bool()>& left_sent) {
  RZ_CHECK(bytes <= kBoardPayloadBytes, "gather board: %zu bytes do not fit an entry (%zu)", bytes,
           kBoardPayloadBytes);
  const uint64_t parity = gathers_ & 1;
  const uint32_t want = static_cast<uint32_t>(gathers_ + 1);  // compared for equality only: wrapping is harmless
  ++gathers_;
  BoardEntry* own = entry(parity, rank_);
  own->bytes = static_cast<uint32_t>(bytes);
  own->what = what;
  std::memcpy(own->payload, mine, bytes);
  own->seq.store(want, std::memory_order_release);
  hdr_->arrivals.fetch_add(1, std::memory_order_seq_cst);
  if (hdr_->sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(&hdr_->arrivals);
  char* out = static_cast<char*>(all);
  std::memcpy(out + static_cast<size_t>(rank_) * bytes, mine, bytes);

  // The others in ring order from the right neighbour on; `next` is the first not yet seen.
  int next = 1;
  auto peer = [&](int k) { return (rank_ + k) % nranks_; };
  auto ready = [&] {
    while (next < nranks_ && entry(parity, peer(next))->seq.load(std::memory_order_acquire) == want) ++next;
    return next == nranks_;
  };
  double next_pid_check_s = 0.05;
  auto check = [&](double waited_s) {
    const int q = peer(next);
    if (hdr_->closed.load() != 0)
      throw PeerError(q, strfmt("a rank closed the gather board (it failed) while rank %d had not posted its input",
                                q));
    if (left_sent && left_sent() && !ready()) {
      // A message of the left neighbour's next collective would mean it has seen every
      // input of this gather, and then so does this rank (ready() again, after it).
      const int left = (rank_ + nranks_ - 1) % nranks_;
      throw PeerError(left, strfmt("rank %d sent a ring message while this rank waits on the gather board of a "
                                   "small all_reduce: the ranks are not running the same collective "
                                   "(--comm-debug, or RINGZERO_COMM_DEBUG=1, on every rank finds the first "
                                   "disagreement)",
                                   left));
    }
    if (waited_s >= timeout_s_)
      throw PeerError(q, strfmt("timed out after %.0f s waiting for rank %d to post its input to the gather board "
                                "(raise --comm-timeout or RINGZERO_COMM_TIMEOUT if that rank is just slow)",
                                timeout_s_, q));
    if (waited_s >= next_pid_check_s) {
      const int pid = entry(parity, q)->pid.load();
      if (pid != 0 && process_gone(pid))
        throw PeerError(q, strfmt("peer rank %d closed the channel (its process %d died)", q, pid));
      next_pid_check_s = waited_s + 0.05;
    }
    return true;
  };
  wait_on_word(hdr_->arrivals, hdr_->sleepers, spin_pauses_, ready, check);

  for (int k = 1; k < nranks_; ++k) {
    const int q = peer(k);
    const BoardEntry* e = entry(parity, q);
    if (e->bytes != bytes || e->what != what)
      throw PeerError(q, strfmt("rank %d posted a %u-byte input of another collective where a %zu-byte one was "
                                "expected: the ranks are not running the same collective (--comm-debug, or "
                                "RINGZERO_COMM_DEBUG=1, on every rank finds the first disagreement)",
                                q, e->bytes, bytes));
    std::memcpy(out + static_cast<size_t>(q) * bytes, e->payload, bytes);
  }
}

GatherBoard::Heap::Heap(int nranks) : bytes_(mapping_bytes(nranks)) {
  mem_ = tracked_alloc(MemTag::comm, bytes_);
  std::memset(mem_, 0, bytes_);
  format(mem_, nranks);
}

GatherBoard::Heap::~Heap() { tracked_free(MemTag::comm, mem_, bytes_); }

void GatherBoard::close() {
  if (hdr_ == nullptr) return;
  hdr_->closed.store(1);
  futex_wake(&hdr_->arrivals);
}

}  // namespace rz
