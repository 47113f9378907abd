// comm/transport_shm.cpp: ranks as processes on one host, over POSIX shared memory.
//
// Each rank's inbox (the edge left -> me) is a SlotRing in its own /dev/shm object. The
// left neighbour maps it and copies each segment once into a slot; this rank reduces
// from the slot in place (slot_ring.h). Both sides write their pid into the header so a
// waiting side notices a peer that died without closing (kill -9) within ~50 ms.
// Names are published through the rendezvous store and unlinked as soon as both sides
// have mapped them, so a crashed job leaves nothing behind in /dev/shm.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/transports.h"

namespace rz {
namespace {

struct ShmMapping {
  void* addr = MAP_FAILED;
  size_t bytes = 0;
  std::string name;  // still linked while non-empty
  ~ShmMapping() {
    if (addr != MAP_FAILED) munmap(addr, bytes);
    if (!name.empty()) shm_unlink(name.c_str());
  }
};

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
  std::string name = strfmt("/ringzero-%d-r%d-%s", static_cast<int>(getpid()), r, env.job_token.substr(0, 8).c_str());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  RZ_SYSCHECK(fd, "shm transport, rank %d: shm_open(%s)", r, name.c_str());
  maps->inbox.name = name;
  int trc = ftruncate(fd, static_cast<off_t>(bytes));
  if (trc < 0) ::close(fd);
  RZ_SYSCHECK(trc, "shm transport, rank %d: ftruncate %s to %zu bytes (is /dev/shm full?)", r, name.c_str(), bytes);
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
  shm_unlink(name.c_str());
  maps->inbox.name.clear();
  return make_slot_channel(to_right, inbox, r, N, opts.timeout_s, true, maps);
}

}  // namespace rz
