// comm/transport/shm.cpp: ranks as processes on one host, over POSIX shared memory.
//
// Each rank's inbox (the edge left -> me) is a SlotRing in its own /dev/shm object. The
// left neighbour maps it and copies each segment once into a slot; this rank reduces
// from the slot in place (slot_ring.h). Both sides write their pid into the header so a
// waiting side notices a peer that died without closing (kill -9) within ~50 ms.
// Names are published through the rendezvous store and unlinked as soon as both sides
// have mapped them, so a crashed job leaves nothing behind in /dev/shm. Until then a
// name sits in a table that a SIGINT/SIGTERM handler (base/stop_signal.h) unlinks.
// Names are "/ringzero-<pid>-r<rank>-<random>": nothing of the secret job token.
// The segment's pages are reserved up front (posix_fallocate): a /dev/shm too small for
// them is an error naming its size here, not a SIGBUS in the middle of a collective.
//
// Direct reads (channel.h): where the kernel lets a rank read its left neighbour's memory
// (the ptrace-style right that cross-memory attach needs), the ring sends AllGather chunks
// as references and the receiver copies them once, straight out of the sender's buffer:
// with memcpy from a cached read-only mapping when the buffer is registered (a memfd of
// its own, base/shared_memory.h, opened through /proc/<pid>/fd/<fd>), with
// process_vm_readv ("CMA", what OpenMPI's vader uses) otherwise. Each rank probes that at
// connect time by reading a known word from its left neighbour; the ring uses direct reads
// only when every rank's probe succeeded (the whole ring agrees through the store),
// otherwise rank 0 says once why (Yama ptrace_scope, a seccomp filter, different users)
// and every chunk goes through the slots as before. Under Yama ptrace_scope 1 each rank
// first names its right neighbour as its one permitted reader (prctl PR_SET_PTRACER). A
// rank that cannot map a registered buffer says so once and reads it with CMA instead.
// RINGZERO_SHM_CMA=0 turns direct reads off.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <string>
#include <vector>

#include "base/shared_memory.h"
#include "base/stop_signal.h"
#include "comm/rendezvous/job_auth.h"
#include "comm/ring/ring.h"
#include "comm/ring/bulk_copy.h"
#include "comm/transport/transports.h"

namespace rz {
namespace {

// Names this process has created and not yet unlinked; read by the signal handler.
constexpr int kMaxLinked = 4;
char g_linked[kMaxLinked][64];
std::atomic<bool> g_linked_used[kMaxLinked];

void unlink_linked_segments() {  // async-signal-safe
  for (int i = 0; i < kMaxLinked; ++i)
    if (g_linked_used[i].load()) shm_unlink(g_linked[i]);
}

int remember_linked(const std::string& name) {
  static std::atomic<bool> registered{false};
  if (!registered.exchange(true)) register_stop_cleanup(unlink_linked_segments);
  for (int i = 0; i < kMaxLinked; ++i)
    if (!g_linked_used[i].load()) {
      std::snprintf(g_linked[i], sizeof g_linked[i], "%s", name.c_str());
      g_linked_used[i].store(true);
      return i;
    }
  return -1;
}

void forget_linked(int slot) {
  if (slot >= 0) g_linked_used[slot].store(false);
}

struct ShmMapping {
  void* addr = MAP_FAILED;
  size_t bytes = 0;
  std::string name;  // still linked while non-empty
  int slot = -1;     // its entry in g_linked
  void unlink() {
    if (!name.empty()) shm_unlink(name.c_str());
    forget_linked(slot);
    name.clear();
    slot = -1;
  }
  ~ShmMapping() {
    if (addr != MAP_FAILED) munmap(addr, bytes);
    unlink();
  }
};

std::string dev_shm_size() {
  struct statvfs v {};
  if (statvfs("/dev/shm", &v) != 0) return "unknown size";
  const double mib = 1.0 / (1024.0 * 1024.0);
  return strfmt("%.0f MiB, %.0f MiB free", static_cast<double>(v.f_blocks) * v.f_frsize * mib,
                static_cast<double>(v.f_bavail) * v.f_frsize * mib);
}

struct ShmPair {
  ShmMapping inbox, right_inbox, board;
};

// Creates the shared-memory object `name` of `bytes` bytes, its pages reserved, and maps it
// into m (what: "inbox" or "gather board", for errors). The name stays linked (and in the
// signal handler's table) until m.unlink().
void create_segment(ShmMapping& m, const std::string& name, size_t bytes, int r, const char* what) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  RZ_SYSCHECK(fd, "shm transport, rank %d: shm_open(%s) for its %s", r, name.c_str(), what);
  m.name = name;
  m.slot = remember_linked(name);
  int trc = ftruncate(fd, static_cast<off_t>(bytes));
  if (trc < 0) ::close(fd);
  RZ_SYSCHECK(trc, "shm transport, rank %d: ftruncate %s to %zu bytes (is /dev/shm full?)", r, name.c_str(), bytes);
  // posix_fallocate returns the error instead of setting errno.
  const int arc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (arc != 0) {
    ::close(fd);
    RZ_FAIL("shm transport, rank %d: cannot reserve %zu bytes in /dev/shm (%s; %s): make /dev/shm larger "
            "(docker run --shm-size=1g) or use --transport tcp",
            r, bytes, std::strerror(arc), dev_shm_size().c_str());
  }
  m.addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  RZ_CHECK(m.addr != MAP_FAILED, "shm transport, rank %d: mmap %s: %s", r, name.c_str(), errno_string().c_str());
  m.bytes = bytes;
}

// Maps rank `owner`'s shared-memory object `name`, which must be `bytes` bytes long.
void open_segment(ShmMapping& m, const std::string& name, size_t bytes, int r, int owner, const char* what) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  RZ_SYSCHECK(fd, "shm transport, rank %d: cannot open rank %d's %s %s", r, owner, what, name.c_str());
  struct stat st {};
  fstat(fd, &st);
  if (static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    RZ_FAIL("shm transport, rank %d: rank %d's %s %s is %lld bytes, expected %zu (different --segment-bytes or "
            "--nproc?)",
            r, owner, what, name.c_str(), static_cast<long long>(st.st_size), bytes);
  }
  m.addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  RZ_CHECK(m.addr != MAP_FAILED, "shm transport, rank %d: mmap %s: %s", r, name.c_str(), errno_string().c_str());
  m.bytes = bytes;
}

// Copies bytes bytes at addr in process pid (the left neighbour) into dst.
void cma_read(int pid, int peer_rank, void* dst, uint64_t addr, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(addr + done)), bytes - done};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      if (err == ESRCH)
        throw PeerError(peer_rank, strfmt("peer rank %d closed the channel (its process %d died)", peer_rank, pid));
      throw PeerError(peer_rank, strfmt("cannot read rank %d's buffer (process %d) in place: process_vm_readv: %s",
                                        peer_rank, pid, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
}

// What a direct message carries (channel.h): how the receiver gets the chunk.
enum class DirectKind : uint32_t { slots = 0, cma = 1, region = 2 };
struct DirectRef {
  uint32_t kind;          // DirectKind
  int32_t fd;             // region: the memfd's number in the sender
  uint64_t bytes;         // the chunk's size
  uint64_t addr;          // where the chunk lies in the sender's address space (cma, region)
  uint64_t region;        // region: its id (base/shared_memory.h)
  uint64_t offset;        // region: the chunk's offset in it
  uint64_t region_bytes;  // region: its mapped size
  uint64_t inode;         // region: the memfd's inode
  uint64_t free_epoch;    // region: the sender's free epoch when it sent this
};
static_assert(sizeof(DirectRef) <= 64, "a direct message must fit the smallest slot (slot_bytes_for)");

// The left neighbour's registered regions this rank has mapped, by region id. Ids are
// never reused, so a cached mapping is always the right memory; when the sender's free
// epoch moves on (it freed some region) every mapping is dropped, so no freed region's
// pages stay alive here for longer than until the next reference.
class RegionMaps {
 public:
  ~RegionMaps() { drop_all(); }
  // The base of region ref.region mapped read-only, or nullptr (with why and err set) if
  // the sender's memfd cannot be opened or mapped.
  const char* map(const DirectRef& ref, int pid, std::string* why, int* err) {
    if (ref.free_epoch != epoch_) {
      drop_all();
      epoch_ = ref.free_epoch;
    }
    for (const Mapped& m : maps_)
      if (m.id == ref.region) return m.base;
    const std::string path = strfmt("/proc/%d/fd/%d", pid, ref.fd);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      *err = errno;
      *why = strfmt("open %s: %s", path.c_str(), errno_string().c_str());
      return nullptr;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != ref.inode ||
        static_cast<uint64_t>(st.st_size) < ref.region_bytes) {
      ::close(fd);
      *err = EINVAL;
      *why = strfmt("%s is not the registered buffer it should be", path.c_str());
      return nullptr;
    }
    // MAP_POPULATE: one pass over the page tables instead of a fault per page on first read.
    void* p = mmap(nullptr, ref.region_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
      *err = errno;
      *why = strfmt("mmap %s: %s", path.c_str(), errno_string().c_str());
      return nullptr;
    }
    maps_.push_back(Mapped{ref.region, static_cast<const char*>(p), ref.region_bytes});
    return maps_.back().base;
  }

 private:
  struct Mapped {
    uint64_t id;
    const char* base;
    size_t bytes;
  };
  void drop_all() {
    for (const Mapped& m : maps_) munmap(const_cast<char*>(m.base), m.bytes);
    maps_.clear();
  }
  std::vector<Mapped> maps_;
  uint64_t epoch_ = 0;
};

// The slot channel of thread and shm (transports.h) plus direct reads.
class ShmChannel final : public SlotChannel {
 public:
  ShmChannel(SlotRing to_right, SlotRing from_left, GatherBoard board, int rank, int nranks, double timeout_s,
             int left_pid, bool direct, std::shared_ptr<void> keep)
      : SlotChannel(to_right, from_left, board, rank, nranks, timeout_s, true, std::move(keep)),
        rank_(rank),
        left_pid_(left_pid),
        direct_(direct) {}
  bool direct_reads() const override { return direct_; }
  bool reads_shared_memory() const override { return direct_; }
  bool starts_direct(size_t bytes) const override { return direct_ && bytes >= kDirectChunkBytes; }
  // A chunk in a registered buffer goes as a region reference at any size (the receiver
  // memcpy's it from its mapping), other memory as a CMA reference up to
  // kDirectChunkMaxBytes, larger chunks through the slots.
  bool send_direct(const void* src, size_t bytes) override {
    DirectRef ref{};
    ref.bytes = bytes;
    ref.addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(src));
    SharedRegionRef region;
    if (find_shared_region(src, bytes, &region)) {
      ref.kind = static_cast<uint32_t>(DirectKind::region);
      ref.fd = region.fd;
      ref.region = region.id;
      ref.offset = region.offset;
      ref.region_bytes = region.region_bytes;
      ref.inode = region.inode;
      ref.free_epoch = region.free_epoch;
    } else {
      ref.kind = static_cast<uint32_t>(bytes <= kDirectChunkMaxBytes ? DirectKind::cma : DirectKind::slots);
    }
    to_right_.send(&ref, sizeof ref, MsgTag::direct, right_);
    return ref.kind != static_cast<uint32_t>(DirectKind::slots);
  }
  bool recv_direct(void* dst, size_t bytes) override {
    // The slot stays taken while we read: the sender's wait_sent_consumed() returns only
    // after the copy is done.
    bool referenced = true;
    from_left_.recv(sizeof(DirectRef), MsgTag::direct, [&](const void* p) {
      DirectRef ref;
      std::memcpy(&ref, p, sizeof ref);
      if (ref.bytes != bytes)
        throw PeerError(left_.peer_rank, strfmt("rank %d sent a reference to %llu bytes where %zu were expected: the "
                                                "ranks are not running the same collective", left_.peer_rank,
                                                static_cast<unsigned long long>(ref.bytes), bytes));
      const auto kind = static_cast<DirectKind>(ref.kind);
      if (kind == DirectKind::slots) {
        referenced = false;
        return;
      }
      if (kind == DirectKind::region && maps_usable_) {
        if (ref.offset > ref.region_bytes || bytes > ref.region_bytes - ref.offset)
          throw PeerError(left_.peer_rank, strfmt("rank %d sent a reference outside its registered buffer",
                                                  left_.peer_rank));
        std::string why;
        int err = 0;
        if (const char* base = maps_.map(ref, left_pid_, &why, &err)) {
          bulk_copy(dst, base + ref.offset, bytes);
          return;
        }
        // The sender keeps the memfd open until this read is done, so a missing fd (or
        // /proc entry) means its process is gone (a zombie has closed its fds already).
        if (err == ENOENT || err == ESRCH)
          throw PeerError(left_.peer_rank, strfmt("peer rank %d closed the channel (its process %d died)",
                                                  left_.peer_rank, left_pid_));
        maps_usable_ = false;
        std::fprintf(stderr,
                     "ringzero: shm transport: rank %d cannot map rank %d's registered buffer (%s); reading it "
                     "with process_vm_readv instead (docs/comm.md, direct reads)\n",
                     rank_, left_.peer_rank, why.c_str());
      }
      cma_read(left_pid_, left_.peer_rank, dst, ref.addr, bytes);
    }, left_);
    return referenced;
  }
  void wait_sent_consumed() override { to_right_.wait_consumed(right_); }

 private:
  int rank_;
  int left_pid_;
  bool direct_;
  bool maps_usable_ = true;  // false after a mapping failed: every later region is read with CMA
  RegionMaps maps_;
};

// The word each rank's right neighbour reads to find out whether direct reads work.
constexpr uint64_t kProbeValue = 0x525a434d41505242ull;  // "RZCMAPRB"
volatile uint64_t g_cma_probe = kProbeValue;

bool yama_restricts_ptrace() {
  FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f == nullptr) return false;
  int scope = 0;
  const bool ok = std::fscanf(f, "%d", &scope) == 1;
  std::fclose(f);
  return ok && scope == 1;
}

}  // namespace

bool shm_cma_allowed() { return env_switch("RINGZERO_SHM_CMA", true); }

namespace {

// Decides direct reads for the whole ring: "1" when this rank can read its left
// neighbour, "off" when RINGZERO_SHM_CMA=0, else why not. Every rank gets every answer.
bool agree_on_direct_reads(int r, int N, int left, int left_pid, int right_pid, bool cma_allowed, StoreClient& store) {
  std::string mine = "1";
  if (!cma_allowed) {
    mine = "off";
  } else if (yama_restricts_ptrace() && prctl(PR_SET_PTRACER, static_cast<unsigned long>(right_pid), 0, 0, 0) != 0) {
    mine = strfmt("rank %d cannot let rank %d read its memory (prctl PR_SET_PTRACER: %s; Yama ptrace_scope 1)", r,
                  (r + 1) % N, errno_string().c_str());
  }
  store.set(strfmt("shm_probe/%d", r), strfmt("%llu", static_cast<unsigned long long>(
                                                          reinterpret_cast<uintptr_t>(&g_cma_probe))));
  const std::string left_probe = store.get(strfmt("shm_probe/%d", left));
  if (mine == "1") {
    uint64_t seen = 0;
    iovec local{&seen, sizeof seen};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(std::strtoull(left_probe.c_str(), nullptr, 10))),
                 sizeof seen};
    const ssize_t n = process_vm_readv(left_pid, &local, 1, &remote, 1, 0);
    if (n != static_cast<ssize_t>(sizeof seen) || seen != kProbeValue)
      mine = strfmt("rank %d cannot read rank %d's memory (process_vm_readv: %s)", r, left,
                    n < 0 ? errno_string().c_str() : "short or wrong read");
  }
  store.set(strfmt("shm_cma/%d", r), mine);
  bool all = true;
  std::string why;
  for (int q = 0; q < N; ++q) {
    std::string a = q == r ? mine : store.get(strfmt("shm_cma/%d", q));
    if (a == "1") continue;
    all = false;
    if (why.empty() && a != "off") why = a;
  }
  if (r == 0 && !why.empty())
    std::fprintf(stderr,
                 "ringzero: shm transport: %s; AllGather copies through the shared slots instead "
                 "(docs/comm.md, direct reads)\n",
                 why.c_str());
  return all;
}

}  // namespace

std::unique_ptr<RingChannel> connect_shm_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store) {
  const int N = env.world_size, r = env.rank;
  const int right = (r + 1) % N, left = (r - 1 + N) % N;
  const bool cma_allowed = shm_cma_allowed();
  const size_t bytes = SlotRing::mapping_bytes(kSlotsPerEdge, slot_bytes_for(opts));
  auto maps = std::make_shared<ShmPair>();

  // This rank's inbox.
  const std::string tag = random_job_token().substr(0, 12);
  create_segment(maps->inbox, strfmt("/ringzero-%d-r%d-%s", static_cast<int>(getpid()), r, tag.c_str()), bytes, r,
                 "inbox");
  SlotRing::format(maps->inbox.addr, kSlotsPerEdge, slot_bytes_for(opts));
  SlotRing inbox(maps->inbox.addr, bytes);
  inbox.header()->receiver_pid.store(static_cast<int32_t>(getpid()));
  store.set(strfmt("shm/%d", r), maps->inbox.name);
  // From N = 3 rank 0 also creates the gather board every rank maps (gather_board.h).
  const size_t board_bytes = GatherBoard::mapping_bytes(N);
  if (N >= kBoardMinRanks && r == 0) {
    create_segment(maps->board, strfmt("/ringzero-%d-board-%s", static_cast<int>(getpid()), tag.c_str()),
                   board_bytes, r, "gather board");
    GatherBoard::format(maps->board.addr, N);
    store.set("shm_board", maps->board.name);
  }

  // The right neighbour's inbox, and the board.
  open_segment(maps->right_inbox, store.get(strfmt("shm/%d", right)), bytes, r, right, "inbox");
  SlotRing to_right(maps->right_inbox.addr, bytes);
  to_right.header()->sender_pid.store(static_cast<int32_t>(getpid()));
  if (N >= kBoardMinRanks && r != 0) open_segment(maps->board, store.get("shm_board"), board_bytes, r, 0, "gather board");
  GatherBoard board;
  if (N >= kBoardMinRanks)
    board = GatherBoard(maps->board.addr, board_bytes, r, N, opts.timeout_s, spin_pauses_for(N),
                        static_cast<int>(getpid()));
  store.set(strfmt("shm_mapped/%d", r), "1");

  // Once the left neighbour has mapped our inbox nobody needs its name any more.
  store.get(strfmt("shm_mapped/%d", left));
  maps->inbox.unlink();
  if (N >= kBoardMinRanks && r == 0) {  // and once everyone has mapped the board, its name
    for (int q = 1; q < N; ++q) store.get(strfmt("shm_mapped/%d", q));
    maps->board.unlink();
  }
  const int left_pid = inbox.header()->sender_pid.load(), right_pid = to_right.header()->receiver_pid.load();
  const bool direct = agree_on_direct_reads(r, N, left, left_pid, right_pid, cma_allowed, store);
  return std::make_unique<ShmChannel>(to_right, inbox, board, r, N, opts.timeout_s, left_pid, direct, maps);
}

}  // namespace rz
