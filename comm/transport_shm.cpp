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
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
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
  return make_slot_channel(to_right, inbox, r, N, opts.timeout_s, true, maps);
}

}  // namespace rz
