// tests/cuemu/runtime/memory.cpp: device memory of the CUDA-on-CPU emulator.
//
// Device memory is host memory a kernel (a function on a fiber) addresses directly; the
// discipline lies in where it sits and what is checked:
//   layout    every allocation is its own mapping: a PROT_NONE guard page, the data pages,
//             a guard page. The block is placed at the END of its data pages, 256-byte
//             aligned (cudaMalloc's alignment), so at most 255 bytes of slack separate its
//             last byte from the guard page.
//   checks    under AddressSanitizer the slack (and the unused front of the data pages) is
//             poisoned, so an out-of-bounds access by a kernel is a report at its line.
//             Without ASan the slack holds a canary, checked after every kernel
//             (check_guards) and at cudaFree, and anything further hits a guard page.
//   sharing   device allocations are backed by a memfd, so another process can map them:
//             cudaIpcGetMemHandle names (pid, fd, inode, offset), and the peer opens
//             /proc/<pid>/fd/<fd> (the simulated device shares its arena the same way).
//             That is emulated IPC between processes of one user, never the driver's.
//   copies    cudaMemcpy* and cudaMemset* check that each device range lies inside one
//             allocation and that the kind (host to device, ...) matches what the pointers
//             are: stricter than CUDA with unified addressing, which would often just copy.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CUEMU_ASAN 1
#else
#define CUEMU_ASAN 0
#endif

namespace cuemu {
namespace {

constexpr size_t kAlign = 256;
constexpr unsigned char kCanary = 0xCD;

struct Mapping {
  char* map = nullptr;  // the whole reservation: guard, data, guard
  size_t map_bytes = 0;
  char* data = nullptr;  // the data pages
  size_t data_bytes = 0;
  Region region;         // base, bytes, kind, device
  int fd = -1;           // the memfd behind device memory (-1: anonymous)
  uint64_t inode = 0;
};

std::mutex g_mu;
std::map<uintptr_t, Mapping> g_maps;  // by region.base
size_t g_device_bytes = 0;            // data pages of this process's device allocations

size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

void poison(const void* p, size_t n) {
#if CUEMU_ASAN
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  (void)p;
  (void)n;
#endif
}
void unpoison(const void* p, size_t n) {
#if CUEMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p;
  (void)n;
#endif
}

// A device allocation needs one memfd; a process may hold hundreds. The soft limit goes up
// to the hard one once (a test tool may; CUDA itself needs no descriptors).
void raise_fd_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit r{};
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
      r.rlim_cur = r.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &r);
    }
  });
}

// Reserves guard + data + guard and maps the data (from fd when >= 0), read-write.
bool map_block(size_t data_bytes, int fd, Mapping* m) {
  const size_t pg = page_size();
  m->map_bytes = data_bytes + 2 * pg;
  void* map = mmap(nullptr, m->map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return false;
  m->map = static_cast<char*>(map);
  m->data = m->map + pg;
  m->data_bytes = data_bytes;
  void* d = fd >= 0 ? mmap(m->data, data_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0)
                    : mmap(m->data, data_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (d == MAP_FAILED) {
    munmap(m->map, m->map_bytes);
    return false;
  }
  return true;
}

void unmap_block(Mapping& m) {
  unpoison(m.data, m.data_bytes);  // the shadow must not outlive the mapping
  munmap(m.map, m.map_bytes);
  if (m.fd >= 0) close(m.fd);
}

// Places `bytes` at the end of the data pages and guards the rest.
void place(Mapping* m, size_t bytes) {
  const size_t span = round_up(bytes == 0 ? 1 : bytes, kAlign);
  m->region.base = m->data + m->data_bytes - span;
  m->region.bytes = bytes;
  poison(m->data, size_t(m->region.base - m->data));
  char* end = m->region.base + bytes;
  const size_t slack = span - bytes;
  if (!CUEMU_ASAN) std::memset(end, kCanary, slack);
  poison(end, slack);
}

// "" when the canary after m's end is intact; else the first changed byte.
std::string guard_damage(const Mapping& m) {
  if (CUEMU_ASAN || m.region.kind == MemKind::peer_device) return "";
  const unsigned char* end = reinterpret_cast<const unsigned char*>(m.region.base + m.region.bytes);
  const size_t slack = round_up(m.region.bytes == 0 ? 1 : m.region.bytes, kAlign) - m.region.bytes;
  for (size_t i = 0; i < slack; ++i)
    if (end[i] != kCanary)
      return fmt("something wrote past the end of the %zu-byte %s allocation at %p (byte %zu after its end changed)",
                 m.region.bytes, m.region.kind == MemKind::device ? "device" : "pinned host",
                 static_cast<void*>(m.region.base), i);
  return "";
}

cudaError_t allocate(void** ptr, size_t bytes, MemKind kind) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "a null pointer to receive the allocation");
  *ptr = nullptr;
  if (bytes > (size_t(1) << 40)) return fail(cudaErrorMemoryAllocation, fmt("%zu bytes is more than 1 TiB", bytes));
  Mapping m;
  m.region.kind = kind;
  m.region.device = current_device();
  const size_t data_bytes = round_up(round_up(bytes == 0 ? 1 : bytes, kAlign), page_size());
  if (kind == MemKind::device) {
    raise_fd_limit();
    m.fd = memfd_create("cuemu-device", MFD_CLOEXEC);
    if (m.fd < 0) return fail(cudaErrorMemoryAllocation, fmt("memfd_create: %s", std::strerror(errno)));
    struct stat st {};
    if (ftruncate(m.fd, off_t(data_bytes)) != 0 || fstat(m.fd, &st) != 0) {
      const int e = errno;
      close(m.fd);
      return fail(cudaErrorMemoryAllocation, fmt("%zu bytes of device memory: %s", bytes, std::strerror(e)));
    }
    m.inode = uint64_t(st.st_ino);
  }
  if (!map_block(data_bytes, m.fd, &m)) {
    const int e = errno;
    if (m.fd >= 0) close(m.fd);
    return fail(cudaErrorMemoryAllocation, fmt("mmap of %zu bytes: %s", data_bytes, std::strerror(e)));
  }
  place(&m, bytes);
  *ptr = m.region.base;
  std::lock_guard<std::mutex> l(g_mu);
  if (kind == MemKind::device) g_device_bytes += m.data_bytes;
  g_maps[reinterpret_cast<uintptr_t>(m.region.base)] = m;
  return cudaSuccess;
}

cudaError_t release(void* ptr, MemKind kind, const char* call) {
  if (ptr == nullptr) return cudaSuccess;
  Mapping m;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_maps.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g_maps.end() || it->second.region.kind != kind)
      return fail(cudaErrorInvalidValue, fmt("%s(%p): not the start of a live %s", call, ptr,
                                             kind == MemKind::device        ? "device allocation"
                                             : kind == MemKind::pinned_host ? "pinned host allocation"
                                                                            : "IPC mapping"));
    m = it->second;
    g_maps.erase(it);
    if (kind == MemKind::device) g_device_bytes -= m.data_bytes;
  }
  const std::string damage = guard_damage(m);
  unmap_block(m);
  if (!damage.empty()) return fail(cudaErrorIllegalAddress, damage + " (found at " + call + ")");
  return cudaSuccess;
}

// The mapping holding p (p one past the end included); g_mu held.
const Mapping* find_locked(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_maps.upper_bound(a);
  if (it == g_maps.begin()) return nullptr;
  --it;
  const Region& r = it->second.region;
  return a <= uintptr_t(r.base) + r.bytes ? &it->second : nullptr;
}

struct IpcHandle {
  char magic[8];
  int32_t pid;
  int32_t fd;
  uint64_t inode;
  uint64_t data_bytes;
  uint64_t offset;  // of the allocation in its data pages
  uint64_t bytes;
  int32_t device;
};
static_assert(sizeof(IpcHandle) <= sizeof(cudaIpcMemHandle_t));
constexpr char kIpcMagic[8] = {'c', 'u', 'e', 'm', 'u', 'I', 'P', 'C'};

// Where [p, p + bytes) lies, for a copy or memset: a device range must lie inside one region.
enum class Side { host, device };
cudaError_t check_side(const void* p, size_t bytes, Side want, const char* call, const char* what) {
  Region r;
  const bool in_region = find_region(p, &r);
  const bool device = in_region && r.kind != MemKind::pinned_host;
  if (want == Side::host) {
    if (device)
      return fail(cudaErrorInvalidValue,
                  fmt("%s: the %s %s is device memory, but the copy's kind says host", call, what,
                      describe_pointer(p).c_str()));
    return cudaSuccess;
  }
  if (!device_addressable(p, bytes))
    return fail(cudaErrorInvalidValue, fmt("%s: the %s range %s + %zu bytes is not inside one device allocation", call,
                                           what, describe_pointer(p).c_str(), bytes));
  return cudaSuccess;
}

}  // namespace

bool find_region(const void* p, Region* r) {
  std::lock_guard<std::mutex> l(g_mu);
  const Mapping* m = find_locked(p);
  if (m == nullptr) return false;
  *r = m->region;
  return true;
}

bool device_addressable(const void* p, size_t bytes) {
  Region r;
  if (!find_region(p, &r)) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = uintptr_t(r.base);
  return a - b <= r.bytes && bytes <= r.bytes - (a - b);
}

std::string describe_pointer(const void* p) {
  Region r;
  if (!find_region(p, &r)) return fmt("%p (not device memory)", p);
  const size_t off = size_t(static_cast<const char*>(p) - r.base);
  const char* kind = r.kind == MemKind::device        ? "device allocation"
                     : r.kind == MemKind::pinned_host ? "pinned host allocation"
                                                      : "peer's device allocation (IPC)";
  return fmt("%p (byte %zu of a %zu-byte %s)", p, off, r.bytes, kind);
}

size_t device_bytes_in_use() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_device_bytes;
}

std::string check_guards() {
  if (CUEMU_ASAN) return "";
  std::lock_guard<std::mutex> l(g_mu);
  for (const auto& [base, m] : g_maps) {
    std::string damage = guard_damage(m);
    if (!damage.empty()) return damage;
  }
  return "";
}

}  // namespace cuemu

using cuemu::fail;
using cuemu::fmt;

cudaError_t cudaMalloc(void** ptr, size_t bytes) { return cuemu::allocate(ptr, bytes, cuemu::MemKind::device); }
cudaError_t cudaFree(void* ptr) { return cuemu::release(ptr, cuemu::MemKind::device, "cudaFree"); }
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cuemu::allocate(ptr, bytes, cuemu::MemKind::pinned_host); }
cudaError_t cudaFreeHost(void* ptr) { return cuemu::release(ptr, cuemu::MemKind::pinned_host, "cudaFreeHost"); }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!cuemu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, fmt("cudaMemcpyAsync on stream %p, which is not a live stream",
                                                    static_cast<void*>(stream)));
  if (bytes == 0) return cudaSuccess;
  using cuemu::Side;
  const char* call = "cudaMemcpy";
  cudaError_t e = cudaSuccess;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if ((e = cuemu::check_side(src, bytes, Side::host, call, "source")) != cudaSuccess) return e;
      if ((e = cuemu::check_side(dst, bytes, Side::device, call, "destination")) != cudaSuccess) return e;
      break;
    case cudaMemcpyDeviceToHost:
      if ((e = cuemu::check_side(src, bytes, Side::device, call, "source")) != cudaSuccess) return e;
      if ((e = cuemu::check_side(dst, bytes, Side::host, call, "destination")) != cudaSuccess) return e;
      break;
    case cudaMemcpyDeviceToDevice:
      if ((e = cuemu::check_side(src, bytes, Side::device, call, "source")) != cudaSuccess) return e;
      if ((e = cuemu::check_side(dst, bytes, Side::device, call, "destination")) != cudaSuccess) return e;
      break;
    case cudaMemcpyHostToHost:
      if ((e = cuemu::check_side(src, bytes, Side::host, call, "source")) != cudaSuccess) return e;
      if ((e = cuemu::check_side(dst, bytes, Side::host, call, "destination")) != cudaSuccess) return e;
      break;
    case cudaMemcpyDefault:
      break;  // any pair, inferred (unified addressing)
    default:
      return fail(cudaErrorInvalidMemcpyDirection, fmt("cudaMemcpy kind %d", int(kind)));
  }
  std::memcpy(dst, src, bytes);  // CUDA leaves overlapping copies undefined; ASan reports them
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (!cuemu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, fmt("cudaMemsetAsync on stream %p, which is not a live stream",
                                                    static_cast<void*>(stream)));
  if (bytes == 0) return cudaSuccess;
  if (!cuemu::device_addressable(ptr, bytes))
    return fail(cudaErrorInvalidValue, fmt("cudaMemset: %s + %zu bytes is not inside one device allocation",
                                           cuemu::describe_pointer(ptr).c_str(), bytes));
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) { return cudaMemsetAsync(ptr, value, bytes, nullptr); }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  if (attr == nullptr) return fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: null attributes");
  cuemu::Region r;
  *attr = cudaPointerAttributes{cudaMemoryTypeUnregistered, -2, nullptr, const_cast<void*>(ptr)};
  if (cuemu::find_region(ptr, &r)) {
    attr->device = r.device;
    if (r.kind == cuemu::MemKind::pinned_host) {
      attr->type = cudaMemoryTypeHost;
      attr->devicePointer = const_cast<void*>(ptr);
    } else {
      attr->type = cudaMemoryTypeDevice;
      attr->devicePointer = const_cast<void*>(ptr);
      attr->hostPointer = nullptr;
    }
  }
  return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  if (handle == nullptr) return fail(cudaErrorInvalidValue, "cudaIpcGetMemHandle: null handle");
  cuemu::IpcHandle h{};
  {
    std::lock_guard<std::mutex> l(cuemu::g_mu);
    auto it = cuemu::g_maps.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == cuemu::g_maps.end() || it->second.region.kind != cuemu::MemKind::device)
      return fail(cudaErrorInvalidValue, fmt("cudaIpcGetMemHandle(%p): not the start of a device allocation", ptr));
    const cuemu::Mapping& m = it->second;
    std::memcpy(h.magic, cuemu::kIpcMagic, sizeof h.magic);
    h.pid = int32_t(getpid());
    h.fd = m.fd;
    h.inode = m.inode;
    h.data_bytes = m.data_bytes;
    h.offset = uint64_t(m.region.base - m.data);
    h.bytes = m.region.bytes;
    h.device = m.region.device;
  }
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int flags) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "cudaIpcOpenMemHandle: null pointer");
  *ptr = nullptr;
  cuemu::IpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (std::memcmp(h.magic, cuemu::kIpcMagic, sizeof h.magic) != 0 || h.bytes > h.data_bytes ||
      h.offset > h.data_bytes - h.bytes || h.data_bytes % cuemu::page_size() != 0)
    return fail(cudaErrorInvalidValue, "cudaIpcOpenMemHandle: not a handle this emulator made");
  if (flags != cudaIpcMemLazyEnablePeerAccess)
    return fail(cudaErrorInvalidValue, fmt("cudaIpcOpenMemHandle: flags %u (CUDA takes cudaIpcMemLazyEnablePeerAccess)",
                                           flags));
  if (h.pid == int32_t(getpid()))
    return fail(cudaErrorInvalidValue, "cudaIpcOpenMemHandle: the handle was made in this process (CUDA refuses that)");
  const std::string path = fmt("/proc/%d/fd/%d", int(h.pid), int(h.fd));
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return fail(cudaErrorInvalidValue, fmt("cudaIpcOpenMemHandle: open %s: %s", path.c_str(), std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || uint64_t(st.st_ino) != h.inode) {
    close(fd);
    return fail(cudaErrorInvalidValue, fmt("cudaIpcOpenMemHandle: %s is no longer the exporter's allocation", path.c_str()));
  }
  cuemu::Mapping m;
  const bool ok = cuemu::map_block(size_t(h.data_bytes), fd, &m);
  const int e = errno;
  close(fd);  // the mapping keeps the file
  if (!ok) return fail(cudaErrorMemoryAllocation, fmt("cudaIpcOpenMemHandle: mmap: %s", std::strerror(e)));
  m.region.kind = cuemu::MemKind::peer_device;
  m.region.device = h.device;
  m.region.base = m.data + h.offset;
  m.region.bytes = size_t(h.bytes);
  *ptr = m.region.base;
  std::lock_guard<std::mutex> l(cuemu::g_mu);
  cuemu::g_maps[reinterpret_cast<uintptr_t>(m.region.base)] = m;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* ptr) {
  return cuemu::release(ptr, cuemu::MemKind::peer_device, "cudaIpcCloseMemHandle");
}
