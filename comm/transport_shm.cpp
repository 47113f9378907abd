// comm/transport_shm.cpp: ranks as processes on one host, over POSIX shared memory.
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
// with cross-memory attach (process_vm_readv, "CMA", what OpenMPI's vader uses), the ring
// sends large AllGather chunks as references and the receiver copies them once, straight
// out of the sender's buffer. Each rank probes that at connect time by reading a known
// word from its left neighbour; the ring uses direct reads only when every rank's probe
// succeeded (the whole ring agrees through the store), otherwise rank 0 says once why
// (Yama ptrace_scope, a seccomp filter, different users) and every chunk goes through the
// slots as before. Under Yama ptrace_scope 1 each rank first names its right neighbour as
// its one permitted reader (prctl PR_SET_PTRACER). RINGZERO_SHM_CMA=0 turns direct reads off.
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

#include "base/stop_signal.h"
#include "comm/launch.h"
#include "comm/transports.h"

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
  ShmMapping inbox, right_inbox;
};

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

// What a direct reference carries: where the chunk lies in the sender's address space.
struct DirectRef {
  uint64_t addr;
  uint64_t bytes;
};

// The slot channel of thread and shm (transports.h) plus direct reads.
class ShmChannel final : public SlotChannel {
 public:
  ShmChannel(SlotRing to_right, SlotRing from_left, int rank, int nranks, double timeout_s, int left_pid,
             bool direct, std::shared_ptr<void> keep)
      : SlotChannel(to_right, from_left, rank, nranks, timeout_s, true, std::move(keep)),
        left_pid_(left_pid),
        direct_(direct) {}
  bool direct_reads() const override { return direct_; }
  void send_direct(const void* src, size_t bytes) override {
    const DirectRef ref{static_cast<uint64_t>(reinterpret_cast<uintptr_t>(src)), bytes};
    to_right_.send(&ref, sizeof ref, MsgTag::direct, right_);
  }
  void recv_direct(void* dst, size_t bytes) override {
    // The slot stays taken while we read: the sender's wait_sent_consumed() returns only
    // after the copy is done.
    from_left_.recv(sizeof(DirectRef), MsgTag::direct, [&](const void* p) {
      DirectRef ref;
      std::memcpy(&ref, p, sizeof ref);
      if (ref.bytes != bytes)
        throw PeerError(left_.peer_rank, strfmt("rank %d sent a reference to %llu bytes where %zu were expected: the "
                                                "ranks are not running the same collective", left_.peer_rank,
                                                static_cast<unsigned long long>(ref.bytes), bytes));
      cma_read(left_pid_, left_.peer_rank, dst, ref.addr, bytes);
    }, left_);
  }
  void wait_sent_consumed() override { to_right_.wait_consumed(right_); }

 private:
  int left_pid_;
  bool direct_;
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

// Decides direct reads for the whole ring: "1" when this rank can read its left
// neighbour, "off" when RINGZERO_SHM_CMA=0, else why not. Every rank gets every answer.
bool agree_on_direct_reads(int r, int N, int left, int left_pid, int right_pid, StoreClient& store) {
  std::string mine = "1";
  const char* env = std::getenv("RINGZERO_SHM_CMA");
  const std::string setting = env == nullptr ? "" : env;
  RZ_CHECK(setting.empty() || setting == "0" || setting == "1",
           "RINGZERO_SHM_CMA: expected 0 or 1, found '%s'", setting.c_str());
  if (setting == "0") {
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
  const size_t bytes = SlotRing::mapping_bytes(kSlotsPerEdge, slot_bytes_for(opts));
  auto maps = std::make_shared<ShmPair>();

  // This rank's inbox.
  std::string name = strfmt("/ringzero-%d-r%d-%s", static_cast<int>(getpid()), r, random_job_token().substr(0, 12).c_str());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  RZ_SYSCHECK(fd, "shm transport, rank %d: shm_open(%s)", r, name.c_str());
  maps->inbox.name = name;
  maps->inbox.slot = remember_linked(name);
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
  maps->inbox.addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  RZ_CHECK(maps->inbox.addr != MAP_FAILED, "shm transport, rank %d: mmap %s: %s", r, name.c_str(), errno_string().c_str());
  maps->inbox.bytes = bytes;
  SlotRing::format(maps->inbox.addr, kSlotsPerEdge, slot_bytes_for(opts));
  SlotRing inbox(maps->inbox.addr, bytes);
  inbox.header()->receiver_pid.store(static_cast<int32_t>(getpid()));
  store.set(strfmt("shm/%d", r), name);

  // The right neighbour's inbox.
  std::string right_name = store.get(strfmt("shm/%d", right));
  int rfd = shm_open(right_name.c_str(), O_RDWR, 0);
  RZ_SYSCHECK(rfd, "shm transport, rank %d: cannot open rank %d's inbox %s", r, right, right_name.c_str());
  struct stat st {};
  fstat(rfd, &st);
  if (static_cast<size_t>(st.st_size) != bytes) {
    ::close(rfd);
    RZ_FAIL("shm transport, rank %d: rank %d's inbox %s is %lld bytes, expected %zu (different --segment-bytes?)", r,
            right, right_name.c_str(), static_cast<long long>(st.st_size), bytes);
  }
  maps->right_inbox.addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
  ::close(rfd);
  RZ_CHECK(maps->right_inbox.addr != MAP_FAILED, "shm transport, rank %d: mmap %s: %s", r, right_name.c_str(),
           errno_string().c_str());
  maps->right_inbox.bytes = bytes;
  SlotRing to_right(maps->right_inbox.addr, bytes);
  to_right.header()->sender_pid.store(static_cast<int32_t>(getpid()));
  store.set(strfmt("shm_mapped/%d", r), "1");

  // Once the left neighbour has mapped our inbox nobody needs its name any more.
  store.get(strfmt("shm_mapped/%d", left));
  maps->inbox.unlink();
  const int left_pid = inbox.header()->sender_pid.load(), right_pid = to_right.header()->receiver_pid.load();
  const bool direct = agree_on_direct_reads(r, N, left, left_pid, right_pid, store);
  return std::make_unique<ShmChannel>(to_right, inbox, r, N, opts.timeout_s, left_pid, direct, maps);
}

}  // namespace rz
