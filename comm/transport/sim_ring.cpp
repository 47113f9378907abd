// comm/transport/sim_ring.cpp: the ring's cuda transport on the simulated device (device_ring.h's
// DeviceLink over base/sim_device.h), so the transport GPU ranks use by default runs in
// CI with the same discipline: the inbox, the scratch chunk and the device staging
// segment are simulated-device memory; every copy and reduction goes through the arena's
// checked views, on a comm stream (a sim::Stream, in order on its own thread) that the
// transport must synchronize exactly where it would synchronize a GPU's. The inbox is
// shared with the left neighbour's process through the arena's memfd (sim::share), the
// role of a CUDA IPC handle; ranks that are threads of one process use it directly.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/sim_device.h"
#include "comm/transport/device_ring.h"

namespace rz {
namespace {

class SimLink final : public DeviceLink {
 public:
  SimLink(int rank, int device, size_t inbox_bytes) : rank_(rank), dev_(device), inbox_bytes_(inbox_bytes) {
    if (inbox_bytes > 0) inbox_ = sim::device_alloc(inbox_bytes);
  }
  ~SimLink() override {
    stream_.synchronize();
    sim::close_shared(right_inbox_);
    for (void* p : {inbox_, scratch_.p, dev_stage_.p})
      if (p != nullptr) sim::device_free(p);
    std::free(host_stage_.p);
  }

  int device() const override { return dev_; }
  void* inbox() override { return inbox_; }
  size_t handle_bytes() const override { return sizeof(sim::ShareHandle); }
  std::string inbox_handle() override {
    RZ_CHECK(inbox_ != nullptr, "cuda transport (simulated device), rank %d: no inbox to share", rank_);
    const sim::ShareHandle h = sim::share(inbox_, inbox_bytes_);
    return std::string(reinterpret_cast<const char*>(&h), sizeof h);
  }
  void* open_inbox(const InboxRecord& right) override {
    RZ_CHECK(right.handle.size() == sizeof(sim::ShareHandle),
             "cuda transport (simulated device), rank %d: a shared-range handle of %zu bytes", rank_,
             right.handle.size());
    sim::ShareHandle h;
    std::memcpy(&h, right.handle.data(), sizeof h);
    RZ_CHECK(h.pid == right.pid, "cuda transport (simulated device), rank %d: the inbox handle names pid %d, the "
             "record pid %d", rank_, h.pid, right.pid);
    try {
      right_inbox_ = sim::open_shared(h);
    } catch (const Error& e) {
      RZ_FAIL("cuda transport (simulated device), rank %d: opening the right neighbour's inbox: %s", rank_, e.what());
    }
    return right_inbox_;
  }

  // cudaMemcpyDefault's contract: either side may be host memory (the staging form's
  // pinned segment, a tcp slot), but a copy between two host buffers means one of them
  // should have been device memory.
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    const bool dst_dev = sim::is_device_address(dst), src_dev = sim::is_device_address(src);
    RZ_CHECK(dst_dev || src_dev,
             "cuda transport (simulated device), rank %d: copy of %zu bytes between two host buffers (%p <- %p): "
             "the comm stream moves device memory",
             rank_, bytes, dst, src);
    char* d = dst_dev ? static_cast<char*>(sim::host_view(dst, bytes, "cuda transport copy", "dst"))
                      : static_cast<char*>(dst);
    const char* s = src_dev ? static_cast<const char*>(sim::host_view(src, bytes, "cuda transport copy", "src"))
                            : static_cast<const char*>(src);
    stream_.enqueue([=] { std::memcpy(d, s, bytes); });
  }

  void reduce(DType dt, void* dst, const void* a, const void* b, size_t n, int divide_by) override {
    const size_t bytes = n * dtype_size(dt);
    void* d = sim::host_view(dst, bytes, "cuda transport reduce", "dst");
    const void* x = sim::host_view(a, bytes, "cuda transport reduce", "a");
    const void* y = sim::host_view(b, bytes, "cuda transport reduce", "b");
    stream_.enqueue([=] { reduce_elements(dt, d, x, y, n, divide_by); });
  }

  void* scratch(size_t bytes) override { return grow_device(scratch_, bytes); }
  void* device_staging(size_t bytes) override { return grow_device(dev_stage_, bytes); }
  void* host_staging(size_t bytes) override {
    if (bytes > host_stage_.bytes) {
      synchronize();  // queued copies may still use the old one
      std::free(host_stage_.p);
      host_stage_.p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      RZ_CHECK(host_stage_.p != nullptr, "cuda transport (simulated device), rank %d: out of host memory", rank_);
      host_stage_.bytes = bytes;
    }
    return host_stage_.p;
  }

  void synchronize() override { stream_.synchronize(); }
  // The simulated compute stream has finished every op when it returns: nothing to wait for.
  std::shared_ptr<void> mark_input() override { return nullptr; }
  void wait_input(const std::shared_ptr<void>& mark) override { (void)mark; }
  bool is_host_memory(const void* p) override { return !sim::is_device_address(p); }

 private:
  struct Grown {
    void* p = nullptr;
    size_t bytes = 0;
  };
  void* grow_device(Grown& g, size_t bytes) {
    if (bytes <= g.bytes) return g.p;
    synchronize();  // queued work may still use the old one
    if (g.p != nullptr) sim::device_free(g.p);
    g.p = sim::device_alloc(bytes);
    g.bytes = bytes;
    return g.p;
  }

  const int rank_, dev_;
  const size_t inbox_bytes_;
  void* inbox_ = nullptr;
  void* right_inbox_ = nullptr;
  Grown scratch_, dev_stage_, host_stage_;
  sim::Stream stream_;  // the comm stream; last, so it is joined before the memory goes
};

}  // namespace

int sim_ring_device_for(const RankEnv& env, const CommOptions& opts) {
  return rank_device(env, opts.device.index, sim::kDeviceCount, "comm ring, cuda transport", "sim");
}

std::shared_ptr<DeviceLink> make_sim_link(const RankEnv& env, const CommOptions& opts, size_t inbox_bytes) {
  sim::register_allocator();  // the rank's buffers may come before any sim backend (comm tests)
  return std::make_shared<SimLink>(env.rank, sim_ring_device_for(env, opts), inbox_bytes);
}

}  // namespace rz
