// comm/nccl/nccl_communicator.cpp: the Communicator over NCCL (see nccl_communicator.h),
// written once over the table of NCCL and CUDA calls in comm/nccl/nccl_calls.h: on GPUs the
// library's, in CI the simulated device's, over the ring.
#include "comm/nccl/nccl_communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/sim_device.h"
#include "base/trace.h"
#include "comm/nccl/nccl_calls.h"
#include "comm/debug/fingerprint.h"
#include "comm/debug/flight_recorder.h"
#include "comm/rendezvous/nccl_id.h"
#include "comm/ring_communicator.h"

namespace rz {

int nccl_device_for(const RankEnv& env, const CommOptions& opts) {
  const bool sim = opts.device.kind == DeviceKind::sim;
  const int n = sim ? sim::kDeviceCount : nccl_cuda_device_count(env.rank);
  return rank_device(env, opts.device.index, n, "comm nccl", sim ? "sim" : "cuda");
}

namespace {

// The watchdog finishes every handle within the timeout.
class NcclWork final : public FinishableWork {
 public:
  NcclWork(CollectiveKind k, uint64_t s, uint64_t b, OnDone d) : kind(k), seq(s), bytes(b), on_done(std::move(d)) {}

  const CollectiveKind kind;
  const uint64_t seq;
  const uint64_t bytes;  // ring-equivalent payload per rank
  OnDone on_done;
  void* event = nullptr;  // recorded on the comm stream after the collective
  std::chrono::steady_clock::time_point issued;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RankEnv& env, const CommOptions& opts, StoreClient* store, std::shared_ptr<void> keep_alive,
                   std::unique_ptr<NcclCalls> calls)
      : api_(std::move(calls)), rank_(env.rank), nranks_(env.world_size), opts_(opts),
        keep_alive_(std::move(keep_alive)) {
    dev_ = nccl_device_for(env, opts);
    flight_.configure(rank_, nranks_, "nccl", opts_);
    try {
      start(store);
    } catch (const Error& e) {
      abort_comm();
      free_cuda();
      throw Error(strfmt("comm nccl: rank %d: %s", rank_, e.what()));
    }
    watchdog_ = std::thread([this] { watchdog_main(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (watchdog_.joinable()) watchdog_.join();  // returns once every handle finished or failed
    (void)api_->set_device(dev_);
    if (comm_ != nullptr) {
      bool finalized = false;
      if (broken_.empty() && std::uncaught_exceptions() == 0) {
        try {
          nccl("ncclCommFinalize", api_->finalize(comm_));
          finalized = api_->destroy(comm_).code == NcclStatus::success;
          if (finalized) comm_ = nullptr;
        } catch (const std::exception&) {
        }
      }
      if (!finalized) abort_comm();
    }
    free_cuda();
  }

 private:
  // The comm stream, events, the barrier word and NCCL's communicator (id through the store).
  void start(StoreClient* store) {
    cuda("cudaSetDevice", api_->set_device(dev_));
    in_stream_ = opts_.cuda_stream;
    cuda("cudaStreamCreateWithFlags", api_->stream_create(&stream_));
    cuda("cudaEventCreateWithFlags", api_->event_create(&in_event_));
    cuda("cudaMalloc(barrier word)", api_->malloc(&barrier_word_, sizeof(float)));

    auto make_id = [this] {
      NcclIdBytes b;
      nccl("ncclGetUniqueId", api_->get_unique_id(&b));
      return b;
    };
    NcclIdBytes id = nranks_ == 1 || store == nullptr ? make_id() : share_nccl_id(*store, rank_, make_id);
    // A non-blocking communicator: every call returns at once; settle() bounds the wait.
    nccl("ncclCommInitRankConfig", api_->comm_init_rank(&comm_, nranks_, id, rank_));
  }
  void free_cuda() {
    if (scratch_ != nullptr) api_->free_async(scratch_, stream_);
    if (fp_dev_ != nullptr) api_->free(fp_dev_);
    if (fp_event_ != nullptr) api_->event_destroy(fp_event_);
    fp_dev_ = nullptr;
    fp_event_ = nullptr;
    if (barrier_word_ != nullptr) api_->free(barrier_word_);
    if (in_event_ != nullptr) api_->event_destroy(in_event_);
    if (stream_ != nullptr) api_->stream_destroy(stream_);
    scratch_ = barrier_word_ = nullptr;
    in_event_ = nullptr;
    stream_ = nullptr;
  }

 public:
  int rank() const override { return rank_; }
  int size() const override { return nranks_; }
  std::string transport_name() const override { return "nccl"; }
  bool takes_host_buffers() const override { return false; }

  void all_reduce(void* buf, size_t count, DType dt, ReduceOp op) override {
    all_reduce_async(buf, count, dt, op, {})->wait();
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType dt, ReduceOp op) override {
    reduce_scatter_async(in, out, count, dt, op, {})->wait();
  }
  void all_gather(const void* shard, void* out, size_t count, DType dt) override {
    all_gather_async(shard, out, count, dt, {})->wait();
  }
  void broadcast(void* buf, size_t count, DType dt, int root) override {
    broadcast_async(buf, count, dt, root, {})->wait();
  }
  void barrier() override {
    issue(make_fingerprint(CollectiveKind::barrier, 0, DType::f32, -1, -1), 0, {}, [&] {
      nccl("ncclAllReduce", api_->all_reduce(barrier_word_, barrier_word_, 1, DType::f32, comm_, stream_));
    })->wait();
  }

  WorkHandle all_reduce_async(void* buf, size_t count, DType dt, ReduceOp op, OnDone on_done) override {
    check_device(buf, count, "all_reduce", "buf");
    return issue(make_fingerprint(CollectiveKind::all_reduce, count, dt, int(op), -1), 2 * phase_bytes(count, dt),
                 std::move(on_done), [&] {
      if (count == 0) return;
      nccl("ncclAllReduce", api_->all_reduce(buf, buf, count, dt, comm_, stream_));
      if (op == ReduceOp::avg) api_->divide_by(buf, count, dt, nranks_, stream_);
    });
  }

  // NCCL's ReduceScatter gives every rank S = ceil(count/N) elements of an N*S input. When
  // N divides count that is shard_of's layout and runs in place or straight into out;
  // otherwise the input is copied into a zero-padded N*S scratch first.
  WorkHandle reduce_scatter_async(const void* in, void* out, size_t count, DType dt, ReduceOp op,
                                  OnDone on_done) override {
    const ShardRange mine = shard_of(count, nranks_, rank_);
    check_device(in, count, "reduce_scatter", "in");
    check_device(out, mine.count, "reduce_scatter", "out");
    return issue(make_fingerprint(CollectiveKind::reduce_scatter, count, dt, int(op), -1), phase_bytes(count, dt),
                 std::move(on_done), [&] {
      if (count == 0) return;
      const size_t esz = dtype_size(dt), S = (count + nranks_ - 1) / nranks_;
      if (S * nranks_ == count) {
        nccl("ncclReduceScatter", api_->reduce_scatter(in, out, S, dt, comm_, stream_));
      } else {
        char* pad = static_cast<char*>(scratch(S * nranks_ * esz));
        cuda("cudaMemcpyAsync", api_->memcpy_async(pad, in, count * esz, stream_));
        cuda("cudaMemsetAsync", api_->memset_async(pad + count * esz, 0, (S * nranks_ - count) * esz, stream_));
        char* my_part = pad + rank_ * S * esz;
        nccl("ncclReduceScatter", api_->reduce_scatter(pad, my_part, S, dt, comm_, stream_));
        if (mine.count > 0) cuda("cudaMemcpyAsync", api_->memcpy_async(out, my_part, mine.count * esz, stream_));
      }
      if (op == ReduceOp::avg) api_->divide_by(out, mine.count, dt, nranks_, stream_);
    });
  }

  WorkHandle all_gather_async(const void* shard, void* out, size_t count, DType dt, OnDone on_done) override {
    const ShardRange mine = shard_of(count, nranks_, rank_);
    check_device(shard, mine.count, "all_gather", "shard");
    check_device(out, count, "all_gather", "out");
    return issue(make_fingerprint(CollectiveKind::all_gather, count, dt, -1, -1), phase_bytes(count, dt),
                 std::move(on_done), [&] {
      if (count == 0) return;
      const size_t esz = dtype_size(dt), S = (count + nranks_ - 1) / nranks_;
      if (S * nranks_ == count) {
        nccl("ncclAllGather", api_->all_gather(shard, out, S, dt, comm_, stream_));
      } else {
        char* pad = static_cast<char*>(scratch(S * nranks_ * esz));
        char* my_part = pad + rank_ * S * esz;
        if (mine.count > 0) cuda("cudaMemcpyAsync", api_->memcpy_async(my_part, shard, mine.count * esz, stream_));
        nccl("ncclAllGather", api_->all_gather(my_part, pad, S, dt, comm_, stream_));
        cuda("cudaMemcpyAsync", api_->memcpy_async(out, pad, count * esz, stream_));
      }
    });
  }

  WorkHandle broadcast_async(void* buf, size_t count, DType dt, int root, OnDone on_done) override {
    RZ_CHECK(root >= 0 && root < nranks_, "broadcast: root %d is not a rank (0..%d)", root, nranks_ - 1);
    check_device(buf, count, "broadcast", "buf");
    const uint64_t bytes = rank_ == root ? 0 : static_cast<uint64_t>(count) * dtype_size(dt);
    return issue(make_fingerprint(CollectiveKind::broadcast, count, dt, -1, root), bytes, std::move(on_done), [&] {
      if (count == 0) return;
      nccl("ncclBroadcast", api_->broadcast(buf, buf, count, dt, root, comm_, stream_));
    });
  }

  const CommStats& stats() const override { return stats_; }
  void reset_stats() override { stats_.reset(); }
  FlightRecorder* flight_recorder() override { return &flight_; }

 private:
  // ---- checks: every CUDA and NCCL result, named with this rank ----
  void cuda(const char* what, const std::string& error) const {
    if (!error.empty()) throw Error(strfmt("%s failed: %s", what, error.c_str()));
  }
  // A non-blocking communicator may answer ncclInProgress: the call is not finished (for a
  // collective: not yet on the stream) until the async state turns to success, so it is
  // settled before anything else goes on the stream or to NCCL.
  void nccl(const char* what, const NcclStatus& r) {
    if (r.code == NcclStatus::success) return;
    if (r.code == NcclStatus::in_progress) return settle(what);
    throw Error(strfmt("%s failed: %s", what, r.error.c_str()));
  }
  // Waits, bounded by the timeout, until the non-blocking communicator has no call in
  // progress (init, an enqueue that is still connecting, finalize).
  void settle(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts_.timeout_s);
    for (;;) {
      const NcclStatus st = api_->async_error(comm_);
      if (st.code == NcclStatus::success) return;
      if (st.code == NcclStatus::failed) throw Error(strfmt("%s failed: %s", what, st.error.c_str()));
      if (std::chrono::steady_clock::now() >= deadline)
        throw Error(strfmt("%s still in progress after %.0f s (a peer is gone or not started; raise "
                           "--comm-timeout or RINGZERO_COMM_TIMEOUT if it is just slow)",
                           what, opts_.timeout_s));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  void abort_comm() {
    if (comm_ != nullptr) api_->abort(comm_);
    comm_ = nullptr;
  }
  void check_device(const void* p, size_t n, const char* op, const char* name) const {
    if (n == 0) return;
    RZ_CHECK(p != nullptr, "%s: %s is null but %zu elements were asked for", op, name, n);
    RZ_CHECK(api_->is_device_memory(p),
             "comm nccl: rank %d: %s: %s is not device memory (the nccl backend works on GPU buffers: --device cuda)",
             rank_, op, name);
  }
  uint64_t phase_bytes(size_t count, DType dt) const {
    return static_cast<uint64_t>(count - shard_of(count, nranks_, rank_).count) * dtype_size(dt);
  }
  // Grow-only device scratch, used on the comm stream only; allocated and freed in stream
  // order (cudaMallocAsync / cudaFreeAsync), so growing never waits for queued work.
  void* scratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return scratch_;
    if (scratch_ != nullptr) {
      api_->free_async(scratch_, stream_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    cuda("cudaMallocAsync(scratch)", api_->malloc_async(&scratch_, bytes, stream_));
    scratch_bytes_ = bytes;
    return scratch_;
  }

  // --comm-debug: every rank's fingerprint to everyone (an ncclAllGather of 32 bytes each,
  // comm/debug/fingerprint.h), compared on the host before the collective is enqueued; the wait
  // for it is bounded by the timeout. Debug mode only: it costs a host round trip.
  void check_fingerprint(const Fingerprint& fp) {
    const size_t n = sizeof(Fingerprint);
    static_assert(sizeof(Fingerprint) % sizeof(float) == 0, "fingerprints travel as fp32 words");
    if (fp_dev_ == nullptr) {
      cuda("cudaMalloc(fingerprints)", api_->malloc(&fp_dev_, n * (nranks_ + 1)));
      cuda("cudaEventCreateWithFlags(fingerprints)", api_->event_create(&fp_event_));
      fp_host_.assign(n * (nranks_ + 1), 0);
    }
    char* host = fp_host_.data();
    char* mine = static_cast<char*>(fp_dev_) + n * nranks_;
    std::memcpy(host + n * nranks_, &fp, n);
    // The 32 bytes travel as 8 fp32 words: an AllGather only copies them.
    cuda("cudaMemcpyAsync(fingerprint)", api_->copy_to_device_async(mine, host + n * nranks_, n, stream_));
    nccl("ncclAllGather(fingerprints)", api_->all_gather(mine, fp_dev_, n / sizeof(float), DType::f32, comm_, stream_));
    cuda("cudaMemcpyAsync(fingerprints)", api_->copy_to_host_async(host, fp_dev_, n * nranks_, stream_));
    cuda("cudaEventRecord(fingerprints)", api_->event_record(fp_event_, stream_));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts_.timeout_s);
    for (;;) {
      std::string error;
      if (api_->event_query(fp_event_, &error)) break;
      if (!error.empty()) cuda("the fingerprint exchange", error);
      settle("the fingerprint exchange");  // an NCCL error ends the wait
      if (std::chrono::steady_clock::now() >= deadline)
        throw Error(strfmt("timed out after %.0f s exchanging collective fingerprints (--comm-debug)", opts_.timeout_s));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::vector<Fingerprint> all(static_cast<size_t>(nranks_));
    std::memcpy(all.data(), host, n * nranks_);
    const int q = first_disagreeing_rank(all.data(), nranks_, rank_);
    if (q >= 0) throw FingerprintError(q, fp, all[static_cast<size_t>(q)]);
  }

  // Enqueues one collective on the comm stream after the input stream's work, and returns
  // its handle; the watchdog completes it. An error while enqueueing breaks the communicator.
  template <typename Enqueue>
  WorkHandle issue(Fingerprint fp, uint64_t bytes, OnDone on_done, Enqueue&& enqueue) {
    std::unique_lock<std::mutex> l(mu_);
    RZ_CHECK(broken_.empty(), "%s (the communicator is unusable after this error)", broken_.c_str());
    const CollectiveKind kind = static_cast<CollectiveKind>(fp.kind);
    fp.seq = flight_.issue(kind, static_cast<DType>(fp.dtype), fp.count, fp.op, fp.root, FlightRecorder::now_ns());
    auto work = std::make_shared<NcclWork>(kind, fp.seq, bytes, std::move(on_done));
    // --trace: the span's ends are stamps on the comm stream (device time on a GPU rank,
    // base/trace.h), from where the stream may start the collective to where it has done it.
    const bool traced = trace::enabled();
    trace::Stamp t0, t1;
    try {
      cuda("cudaSetDevice", api_->set_device(dev_));
      cuda("cudaEventRecord(input stream)", api_->event_record(in_event_, in_stream_));
      cuda("cudaStreamWaitEvent", api_->stream_wait_event(stream_, in_event_));
      if (traced) t0 = trace::stamp_on(rank_, stream_);
      if (opts_.debug && nranks_ > 1) check_fingerprint(fp);
      enqueue();
      if (traced) t1 = trace::stamp_on(rank_, stream_);
      // A stream-form OnDone queues its work right behind the collective; the handle's
      // event below then covers both.
      if (work->on_done.stream_form()) work->on_done.run_queued(stream_);
      cuda("cudaEventCreateWithFlags", api_->event_create(&work->event));
      cuda("cudaEventRecord(comm stream)", api_->event_record(work->event, stream_));
    } catch (const std::exception& e) {  // a CUDA or NCCL call, the fingerprints, or the stream-form OnDone
      trace::drop(t0);
      trace::drop(t1);
      if (work->event != nullptr) api_->event_destroy(work->event);
      const auto* fe = dynamic_cast<const FingerprintError*>(&e);
      FlightMismatch m;
      if (fe != nullptr) m = flight_mismatch(fe->mine, fe->theirs, fe->peer);
      break_locked(*work, e.what(), fe != nullptr ? &m : nullptr);
      throw Error(broken_);
    }
    if (traced)
      trace::span(rank_, trace::Track::comm, collective_name(kind), t0, t1,
                  comm_span_args(bytes, fp.count, static_cast<DType>(fp.dtype), fp.seq, trace::bucket()));
    work->issued = std::chrono::steady_clock::now();
    flight_.start(work->seq, FlightRecorder::now_ns());  // on the comm stream: NCCL's progress is not visible
    if (pending_.empty()) front_since_ = work->issued;
    pending_.push_back(work);
    cv_.notify_all();
    return work;
  }

  // The first error: abort NCCL (so the peers' collectives fail too) and fail every
  // pending handle with one message naming this rank.
  void break_locked(const NcclWork& at, const std::string& what, const FlightMismatch* mismatch = nullptr) {
    if (broken_.empty()) {
      broken_ = strfmt("rank %d: %s #%llu (nccl): %s", rank_, collective_name(at.kind),
                       static_cast<unsigned long long>(at.seq), what.c_str());
      const std::string record = flight_.fail(at.seq, broken_, mismatch != nullptr ? mismatch->other_rank : -1, mismatch);
      if (!record.empty()) broken_ += strfmt(" (flight record: %s)", record.c_str());
    }
    abort_comm();
    for (auto& w : pending_) {
      if (w->event != nullptr) api_->event_destroy(w->event);
      w->finish(std::make_exception_ptr(Error(broken_)));
    }
    pending_.clear();
  }

  // Completes handles in issue order; aborts on an NCCL error or a handle past the timeout.
  void watchdog_main() {
    (void)api_->set_device(dev_);
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      if (pending_.empty()) {
        if (stop_) return;
        cv_.wait(l, [&] { return stop_ || !pending_.empty(); });
        continue;
      }
      std::shared_ptr<NcclWork> w = pending_.front();
      std::string stream_error;
      if (api_->event_query(w->event, &stream_error)) {
        pending_.pop_front();
        const auto now = std::chrono::steady_clock::now();
        front_since_ = now;
        CommCounters& c = stats_.by_kind[static_cast<int>(w->kind)];
        c.calls += 1;
        c.bytes_sent += w->bytes;
        c.bytes_recv += w->bytes;
        c.seconds += std::chrono::duration<double>(now - w->issued).count();
        flight_.done(w->seq, FlightRecorder::now_ns());
        api_->event_destroy(w->event);
        l.unlock();
        std::exception_ptr err;
        try {
          if (w->on_done && !w->on_done.stream_form()) w->on_done.run_after();
        } catch (...) {
          err = std::current_exception();
        }
        w->finish(err);
        l.lock();
        continue;
      }
      std::string fault;
      if (!stream_error.empty()) {
        fault = strfmt("the comm stream failed: %s", stream_error.c_str());
      } else {
        const NcclStatus st = api_->async_error(comm_);
        if (st.code == NcclStatus::failed) {
          fault = strfmt("NCCL reported %s", st.error.c_str());
        } else if (std::chrono::steady_clock::now() - front_since_ >
                   std::chrono::duration<double>(opts_.timeout_s)) {
          fault = strfmt("timed out after %.0f s waiting for the other ranks (a peer died or stopped; raise "
                         "--comm-timeout or RINGZERO_COMM_TIMEOUT if a rank is just slow)",
                         opts_.timeout_s);
        }
      }
      if (!fault.empty()) {
        break_locked(*w, fault);
        continue;
      }
      cv_.wait_for(l, std::chrono::microseconds(100));
    }
  }

  std::unique_ptr<NcclCalls> api_;  // the library's calls, or the simulated device's
  int rank_, nranks_;
  int dev_ = 0;
  CommOptions opts_;
  std::shared_ptr<void> keep_alive_;
  void* comm_ = nullptr;       // ncclComm_t
  void* stream_ = nullptr;     // the comm stream (non-blocking)
  void* in_stream_ = nullptr;  // where inputs are produced (null: legacy default stream)
  void* in_event_ = nullptr;
  void* barrier_word_ = nullptr;      // (1) float on the device
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  CommStats stats_;
  FlightRecorder flight_;             // also numbers the collectives (issue order)
  std::string broken_;
  void* fp_dev_ = nullptr;            // --comm-debug: (N + 1) fingerprints on the device
  void* fp_event_ = nullptr;          // after their copy back to fp_host_
  std::vector<char> fp_host_;         // the same on the host (mine last)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<NcclWork>> pending_;
  std::chrono::steady_clock::time_point front_since_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const RankEnv& env, const CommOptions& options, StoreClient* store,
                                                     std::shared_ptr<void> keep_alive, std::unique_ptr<NcclCalls> calls) {
  CommOptions opts = resolve_comm_options(options);
  if (calls == nullptr) calls = make_cuda_nccl_calls();
  return std::make_unique<NcclCommunicator>(env, opts, store, std::move(keep_alive), std::move(calls));
}

}  // namespace rz
