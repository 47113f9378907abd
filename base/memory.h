// base/memory.h: tagged, tracked allocations.
//
// Every sizeable buffer in ringzero (parameters, gradients, optimizer state, activations,
// comm staging) is allocated as a rz::Buffer with a MemTag. The process-wide MemoryTracker
// keeps current and peak bytes per tag, so a rank can report what it really holds next
// to the formula for its strategy (see zero/memory_report). Counters are atomic: the
// comm thread allocates and frees too.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace rz {

enum class MemTag : int { params, grads, master, adam_m, adam_v, activations, comm, workspace };
constexpr int kNumMemTags = 8;
const char* mem_tag_name(MemTag tag);

class MemoryTracker {
 public:
  static MemoryTracker& global();

  void on_alloc(MemTag tag, size_t bytes);
  void on_free(MemTag tag, size_t bytes);
  size_t current(MemTag tag) const { return current_[idx(tag)].load(); }
  size_t peak(MemTag tag) const { return peak_[idx(tag)].load(); }
  size_t current_total() const;
  size_t peak_total() const;  // peak of the sum, not the sum of peaks
  // Start a new measurement window: peaks become the current values.
  void reset_peaks();

 private:
  static int idx(MemTag t) { return static_cast<int>(t); }
  std::array<std::atomic<size_t>, kNumMemTags> current_{};
  std::array<std::atomic<size_t>, kNumMemTags> peak_{};
  std::atomic<size_t> current_total_{0};
  std::atomic<size_t> peak_total_{0};
};

// An owning, 64-byte aligned, zero-initialised array of T accounted under one tag.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemTag tag, size_t count) { allocate(tag, count); }
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
      tag_ = o.tag_;
    }
    return *this;
  }

  void allocate(MemTag tag, size_t count);  // releases any previous contents
  void release();

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }
  MemTag tag() const { return tag_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
  MemTag tag_ = MemTag::workspace;
};

// Untyped helpers behind Buffer (they throw rz::Error when memory runs out).
void* tracked_alloc(MemTag tag, size_t bytes);
void tracked_free(MemTag tag, void* p, size_t bytes);

template <typename T>
void Buffer<T>::allocate(MemTag tag, size_t count) {
  release();
  tag_ = tag;
  count_ = count;
  data_ = static_cast<T*>(tracked_alloc(tag, count * sizeof(T)));
}

template <typename T>
void Buffer<T>::release() {
  if (data_ != nullptr) tracked_free(tag_, data_, count_ * sizeof(T));
  data_ = nullptr;
  count_ = 0;
}

std::string format_bytes(double bytes);  // "1.50 MiB"

}  // namespace rz
