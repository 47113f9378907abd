// base/memory.h: tagged, tracked allocations.
//
// Every sizeable buffer in ringzero (parameters, gradients, optimizer state, activations,
// comm staging) is allocated as a rz::Buffer with a MemTag and a Device. The process-wide
// MemoryTracker keeps current and peak bytes per device kind and tag, so a rank can report
// what it really holds -- in host RAM or on its GPU -- next to the formula for its
// strategy (see zero/memory/report.h). Counters are atomic: the comm thread allocates and
// frees too.
//
// base/ knows no GPU API. Device memory comes from the DeviceAllocator that a backend
// registers (kernels/cuda does, when a CUDA backend is created; the simulated device's
// arena, base/sim_device.h, is registered the same way by its backend and comm links);
// allocating on a device with none registered is an error, not a crash.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "base/check.h"

namespace rz {

enum class MemTag : int { params, grads, master, adam_m, adam_v, activations, comm, workspace };
constexpr int kNumMemTags = 8;
const char* mem_tag_name(MemTag tag);

// Where memory lives: the host (DeviceKind::cpu), GPU `index` (DeviceKind::cuda), or the
// simulated device (DeviceKind::sim, base/sim_device.h: a test-facing GPU stand-in whose
// memory host code cannot touch).
enum class DeviceKind : int { cpu, cuda, sim };
constexpr int kNumDeviceKinds = 3;
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // GPU ordinal; 0 for the host
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool operator==(const Device&) const = default;
};
std::string device_name(Device d);  // "cpu", "cuda:0", "sim:0"
// A name as the user writes it is a DeviceSpec (base/device_spec.h): it may leave the ordinal
// open for the rank's placement (train/rank_setup.h) to decide.

// How device memory is obtained. alloc returns zero-filled memory or throws rz::Error.
struct DeviceAllocator {
  void* (*alloc)(int index, size_t bytes) = nullptr;
  void (*free)(int index, void* p) = nullptr;
};
// Registers the allocator for one device kind (idempotent; kernels/cuda calls it).
void register_device_allocator(DeviceKind kind, DeviceAllocator a);

class MemoryTracker {
 public:
  static MemoryTracker& global();

  void on_alloc(DeviceKind kind, MemTag tag, size_t bytes);
  void on_free(DeviceKind kind, MemTag tag, size_t bytes);
  // Bytes held on one kind of device (the host by default), summed over device indices.
  size_t current(MemTag tag, DeviceKind kind = DeviceKind::cpu) const { return at(kind).current[idx(tag)].load(); }
  size_t peak(MemTag tag, DeviceKind kind = DeviceKind::cpu) const { return at(kind).peak[idx(tag)].load(); }
  size_t current_total(DeviceKind kind = DeviceKind::cpu) const { return at(kind).current_total.load(); }
  size_t peak_total(DeviceKind kind = DeviceKind::cpu) const;  // peak of the sum, not the sum of peaks
  // Start a new measurement window: peaks become the current values (every device kind).
  void reset_peaks();

 private:
  struct Counters {
    std::array<std::atomic<size_t>, kNumMemTags> current{};
    std::array<std::atomic<size_t>, kNumMemTags> peak{};
    std::atomic<size_t> current_total{0};
    std::atomic<size_t> peak_total{0};
  };
  static int idx(MemTag t) { return static_cast<int>(t); }
  Counters& at(DeviceKind k) { return kinds_[static_cast<int>(k)]; }
  const Counters& at(DeviceKind k) const { return kinds_[static_cast<int>(k)]; }
  std::array<Counters, kNumDeviceKinds> kinds_;
};

// An owning, zero-initialised array of T on one device, accounted under one tag. Host
// buffers are 64-byte aligned; device buffers are the device allocator's (cudaMalloc:
// 256-byte aligned). data() of a device buffer is a device pointer: hand it to a backend
// op, never dereference it on the host (operator[] is for host buffers only).
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemTag tag, size_t count, Device dev = {}) { allocate(tag, count, dev); }
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
      device_ = o.device_;
      shared_ = std::exchange(o.shared_, false);
    }
    return *this;
  }

  void allocate(MemTag tag, size_t count, Device dev = {});  // releases any previous contents
  // Host memory that peer processes can map, so the shm transport reads it in place with
  // memcpy (base/shared_memory.h); accounted under tag exactly like allocate(tag, count).
  void allocate_shared(MemTag tag, size_t count);
  void release();

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }
  MemTag tag() const { return tag_; }
  Device device() const { return device_; }
  bool shared() const { return shared_; }  // allocated with allocate_shared
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
  MemTag tag_ = MemTag::workspace;
  Device device_;
  bool shared_ = false;
};

// Untyped helpers behind Buffer (they throw rz::Error when memory runs out or when no
// allocator is registered for the device).
void* tracked_alloc(MemTag tag, size_t bytes, Device dev = {});
void tracked_free(MemTag tag, void* p, size_t bytes, Device dev = {});
// Shareable host memory (base/shared_memory.h), tracked like tracked_alloc(tag, bytes).
void* tracked_alloc_shared(MemTag tag, size_t bytes);
void tracked_free_shared(MemTag tag, void* p, size_t bytes);

std::string format_bytes(double bytes);  // "1.50 MiB"

// count elements of elem_bytes each, or an rz::Error naming the tag when the byte count
// does not fit in size_t (a size computed from crafted or huge numbers).
size_t checked_bytes(size_t count, size_t elem_bytes, MemTag tag);

// v.resize(n), or an rz::Error "out of memory allocating 12.00 GiB for WHAT" instead of a
// bare std::bad_alloc (or std::length_error) from deep inside the library.
template <typename V>
void resize_or_fail(V& v, size_t n, const char* what) {
  try {
    v.resize(n);
  } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    fail(strfmt("out of memory allocating %s for %s (%zu elements)",
                format_bytes(static_cast<double>(n) * sizeof(typename V::value_type)).c_str(), what, n));
  }
}

template <typename T>
void Buffer<T>::allocate(MemTag tag, size_t count, Device dev) {
  release();
  tag_ = tag;
  device_ = dev;
  data_ = static_cast<T*>(tracked_alloc(tag, checked_bytes(count, sizeof(T), tag), dev));
  count_ = count;
}

template <typename T>
void Buffer<T>::allocate_shared(MemTag tag, size_t count) {
  release();
  tag_ = tag;
  device_ = Device{};
  data_ = static_cast<T*>(tracked_alloc_shared(tag, checked_bytes(count, sizeof(T), tag)));
  count_ = count;
  shared_ = true;
}

template <typename T>
void Buffer<T>::release() {
  if (data_ != nullptr && shared_) tracked_free_shared(tag_, data_, count_ * sizeof(T));
  else if (data_ != nullptr) tracked_free(tag_, data_, count_ * sizeof(T), device_);
  data_ = nullptr;
  count_ = 0;
  shared_ = false;
}

std::string format_bytes(double bytes);  // "1.50 MiB"

}  // namespace rz
