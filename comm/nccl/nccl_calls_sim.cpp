// comm/nccl/nccl_calls_sim.cpp: the simulated device's row of the nccl backend's call table
// (comm/nccl/nccl_calls.h), always built, so NcclCommunicator's own logic runs in CI on 1 to N
// CPU ranks with NCCL's contract:
//   - every buffer must be simulated-device memory (base/sim_device.h), as NCCL's argument
//     check wants device pointers: a host pointer fails the call with one line;
//   - work is stream-ordered: a stream is a sim::Stream (its own thread, in order), an
//     event a point on one, the null stream the compute stream (always finished);
//   - init is asynchronous (comm_init_rank answers in progress; async_error says when it
//     is done): it checks, over the ring, that every rank holds rank 0's unique id;
//   - a collective runs on its stream as the host ring's collective of the same name
//     (ncclSum; counts NCCL's: reduce_scatter and all_gather take N equal shards) on the
//     arena's read-write view. A failed one makes async_error report it and leaves the
//     stream stuck, as a hung NCCL kernel does, until abort().
// The ring sums in its own order, so fp32 results are the ring's (NCCL's differ by
// rounding, which the logic above never relies on).
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>

#include "base/bf16.h"
#include "base/check.h"
#include "base/sim_device.h"
#include "comm/nccl/nccl_calls.h"

namespace rz {
namespace {

sim::Stream* as_stream(void* s) { return static_cast<sim::Stream*>(s); }

// Runs work on the stream, or now for the null (compute) stream.
void on_stream(void* stream, std::function<void()> work) {
  if (stream == nullptr) work();
  else as_stream(stream)->enqueue(std::move(work));
}

class SimNcclCalls final : public NcclCalls {
 public:
  explicit SimNcclCalls(std::unique_ptr<Communicator> ring) : ring_(std::move(ring)) {
    RZ_CHECK(ring_ != nullptr, "simulated nccl: no host ring");
  }
  ~SimNcclCalls() override { abort(nullptr); }  // nothing may stay stuck

  std::string set_device(int device) override {
    return device >= 0 && device < sim::kDeviceCount ? "" : strfmt("invalid device ordinal sim:%d", device);
  }
  std::string stream_create(void** stream) override {
    *stream = new sim::Stream;
    return "";
  }
  void stream_destroy(void* stream) override { delete as_stream(stream); }
  std::string event_create(void** event) override {
    *event = new sim::StreamMark;
    return "";
  }
  void event_destroy(void* event) override { delete static_cast<sim::StreamMark*>(event); }
  std::string event_record(void* event, void* stream) override {
    auto* m = static_cast<sim::StreamMark*>(event);
    *m = stream == nullptr ? sim::StreamMark{} : sim::StreamMark{as_stream(stream), as_stream(stream)->record()};
    return "";
  }
  std::string stream_wait_event(void* stream, void* event) override {
    const sim::StreamMark m = *static_cast<sim::StreamMark*>(event);  // the record as of now
    on_stream(stream, [m] { m.wait(); });
    return "";
  }
  bool event_query(void* event, std::string* error) override {
    (void)error;  // a sim stream does not fail: a failed collective only stops it
    return static_cast<sim::StreamMark*>(event)->done();
  }
  std::string malloc(void** p, size_t bytes) override { return allocate(p, bytes); }
  void free(void* p) override {
    if (p != nullptr) sim::device_free(p);
  }
  // Stream-ordered: the memory is usable by work queued after this call; the free waits
  // for the work queued before it.
  std::string malloc_async(void** p, size_t bytes, void* stream) override {
    (void)stream;
    return allocate(p, bytes);
  }
  void free_async(void* p, void* stream) override {
    if (p != nullptr) on_stream(stream, [p] { sim::device_free(p); });
  }
  std::string memcpy_async(void* dst, const void* src, size_t bytes, void* stream) override {
    if (bytes == 0) return "";
    std::string e;
    char* d = view(dst, bytes, "cudaMemcpyAsync", "dst", &e);
    const char* s = view(src, bytes, "cudaMemcpyAsync", "src", &e);
    if (!e.empty()) return e;
    on_stream(stream, [=] { std::memmove(d, s, bytes); });
    return "";
  }
  // The host side is checked to be outside the arena, as cudaMemcpyAsync's direction says.
  std::string copy_to_device_async(void* dst, const void* host_src, size_t bytes, void* stream) override {
    if (bytes == 0) return "";
    std::string e;
    char* d = view(dst, bytes, "cudaMemcpyAsync(HostToDevice)", "dst", &e);
    if (!e.empty()) return e;
    try {
      sim::check_host(host_src, bytes, "cudaMemcpyAsync(HostToDevice)", "src");
    } catch (const std::exception& x) {
      return x.what();
    }
    on_stream(stream, [=] { std::memcpy(d, host_src, bytes); });
    return "";
  }
  std::string copy_to_host_async(void* host_dst, const void* src, size_t bytes, void* stream) override {
    if (bytes == 0) return "";
    std::string e;
    const char* s = view(src, bytes, "cudaMemcpyAsync(DeviceToHost)", "src", &e);
    if (!e.empty()) return e;
    try {
      sim::check_host(host_dst, bytes, "cudaMemcpyAsync(DeviceToHost)", "dst");
    } catch (const std::exception& x) {
      return x.what();
    }
    on_stream(stream, [=] { std::memcpy(host_dst, s, bytes); });
    return "";
  }
  std::string memset_async(void* dst, int value, size_t bytes, void* stream) override {
    if (bytes == 0) return "";
    std::string e;
    char* d = view(dst, bytes, "cudaMemsetAsync", "dst", &e);
    if (!e.empty()) return e;
    on_stream(stream, [=] { std::memset(d, value, bytes); });
    return "";
  }
  bool is_device_memory(const void* p) override { return sim::is_device_address(p); }
  void divide_by(void* buf, size_t n, DType dt, int N, void* stream) override {
    if (n == 0) return;
    char* b = static_cast<char*>(sim::host_view(buf, n * dtype_size(dt), "divide_by", "buf"));
    const float div = static_cast<float>(N);
    on_stream(stream, [=] {
      if (dt == DType::f32) {
        float* x = reinterpret_cast<float*>(b);
        for (size_t i = 0; i < n; ++i) x[i] = x[i] / div;
      } else {
        bf16* x = reinterpret_cast<bf16*>(b);
        for (size_t i = 0; i < n; ++i) x[i] = float_to_bf16(bf16_to_float(x[i]) / div);
      }
    });
  }

  NcclStatus get_unique_id(NcclIdBytes* id) override {
    std::random_device rd;
    for (unsigned char& b : *id) b = static_cast<unsigned char>(rd());
    return NcclStatus::ok();
  }
  NcclStatus comm_init_rank(void** comm, int nranks, const NcclIdBytes& id, int rank) override {
    *comm = this;
    if (nranks != ring_->size() || rank != ring_->rank())
      return NcclStatus::fail(strfmt("invalid argument: rank %d of %d, but the simulated device's host ring is rank "
                                     "%d of %d",
                                     rank, nranks, ring_->rank(), ring_->size()));
    {
      std::lock_guard<std::mutex> l(mu_);
      initializing_ = true;
    }
    // Asynchronous, as a non-blocking NCCL init: every rank must hold rank 0's id.
    init_stream_.enqueue([this, id] {
      std::string why;
      try {
        NcclIdBytes root = id;
        ring_->broadcast(root.data(), root.size() / sizeof(float), DType::f32, 0);
        if (root != id) why = "unhandled system error: this rank's unique id is not rank 0's (the id exchange failed)";
      } catch (const std::exception& e) {
        why = strfmt("remote process exited or there was a network error: %s", e.what());
      }
      std::lock_guard<std::mutex> l(mu_);
      initializing_ = false;
      if (!why.empty() && error_.empty()) error_ = why;
    });
    return NcclStatus::pending();
  }
  NcclStatus all_reduce(const void* in, void* out, size_t count, DType dt, void* comm, void* stream) override {
    return collective("ncclAllReduce", in, count, out, count, dt, comm, stream,
                      [this, count, dt](const char*, char* o) { ring_->all_reduce(o, count, dt, ReduceOp::sum); });
  }
  NcclStatus reduce_scatter(const void* in, void* out, size_t recv_count, DType dt, void* comm, void* stream) override {
    const size_t count = recv_count * size_t(ring_->size());
    return collective("ncclReduceScatter", in, count, out, recv_count, dt, comm, stream,
                      [this, count, dt](const char* i, char* o) { ring_->reduce_scatter(i, o, count, dt, ReduceOp::sum); },
                      /*copy_in=*/false);
  }
  NcclStatus all_gather(const void* in, void* out, size_t send_count, DType dt, void* comm, void* stream) override {
    const size_t count = send_count * size_t(ring_->size());
    return collective("ncclAllGather", in, send_count, out, count, dt, comm, stream,
                      [this, count, dt](const char* i, char* o) { ring_->all_gather(i, o, count, dt); },
                      /*copy_in=*/false);
  }
  NcclStatus broadcast(const void* in, void* out, size_t count, DType dt, int root, void* comm, void* stream) override {
    return collective("ncclBroadcast", in, ring_->rank() == root ? count : 0, out, count, dt, comm, stream,
                      [this, count, dt, root](const char*, char* o) { ring_->broadcast(o, count, dt, root); });
  }
  NcclStatus async_error(void* comm) override {
    (void)comm;
    std::lock_guard<std::mutex> l(mu_);
    if (!error_.empty()) return NcclStatus::fail(error_);
    return initializing_ ? NcclStatus::pending() : NcclStatus::ok();
  }
  NcclStatus finalize(void* comm) override {
    (void)comm;
    init_stream_.synchronize();
    return NcclStatus::ok();
  }
  NcclStatus destroy(void* comm) override {
    (void)comm;
    return NcclStatus::ok();
  }
  // As ncclCommAbort: when it returns, no collective of this communicator touches its
  // buffers any more (one still in the ring ends at the ring's own timeout at the latest).
  void abort(void* comm) override {
    (void)comm;
    std::unique_lock<std::mutex> l(mu_);
    aborted_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return running_ == 0; });
  }

 private:
  // The read-write view of a call's buffer; a pointer that is not simulated-device
  // memory sets *error (if not yet set) to NCCL-style invalid-argument text.
  static char* view(const void* p, size_t bytes, const char* call, const char* name, std::string* error) {
    try {
      return static_cast<char*>(sim::host_view(p, bytes, call, name));
    } catch (const Error& e) {
      if (error->empty()) *error = strfmt("invalid argument: %s", e.what());
      return nullptr;
    }
  }
  static std::string allocate(void** p, size_t bytes) {
    try {
      *p = bytes == 0 ? nullptr : sim::device_alloc(bytes);
    } catch (const Error& e) {
      return strfmt("out of memory: %s", e.what());
    }
    return "";
  }

  // A collective on the stream: in (in_count elements) is copied to out first when copy_in
  // and they differ (NCCL's out-of-place AllReduce and Broadcast), then run(in, out) on
  // the views. A failure is kept for async_error and stops the stream until abort.
  template <typename Run>
  NcclStatus collective(const char* call, const void* in, size_t in_count, void* out, size_t out_count, DType dt,
                        void* comm, void* stream, Run run, bool copy_in = true) {
    if (comm != this) return NcclStatus::fail(strfmt("invalid argument: %s on a communicator that is not this one", call));
    const size_t esz = dtype_size(dt);
    std::string bad;
    char* o = view(out, out_count * esz, call, "recvbuff", &bad);
    const char* i = view(in, in_count * esz, call, "sendbuff", &bad);
    if (!bad.empty()) return NcclStatus::fail(bad);
    on_stream(stream, [=, this] {
      {
        std::unique_lock<std::mutex> l(mu_);
        if (!error_.empty()) return stuck(l);
        ++running_;
      }
      std::string failure;
      try {
        if (copy_in && in_count > 0 && i != o) std::memmove(o, i, in_count * esz);
        run(i, o);
      } catch (const std::exception& e) {
        failure = strfmt("remote process exited or there was a network error: %s", e.what());
      }
      std::unique_lock<std::mutex> l(mu_);
      --running_;
      cv_.notify_all();
      if (failure.empty()) return;
      if (error_.empty()) error_ = failure;
      stuck(l);
    });
    return NcclStatus::ok();
  }
  // A failed collective's stream: nothing after it runs until the communicator is aborted.
  void stuck(std::unique_lock<std::mutex>& l) {
    cv_.wait(l, [&] { return aborted_; });
  }

  std::unique_ptr<Communicator> ring_;  // host buffers, on the views
  std::mutex mu_;
  std::condition_variable cv_;
  bool initializing_ = false, aborted_ = false;
  int running_ = 0;          // collectives inside the ring now
  std::string error_;        // the first asynchronous error (async_error reports it)
  sim::Stream init_stream_;  // comm_init_rank's background work; last, so joined first
};

}  // namespace

std::unique_ptr<NcclCalls> make_sim_nccl_calls(std::unique_ptr<Communicator> host_ring) {
  sim::register_allocator();  // the rank's buffers may come before any sim backend (comm tests)
  return std::make_unique<SimNcclCalls>(std::move(host_ring));
}

}  // namespace rz
