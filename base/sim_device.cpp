// base/sim_device.cpp: the simulated device's arena, checks, SIGSEGV report and streams
// (see sim_device.h).
#include "base/sim_device.h"

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "base/check.h"
#include "base/memory.h"

namespace rz::sim {
namespace {

// Device views the fault handler recognises: the arena and every peer range mapped here.
// Plain atomics in a fixed table, so the handler reads them without a lock.
struct ViewSlot {
  std::atomic<uintptr_t> lo{0}, hi{0};
};
constexpr int kMaxViews = 64;
std::array<ViewSlot, kMaxViews> g_views;

int add_view(uintptr_t lo, uintptr_t hi) {
  for (int i = 0; i < kMaxViews; ++i) {
    uintptr_t expected = 0;
    if (g_views[i].lo.compare_exchange_strong(expected, lo)) {
      g_views[i].hi.store(hi);
      return i;
    }
  }
  RZ_FAIL("simulated device: more than %d device views are mapped in this process", kMaxViews);
}

void remove_view(int i) {
  g_views[i].hi.store(0);
  g_views[i].lo.store(0);
}

bool in_view(uintptr_t a, uintptr_t* lo, uintptr_t* hi) {
  for (const ViewSlot& v : g_views) {
    const uintptr_t l = v.lo.load(), h = v.hi.load();
    if (l != 0 && a >= l && a < h) {
      *lo = l;
      *hi = h;
      return true;
    }
  }
  return false;
}

// --- the fault report: async-signal-safe (write(2), no allocation) -----------------------
struct sigaction g_previous;

void put(const char* s) {
  const size_t n = std::strlen(s);
  for (size_t done = 0; done < n;) {
    const ssize_t w = ::write(STDERR_FILENO, s + done, n - done);
    if (w <= 0) return;
    done += static_cast<size_t>(w);
  }
}

void put_hex(uintptr_t v) {
  char buf[2 + 2 * sizeof v + 1];
  buf[0] = '0';
  buf[1] = 'x';
  int n = 2;
  bool started = false;
  for (int shift = 8 * sizeof v - 4; shift >= 0; shift -= 4) {
    const int d = static_cast<int>((v >> shift) & 15);
    if (d != 0 || started || shift == 0) {
      buf[n++] = "0123456789abcdef"[d];
      started = true;
    }
  }
  buf[n] = 0;
  put(buf);
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  uintptr_t lo = 0, hi = 0;
  if (in_view(a, &lo, &hi)) {
    put("ringzero: host code touched simulated-device memory at ");
    put_hex(a);
    put(" (the simulated device's arena ");
    put_hex(lo);
    put("-");
    put_hex(hi);
    put(", --device sim): a device pointer was read or written on the host, as would crash on a GPU; "
        "only the op table's copies may move device bytes. Backtrace (addr2line -e <binary> <offset>):\n");
    void* frames[48];
    const int n = backtrace(frames, 48);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    std::abort();
  }
  // Not ours: what would have happened without this handler.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, uctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);  // returning re-executes the access, which now ends the process
  }
}

void install_fault_handler() {
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  RZ_SYSCHECK(sigaction(SIGSEGV, &sa, &g_previous), "simulated device: sigaction(SIGSEGV)");
}

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// RINGZERO_SIM_MEMORY: the arena's size in bytes, with an optional K, M or G suffix.
size_t arena_bytes_from_env() {
  const char* v = std::getenv("RINGZERO_SIM_MEMORY");
  if (v == nullptr || *v == 0) return size_t{64} << 30;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  size_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = size_t{1} << 10;
  else if (*end == 'M' || *end == 'm') mult = size_t{1} << 20;
  else if (*end == 'G' || *end == 'g') mult = size_t{1} << 30;
  const bool suffix = mult != 1;
  RZ_CHECK(errno == 0 && end != v && x > 0 && (suffix ? end[1] == 0 : *end == 0) && x <= (size_t{1} << 46) / mult,
           "RINGZERO_SIM_MEMORY: expected a size in bytes (e.g. 8G), found '%s'", v);
  return round_up(static_cast<size_t>(x) * mult, page_size());
}

// One live allocation: its requested size (checks use it) inside kAlignment-rounded room.
struct Block {
  size_t bytes;
  size_t room;
};

class Arena {
 public:
  Arena() : size_(arena_bytes_from_env()) {
    fd_ = memfd_create("ringzero-sim-device", MFD_CLOEXEC);
    RZ_SYSCHECK(fd_, "simulated device: memfd_create");
    struct stat st {};
    RZ_SYSCHECK(ftruncate(fd_, static_cast<off_t>(size_)), "simulated device: ftruncate(%zu)", size_);
    RZ_SYSCHECK(fstat(fd_, &st), "simulated device: fstat");
    inode_ = static_cast<uint64_t>(st.st_ino);
    void* d = mmap(nullptr, size_, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
    void* h = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
    RZ_CHECK(d != MAP_FAILED && h != MAP_FAILED,
             "simulated device: cannot map a %s arena twice: %s (address space limited? RINGZERO_SIM_MEMORY sets "
             "the arena's size, e.g. 4G)",
             format_bytes(double(size_)).c_str(), errno_string().c_str());
    dev_ = static_cast<char*>(d);
    host_ = static_cast<char*>(h);
    free_[0] = size_;
    install_fault_handler();
    add_view(reinterpret_cast<uintptr_t>(dev_), reinterpret_cast<uintptr_t>(dev_) + size_);
  }

  void* alloc(size_t bytes) {
    RZ_CHECK(bytes > 0, "simulated device: an allocation of 0 bytes");
    const size_t room = round_up(bytes, kAlignment);
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < room) continue;
      const size_t off = it->first, left = it->second - room;
      free_.erase(it);
      if (left > 0) free_[off + room] = left;
      live_[off] = Block{bytes, room};
      in_use_ += bytes;
      return dev_ + off;  // free memory is always zero (release() zeroes it)
    }
    RZ_FAIL("simulated device: out of memory allocating %s (%s of %s in use; RINGZERO_SIM_MEMORY sets the size)",
            format_bytes(double(bytes)).c_str(), format_bytes(double(in_use_)).c_str(),
            format_bytes(double(size_)).c_str());
  }

  void release(void* p) {
    const size_t off = offset_of(p);
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(off);
    RZ_CHECK(off < size_ && it != live_.end(), "simulated device: free of %p, which is not a live allocation", p);
    const size_t room = it->second.room;
    in_use_ -= it->second.bytes;
    live_.erase(it);
    zero(off, room);
    // Back into the free map, merged with its neighbours.
    size_t lo = off, len = room;
    auto next = free_.lower_bound(off);
    if (next != free_.end() && next->first == off + room) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == lo) {
        lo = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    free_[lo] = len;
  }

  // The live block holding [p, p + bytes), as an offset; fills why when there is none.
  bool find(const void* p, size_t bytes, size_t* off_out, std::string* why) {
    const size_t off = offset_of(p);
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.upper_bound(off);
    if (it == live_.begin() || off - std::prev(it)->first >= std::prev(it)->second.bytes) {
      *why = "lies in freed (or never allocated) simulated-device memory";
      return false;
    }
    --it;
    const size_t into = off - it->first;
    if (bytes > it->second.bytes - into) {
      *why = strfmt("runs past its allocation (%zu bytes from offset %zu of a %zu-byte allocation)", bytes, into,
                    it->second.bytes);
      return false;
    }
    *off_out = off;
    return true;
  }

  bool contains(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(dev_);
    return a >= lo && a - lo < size_;
  }
  char* host_at(size_t off) const { return host_ + off; }
  char* dev_at(size_t off) const { return dev_ + off; }
  size_t in_use() {
    std::lock_guard<std::mutex> l(mu_);
    return in_use_;
  }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  uint64_t inode() const { return inode_; }
  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const char*>(p) - dev_); }

 private:
  // Page-aligned interior back to the kernel (its pages read as zero), the edges by hand.
  void zero(size_t off, size_t len) {
    const size_t pg = page_size(), lo = round_up(off, pg), hi = (off + len) / pg * pg;
    if (hi > lo && fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(lo),
                             static_cast<off_t>(hi - lo)) == 0) {
      std::memset(host_ + off, 0, lo - off);
      std::memset(host_ + hi, 0, off + len - hi);
    } else {
      std::memset(host_ + off, 0, len);
    }
  }

  const size_t size_;
  int fd_ = -1;
  uint64_t inode_ = 0;
  char* dev_ = nullptr;   // PROT_NONE: the addresses handed out
  char* host_ = nullptr;  // read-write: the same bytes for the device's own code
  std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> bytes, coalesced
  std::map<size_t, Block> live_;   // offset -> block
  size_t in_use_ = 0;
};

Arena& arena() {
  static Arena* a = new Arena;  // never destroyed: buffers may outlive static destructors
  return *a;
}

// Ranges of other processes' arenas mapped here (open_shared).
struct PeerMapping {
  char* dev_map;   // both mappings start at the page below the range
  char* host_map;
  size_t map_bytes;
  size_t lead;     // the range's start within the mapping
  size_t bytes;
  int view;
};
std::mutex g_peers_mu;
std::map<uintptr_t, PeerMapping> g_peers;  // keyed by the range's device address

std::string describe(const void* p, const char* op, const char* arg) {
  return strfmt("%s: %s (%p)", op, arg, p);
}

}  // namespace

void* device_alloc(size_t bytes) { return arena().alloc(bytes); }
void device_free(void* p) { arena().release(p); }
void register_allocator() {
  register_device_allocator(DeviceKind::sim, DeviceAllocator{[](int, size_t bytes) { return device_alloc(bytes); },
                                                             [](int, void* p) { device_free(p); }});
}
size_t device_bytes_in_use() { return arena().in_use(); }
size_t device_capacity() { return arena().size(); }

bool is_device_address(const void* p) {
  uintptr_t lo = 0, hi = 0;
  return in_view(reinterpret_cast<uintptr_t>(p), &lo, &hi);
}

void* host_view(const void* p, size_t bytes, const char* op, const char* arg) {
  if (bytes == 0) return const_cast<void*>(p);
  RZ_CHECK(p != nullptr, "%s is null but %zu bytes were asked for (simulated device)", describe(p, op, arg).c_str(),
           bytes);
  Arena& a = arena();
  if (a.contains(p)) {
    size_t off = 0;
    std::string why;
    RZ_CHECK(a.find(p, bytes, &off, &why), "%s %s", describe(p, op, arg).c_str(), why.c_str());
    return a.host_at(off);
  }
  {
    std::lock_guard<std::mutex> l(g_peers_mu);
    const auto at = reinterpret_cast<uintptr_t>(p);
    auto it = g_peers.upper_bound(at);
    if (it != g_peers.begin()) {
      --it;
      const PeerMapping& m = it->second;
      const size_t into = at - it->first;
      if (into < m.bytes) {
        RZ_CHECK(bytes <= m.bytes - into, "%s runs past the peer's shared range (%zu bytes from offset %zu of %zu)",
                 describe(p, op, arg).c_str(), bytes, into, m.bytes);
        return m.host_map + m.lead + into;
      }
    }
  }
  RZ_FAIL("%s is not simulated-device memory: a host pointer where the op wants a device pointer (--device sim)",
          describe(p, op, arg).c_str());
}

void check_host(const void* p, size_t bytes, const char* op, const char* arg) {
  if (bytes == 0) return;
  const char* c = static_cast<const char*>(p);
  RZ_CHECK(!is_device_address(c) && !is_device_address(c + bytes - 1),
           "%s is simulated-device memory, but this argument is host memory (a device pointer where the op wants "
           "a host one)",
           describe(p, op, arg).c_str());
}

ShareHandle share(const void* p, size_t bytes) {
  Arena& a = arena();
  RZ_CHECK(a.contains(p), "simulated device: share(%p): not in this process's arena", p);
  size_t off = 0;
  std::string why;
  RZ_CHECK(a.find(p, bytes, &off, &why), "simulated device: share(%p, %zu): %s", p, bytes, why.c_str());
  ShareHandle h;
  h.pid = static_cast<int32_t>(getpid());
  h.fd = a.fd();
  h.inode = a.inode();
  h.offset = off;
  h.bytes = bytes;
  h.address = reinterpret_cast<uintptr_t>(p);
  return h;
}

void* open_shared(const ShareHandle& h) {
  if (h.pid == static_cast<int32_t>(getpid())) {
    RZ_CHECK(h.fd == arena().fd() && h.inode == arena().inode(), "simulated device: a handle of this process names "
             "another memfd (fd %d)", h.fd);
    return reinterpret_cast<void*>(static_cast<uintptr_t>(h.address));
  }
  RZ_CHECK(h.bytes > 0 && h.bytes <= (uint64_t{1} << 40), "simulated device: a shared range of %llu bytes",
           static_cast<unsigned long long>(h.bytes));
  const std::string path = strfmt("/proc/%d/fd/%d", h.pid, h.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  RZ_SYSCHECK(fd, "simulated device: cannot open the peer's arena %s", path.c_str());
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != h.inode) {
    ::close(fd);
    RZ_FAIL("simulated device: %s is not the peer's arena (inode %llu, expected %llu)", path.c_str(),
            static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(h.inode));
  }
  const size_t pg = page_size(), start = h.offset / pg * pg, lead = h.offset - start;
  const size_t map_bytes = round_up(lead + h.bytes, pg);
  void* d = mmap(nullptr, map_bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, static_cast<off_t>(start));
  void* hv = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, static_cast<off_t>(start));
  const std::string why = errno_string();
  ::close(fd);  // the mappings keep the file
  if (d == MAP_FAILED || hv == MAP_FAILED) {
    if (d != MAP_FAILED) munmap(d, map_bytes);
    if (hv != MAP_FAILED) munmap(hv, map_bytes);
    RZ_FAIL("simulated device: cannot map the peer's range of %s: %s", format_bytes(double(h.bytes)).c_str(),
            why.c_str());
  }
  (void)arena();  // the fault handler is installed with the arena
  const auto lo = reinterpret_cast<uintptr_t>(d);
  PeerMapping m{static_cast<char*>(d), static_cast<char*>(hv), map_bytes, lead, h.bytes, add_view(lo, lo + map_bytes)};
  std::lock_guard<std::mutex> l(g_peers_mu);
  g_peers[lo + lead] = m;
  return static_cast<char*>(d) + lead;
}

void close_shared(void* p) {
  if (p == nullptr || arena().contains(p)) return;
  PeerMapping m{};
  {
    std::lock_guard<std::mutex> l(g_peers_mu);
    auto it = g_peers.find(reinterpret_cast<uintptr_t>(p));
    RZ_CHECK(it != g_peers.end(), "simulated device: close_shared(%p): not a peer range mapped here", p);
    m = it->second;
    g_peers.erase(it);
  }
  remove_view(m.view);
  munmap(m.dev_map, m.map_bytes);
  munmap(m.host_map, m.map_bytes);
}

// --- Stream -------------------------------------------------------------------------------

Stream::Stream() : thread_([this] { main(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Stream::enqueue(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(work));
    ++enqueued_;
  }
  cv_.notify_all();
}

uint64_t Stream::record() {
  std::lock_guard<std::mutex> l(mu_);
  return enqueued_;
}

bool Stream::done(uint64_t ticket) {
  std::lock_guard<std::mutex> l(mu_);
  return completed_ >= ticket;
}

void Stream::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return completed_ >= ticket; });
}

std::exception_ptr Stream::error() {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

void Stream::main() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything ran
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    std::exception_ptr err;
    try {
      work();
    } catch (...) {
      err = std::current_exception();
    }
    l.lock();
    if (err && !error_) error_ = err;
    ++completed_;
    cv_.notify_all();
  }
}

}  // namespace rz::sim
