#include "base/memory.h"

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

void MemoryTracker::on_alloc(MemTag tag, size_t bytes) {
  size_t now = current_[idx(tag)].fetch_add(bytes) + bytes;
  raise_peak(peak_[idx(tag)], now);
  size_t total = current_total_.fetch_add(bytes) + bytes;
  raise_peak(peak_total_, total);
}

void MemoryTracker::on_free(MemTag tag, size_t bytes) {
  current_[idx(tag)].fetch_sub(bytes);
  current_total_.fetch_sub(bytes);
}

size_t MemoryTracker::current_total() const { return current_total_.load(); }
size_t MemoryTracker::peak_total() const { return peak_total_.load(); }

void MemoryTracker::reset_peaks() {
  for (int i = 0; i < kNumMemTags; ++i) peak_[i].store(current_[i].load());
  peak_total_.store(current_total_.load());
}

void* tracked_alloc(MemTag tag, size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  RZ_CHECK(p != nullptr, "out of memory allocating %s for %s", format_bytes(double(bytes)).c_str(),
           mem_tag_name(tag));
  std::memset(p, 0, rounded);
  MemoryTracker::global().on_alloc(tag, bytes);
  return p;
}

void tracked_free(MemTag tag, void* p, size_t bytes) {
  if (p == nullptr) return;
  std::free(p);
  MemoryTracker::global().on_free(tag, bytes);
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
