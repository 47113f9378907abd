// comm/transport/cuda_ring.cpp: the GPU side of the ring's cuda transport (device_ring.h): a comm
// stream, the inbox and its CUDA IPC handle, copies and the reduce kernel on that stream.
// Every CUDA call is checked (base/cuda_check.h: the statement, file:line, CUDA's error); during
// a collective the ring communicator puts the rank and the collective in front.
#include <cuda_runtime.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "base/cuda_check.h"
#include "comm/transport/device_ops.h"
#include "comm/transport/device_ring.h"

namespace rz {

std::string cuda_ring_unavailable() { return comm_cuda::devices_unavailable(); }

int cuda_ring_device_for(const RankEnv& env, const CommOptions& opts) {
  if (opts.device.kind == DeviceKind::sim) return sim_ring_device_for(env, opts);
  int n = 0;
  const std::string why = comm_cuda::devices_unavailable(&n);
  RZ_CHECK(why.empty(), "comm ring, cuda transport: rank %d: %s", env.rank, why.c_str());
  return rank_device(env, opts.device.index, n, "comm ring, cuda transport", "cuda");
}

namespace {

class CudaLink final : public DeviceLink {
 public:
  CudaLink(int rank, int device, void* in_stream, size_t inbox_bytes, double timeout_s)
      : rank_(rank), dev_(device), in_stream_(static_cast<cudaStream_t>(in_stream)), timeout_s_(timeout_s) {
    try {
      CUDA_CHECK(cudaSetDevice(dev_));
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
      if (inbox_bytes > 0) {
        // cudaMalloc, not a stream-ordered pool: only such memory has an IPC handle.
        CUDA_CHECK(cudaMalloc(&inbox_, inbox_bytes));
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaLink() override { release(); }

  int device() const override { return dev_; }
  void* inbox() override { return inbox_; }
  size_t handle_bytes() const override { return sizeof(cudaIpcMemHandle_t); }

  std::string inbox_handle() override {
    RZ_CHECK(inbox_ != nullptr, "cuda transport, rank %d: no inbox to share", rank_);
    cudaIpcMemHandle_t h;
    CUDA_CHECK(cudaIpcGetMemHandle(&h, inbox_));
    return std::string(reinterpret_cast<const char*>(&h), sizeof h);
  }

  void* open_inbox(const InboxRecord& right) override {
    RZ_CHECK(right.pid != static_cast<int>(getpid()),
             "cuda transport, rank %d: the right neighbour is this process (pid %d): CUDA IPC needs every rank in "
             "its own process",
             rank_, right.pid);
    RZ_CHECK(right.handle.size() == sizeof(cudaIpcMemHandle_t), "cuda transport, rank %d: IPC handle of %zu bytes",
             rank_, right.handle.size());
    cudaIpcMemHandle_t h;
    std::memcpy(&h, right.handle.data(), sizeof h);
    CUDA_CHECK(cudaSetDevice(dev_));
    CUDA_CHECK(cudaIpcOpenMemHandle(&right_inbox_, h, cudaIpcMemLazyEnablePeerAccess));
    return right_inbox_;
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }

  void reduce(DType dt, void* dst, const void* a, const void* b, size_t n, int divide_by) override {
    try {
      comm_cuda::reduce(dt, dst, a, b, n, divide_by, stream_);
    } catch (const Error& e) {
      throw Error(strfmt("cuda transport, rank %d: %s", rank_, e.what()));
    }
  }

  void* scratch(size_t bytes) override { return grow(scratch_, bytes); }
  void* host_staging(size_t bytes) override { return grow(host_stage_, bytes); }
  void* device_staging(size_t bytes) override { return grow(dev_stage_, bytes); }

  // Polls an event rather than cudaStreamSynchronize, so the wait is bounded and several
  // ranks on one host do not each spin a core inside the driver.
  void synchronize() override {
    CUDA_CHECK(cudaEventRecord(done_, stream_));
    const auto t0 = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) CUDA_CHECK(q);
      if (spins < 256) continue;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s_)
        RZ_FAIL("cuda transport, rank %d: the comm stream did not finish within %.0f s", rank_, timeout_s_);
      if (spins < 4096) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::shared_ptr<void> mark_input() override {
    CUDA_CHECK(cudaSetDevice(dev_));
    cudaEvent_t ev = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    std::shared_ptr<void> mark(ev, [](void* e) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
    CUDA_CHECK(cudaEventRecord(ev, in_stream_));
    return mark;
  }

  void wait_input(const std::shared_ptr<void>& mark) override {
    CUDA_CHECK(cudaSetDevice(dev_));  // the comm thread too
    if (mark != nullptr)
      CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(mark.get()), 0));
  }

  bool is_host_memory(const void* p) override {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; clear it
      return true;                // what the runtime does not know is plain host memory
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
  }

 private:
  // A grow-only buffer: device memory, or pinned host memory for staging across hosts.
  struct GrowBuffer {
    bool pinned;
    void* p = nullptr;
    size_t bytes = 0;
  };

  static void free_buffer(GrowBuffer& b) {
    if (b.p != nullptr) (void)(b.pinned ? cudaFreeHost(b.p) : cudaFree(b.p));
    b.p = nullptr;
    b.bytes = 0;
  }
  void* grow(GrowBuffer& b, size_t bytes) {
    if (bytes <= b.bytes) return b.p;
    synchronize();  // queued work may still use the old buffer
    free_buffer(b);
    CUDA_CHECK(b.pinned ? cudaMallocHost(&b.p, bytes) : cudaMalloc(&b.p, bytes));
    b.bytes = bytes;
    return b.p;
  }
  void release() {
    (void)cudaSetDevice(dev_);
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    if (right_inbox_ != nullptr) (void)cudaIpcCloseMemHandle(right_inbox_);
    if (inbox_ != nullptr) (void)cudaFree(inbox_);
    free_buffer(scratch_);
    free_buffer(dev_stage_);
    free_buffer(host_stage_);
    if (done_ != nullptr) (void)cudaEventDestroy(done_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    right_inbox_ = inbox_ = nullptr;
    done_ = nullptr;
    stream_ = nullptr;
  }

  const int rank_, dev_;
  cudaStream_t in_stream_;  // where inputs are produced (null: the legacy default stream)
  const double timeout_s_;
  cudaStream_t stream_ = nullptr;  // the comm stream (non-blocking)
  cudaEvent_t done_ = nullptr;
  void* inbox_ = nullptr;
  void* right_inbox_ = nullptr;
  GrowBuffer scratch_{false};
  GrowBuffer host_stage_{true};  // one segment (across hosts)
  GrowBuffer dev_stage_{false};  // one received segment (across hosts)
};

}  // namespace

std::shared_ptr<DeviceLink> make_cuda_link(const RankEnv& env, const CommOptions& opts, size_t inbox_bytes) {
  const int dev = cuda_ring_device_for(env, opts);
  return std::make_shared<CudaLink>(env.rank, dev, opts.cuda_stream, inbox_bytes, opts.timeout_s);
}

}  // namespace rz
