#include "base/shared_memory.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>

#include "base/check.h"
#include "base/memory.h"

namespace rz {
namespace {

struct Region {
  uint64_t id;
  size_t bytes;  // mapped (page-rounded)
  uint64_t inode;
  int fd;
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Region> by_base;  // keyed by the region's first byte
  uint64_t next_id = 1;
  uint64_t free_epoch = 0;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: buffers may outlive static destructors
  return *r;
}

size_t page_round(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

void* shared_host_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t mapped = page_round(bytes);
  const std::string what = format_bytes(double(bytes));
  // The name shows in /proc/<pid>/maps as "/memfd:ringzero-buffer (deleted)".
  const int fd = memfd_create("ringzero-buffer", MFD_CLOEXEC);
  RZ_SYSCHECK(fd, "cannot allocate %s of shareable host memory: memfd_create", what.c_str());
  struct stat st {};
  if (ftruncate(fd, static_cast<off_t>(mapped)) != 0 || fstat(fd, &st) != 0) {
    const std::string why = errno_string();
    ::close(fd);
    fail(strfmt("cannot allocate %s of shareable host memory: ftruncate: %s", what.c_str(), why.c_str()));
  }
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const std::string why = errno_string();
    ::close(fd);
    fail(strfmt("out of memory allocating %s of shareable host memory: mmap: %s", what.c_str(), why.c_str()));
  }
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.by_base[reinterpret_cast<uintptr_t>(p)] = Region{reg.next_id++, mapped, static_cast<uint64_t>(st.st_ino), fd};
  return p;
}

void shared_host_free(void* p) {
  if (p == nullptr) return;
  Registry& reg = registry();
  Region region{};
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.by_base.find(reinterpret_cast<uintptr_t>(p));
    RZ_CHECK(it != reg.by_base.end(), "shared_host_free: %p is not a shareable host allocation", p);
    region = it->second;
    reg.by_base.erase(it);
    ++reg.free_epoch;
  }
  munmap(p, region.bytes);
  ::close(region.fd);
}

bool find_shared_region(const void* p, size_t bytes, SharedRegionRef* out) {
  Registry& reg = registry();
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.by_base.upper_bound(a);  // the first region starting after p
  if (it == reg.by_base.begin()) return false;
  --it;
  const Region& r = it->second;
  if (a - it->first > r.bytes || bytes > r.bytes - (a - it->first)) return false;
  out->id = r.id;
  out->offset = a - it->first;
  out->region_bytes = r.bytes;
  out->inode = r.inode;
  out->free_epoch = reg.free_epoch;
  out->fd = r.fd;
  return true;
}

size_t shared_region_count() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  return reg.by_base.size();
}

}  // namespace rz

namespace rz {

void* tracked_alloc_shared(MemTag tag, size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = shared_host_alloc(bytes);
  MemoryTracker::global().on_alloc(DeviceKind::cpu, tag, bytes);
  return p;
}

void tracked_free_shared(MemTag tag, void* p, size_t bytes) {
  if (p == nullptr) return;
  shared_host_free(p);
  MemoryTracker::global().on_free(DeviceKind::cpu, tag, bytes);
}

}  // namespace rz
