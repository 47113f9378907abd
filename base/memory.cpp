#include "base/memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/check.h"

namespace rz {

const char* mem_tag_name(MemTag tag) {
  static const char* names[kNumMemTags] = {"params", "grads",       "master", "adam_m",
                                           "adam_v", "activations", "comm",   "workspace"};
  return names[static_cast<int>(tag)];
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker tracker;
  return tracker;
}

static void raise_peak(std::atomic<size_t>& peak, size_t value) {
  size_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

void MemoryTracker::on_alloc(DeviceKind kind, MemTag tag, size_t bytes) {
  Counters& c = at(kind);
  size_t now = c.current[idx(tag)].fetch_add(bytes) + bytes;
  raise_peak(c.peak[idx(tag)], now);
  size_t total = c.current_total.fetch_add(bytes) + bytes;
  raise_peak(c.peak_total, total);
}

void MemoryTracker::on_free(DeviceKind kind, MemTag tag, size_t bytes) {
  Counters& c = at(kind);
  c.current[idx(tag)].fetch_sub(bytes);
  c.current_total.fetch_sub(bytes);
}

size_t MemoryTracker::peak_total(DeviceKind kind) const { return at(kind).peak_total.load(); }

void MemoryTracker::reset_peaks() {
  for (Counters& c : kinds_) {
    for (int i = 0; i < kNumMemTags; ++i) c.peak[i].store(c.current[i].load());
    c.peak_total.store(c.current_total.load());
  }
}

std::string device_name(Device d) {
  if (d.is_cpu()) return "cpu";
  return strfmt("%s:%d", d.kind == DeviceKind::sim ? "sim" : "cuda", d.index);
}


// One allocator per device kind; the cpu slot stays empty (host memory is aligned_alloc).
static std::array<DeviceAllocator, kNumDeviceKinds> g_allocators;

void register_device_allocator(DeviceKind kind, DeviceAllocator a) {
  RZ_CHECK(kind != DeviceKind::cpu && a.alloc != nullptr && a.free != nullptr,
           "register_device_allocator: needs a device kind and both functions");
  g_allocators[static_cast<int>(kind)] = a;
}

size_t checked_bytes(size_t count, size_t elem_bytes, MemTag tag) {
  size_t bytes = 0;
  RZ_CHECK(!__builtin_mul_overflow(count, elem_bytes, &bytes),
           "cannot allocate %zu elements of %zu bytes for %s: the size does not fit in 64 bits", count, elem_bytes,
           mem_tag_name(tag));
  return bytes;
}

void* tracked_alloc(MemTag tag, size_t bytes, Device dev) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  if (dev.is_cpu()) {
    RZ_CHECK(bytes <= SIZE_MAX - 63, "out of memory allocating %s for %s", format_bytes(double(bytes)).c_str(),
             mem_tag_name(tag));
    size_t rounded = (bytes + 63) / 64 * 64;
    p = std::aligned_alloc(64, rounded);
    RZ_CHECK(p != nullptr, "out of memory allocating %s for %s", format_bytes(double(bytes)).c_str(),
             mem_tag_name(tag));
    std::memset(p, 0, rounded);
  } else {
    const DeviceAllocator& a = g_allocators[static_cast<int>(dev.kind)];
    RZ_CHECK(a.alloc != nullptr, "cannot allocate %s for %s on %s: no backend for that device is active",
             format_bytes(double(bytes)).c_str(), mem_tag_name(tag), device_name(dev).c_str());
    p = a.alloc(dev.index, bytes);
  }
  MemoryTracker::global().on_alloc(dev.kind, tag, bytes);
  return p;
}

void tracked_free(MemTag tag, void* p, size_t bytes, Device dev) {
  if (p == nullptr) return;
  if (dev.is_cpu())
    std::free(p);
  else
    g_allocators[static_cast<int>(dev.kind)].free(dev.index, p);
  MemoryTracker::global().on_free(dev.kind, tag, bytes);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? strfmt("%.0f B", bytes) : strfmt("%.2f %s", bytes, units[u]);
}

}  // namespace rz
