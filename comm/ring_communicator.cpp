// comm/ring_communicator.cpp: issue order, async work, errors and stats around the ring.
#include "comm/ring_communicator.h"

#include <cmath>
#include <cstdlib>
#include <exception>

#include "base/clock.h"
#include "base/trace.h"

namespace rz {

namespace {

using RingWork = FinishableWork;

Fingerprint make_fp(CollectiveKind kind, size_t count, DType dt, int op, int root) {
  return make_fingerprint(kind, count, dt, op, root);
}

}  // namespace

struct RingCommunicator::Task {
  CollectiveKind kind;
  uint64_t seq;
  Fingerprint fp;
  Body body;
  OnDone on_done;
  std::shared_ptr<RingWork> work;
  std::shared_ptr<void> input_mark;  // cuda transport: the input stream at issue time
  bool host_path = false;            // cuda transport: host buffers, on the control channel
  int trace_bucket = -1;  // the issuing thread's trace::bucket(), for the comm track
};

CommOptions resolve_comm_options(const CommOptions& opts) {
  CommOptions o = opts;
  if (const char* t = std::getenv("RINGZERO_COMM_TIMEOUT"); t != nullptr && *t != 0 && o.timeout_s == CommOptions{}.timeout_s) {
    char* end = nullptr;
    double v = std::strtod(t, &end);
    RZ_CHECK(end != t && *end == 0 && std::isfinite(v) && v > 0,
             "RINGZERO_COMM_TIMEOUT: expected a positive number of seconds, found '%s'", t);
    o.timeout_s = v;
  }
  if (env_switch("RINGZERO_COMM_DEBUG", false)) o.debug = true;
  if (const char* f = std::getenv("RINGZERO_FLIGHT_DIR"); f != nullptr && *f != 0 && o.flight_dir.empty())
    o.flight_dir = f;
  RZ_CHECK(o.flight_watchdog_s >= 0, "flight watchdog: expected seconds >= 0, found %g", o.flight_watchdog_s);
  // Every wait has a deadline: "inf" or 1e300 would make it none (and overflow the clocks).
  RZ_CHECK(o.timeout_s > 0 && o.timeout_s <= kMaxCommTimeoutS,
           "comm timeout: expected a positive number of seconds up to %g (11 days), found %g", kMaxCommTimeoutS,
           o.timeout_s);
  RZ_CHECK(o.segment_bytes >= 1, "comm segment_bytes: expected at least 1, found %zu", o.segment_bytes);
  return o;
}

RingCommunicator::RingCommunicator(int rank, int nranks, std::string transport,
                                   std::unique_ptr<RingChannel> channel, const CommOptions& opts)
    : rank_(rank), nranks_(nranks), transport_(std::move(transport)), channel_(std::move(channel)),
      opts_(opts) {
  RZ_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "communicator: rank %d of %d is out of range", rank, nranks);
  RZ_CHECK(nranks == 1 || channel_ != nullptr, "communicator: %d ranks need a channel", nranks);
  flight_.configure(rank, nranks, "ring", opts_);
  flight_.set_transport(transport_);
}

RingCommunicator::~RingCommunicator() {
  comm_thread_.stop();  // finishes what was queued, in order
  if (channel_) channel_->close();
}

void RingCommunicator::execute(CollectiveKind kind, uint64_t seq, Fingerprint fp, const Body& body,
                               const std::shared_ptr<void>& input_mark, bool host_path) {
  RZ_CHECK(broken_.empty(), "%s (the communicator is unusable after this error)", broken_.c_str());
  RingContext ctx;
  const bool on_device = device_ != nullptr && !host_path;
  ctx.channel = host_path && host_channel_ != nullptr ? host_channel_ : channel_.get();
  ctx.rank = rank_;
  ctx.nranks = nranks_;
  ctx.segment_bytes = opts_.segment_bytes;
  ctx.observer = observer_;
  HostElements host(&work_);
  ctx.elements = on_device ? static_cast<RingElements*>(device_.get()) : &host;
  const auto t0 = Clock::now();
  flight_.start(seq, std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count());
  ctx.progress = flight_.progress_word(seq);
  try {
    if (on_device) device_->wait_input(input_mark);
    if (opts_.debug && nranks_ > 1) {
      fp.seq = seq;
      ring_check_fingerprint(ctx, fp);
    }
    body(ctx);
    if (on_device) device_->synchronize();  // finished here means finished on the GPU
  } catch (const Error& e) {
    broken_ = strfmt("rank %d: %s #%llu: %s", rank_, collective_name(kind), static_cast<unsigned long long>(seq), e.what());
    if (channel_) channel_->close();  // the neighbours fail at once (and write their records)
    const auto* pe = dynamic_cast<const PeerError*>(&e);
    const auto* fe = dynamic_cast<const FingerprintError*>(&e);
    FlightMismatch m;
    if (fe != nullptr) m = flight_mismatch(fe->mine, fe->theirs, fe->peer);
    const std::string record = flight_.fail(seq, broken_, pe != nullptr ? pe->peer : -1, fe != nullptr ? &m : nullptr);
    if (!record.empty()) broken_ += strfmt(" (flight record: %s)", record.c_str());
    throw Error(broken_);
  }
  const auto t1 = Clock::now();
  flight_.done(seq, std::chrono::duration_cast<std::chrono::nanoseconds>(t1.time_since_epoch()).count());
  CommCounters& c = stats_.by_kind[static_cast<int>(kind)];
  c.calls += 1;
  c.bytes_sent += ctx.bytes_sent;
  c.bytes_recv += ctx.bytes_recv;
  c.seconds += std::chrono::duration<double>(t1 - t0).count();
  if (opts_.trace_spans && trace::enabled()) trace_collective(kind, fp, seq, ctx.bytes_sent, t0);
}

void RingCommunicator::trace_collective(CollectiveKind kind, const Fingerprint& fp, uint64_t seq, uint64_t bytes_sent,
                                        std::chrono::steady_clock::time_point t0) const {
  const double dur = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const double end = trace::now_us();
  trace::span(rank_, trace::Track::comm, collective_name(kind), end - dur, dur,
              comm_span_args(bytes_sent, fp.count, static_cast<DType>(fp.dtype), seq, trace::bucket()));
}

void RingCommunicator::run_blocking(CollectiveKind kind, const Fingerprint& fp, Body body, bool host_path) {
  const std::shared_ptr<void> mark = device_ != nullptr && !host_path ? device_->mark_input() : nullptr;
  const uint64_t seq = flight_.issue(kind, static_cast<DType>(fp.dtype), fp.count, fp.op, fp.root);
  comm_thread_.run_blocking([&] { execute(kind, seq, fp, body, mark, host_path); });
}

WorkHandle RingCommunicator::enqueue(CollectiveKind kind, const Fingerprint& fp, Body body, OnDone on_done,
                                     bool host_path) {
  auto work = std::make_shared<RingWork>();
  std::shared_ptr<void> mark = device_ != nullptr && !host_path ? device_->mark_input() : nullptr;
  const uint64_t seq =
      flight_.issue(kind, static_cast<DType>(fp.dtype), fp.count, fp.op, fp.root, FlightRecorder::now_ns());
  Task task{kind, seq, fp, std::move(body), std::move(on_done), work, std::move(mark), host_path, trace::bucket()};
  comm_thread_.enqueue([this, task = std::move(task)] {
    std::exception_ptr err;
    trace::set_bucket(task.trace_bucket);
    try {
      execute(task.kind, task.seq, task.fp, task.body, task.input_mark, task.host_path);
      if (task.on_done) task.on_done.run_after();  // the stream form too, with stream null
    } catch (...) {
      err = std::current_exception();
    }
    // Finished before the communicator looks idle (comm_thread.h): a blocking call that
    // waited for the queue to drain finds every earlier handle done.
    task.work->finish(err);
  });
  return work;
}

// ---- argument checks and the public calls -------------------------------------------------

#define RZ_CHECK_BUF(p, n, name) \
  RZ_CHECK((p) != nullptr || (n) == 0, "%s: %s is null but %zu elements were asked for", what, name, size_t(n))

bool RingCommunicator::host_buffers(const char* op, std::initializer_list<std::pair<const void*, size_t>> bufs) const {
  if (device_ == nullptr) return false;
  int host = 0, dev = 0;
  for (auto [p, n] : bufs)
    if (p != nullptr && n > 0) (device_->is_host_memory(p) ? host : dev) += 1;
  RZ_CHECK(host == 0 || dev == 0,
           "rank %d: %s: host and GPU buffers in one collective (the cuda transport moves GPU buffers device to "
           "device, and host buffers over its host channel, not both at once)",
           rank_, op);
  return host > 0;
}

void RingCommunicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  const char* what = "all_reduce";
  RZ_CHECK_BUF(buf, count, "buf");
  run_blocking(CollectiveKind::all_reduce, make_fp(CollectiveKind::all_reduce, count, dtype, int(op), -1),
               [=](RingContext& ctx) { ring_all_reduce(ctx, buf, count, dtype, op); },
               host_buffers(what, {{buf, count}}));
}

void RingCommunicator::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
  const char* what = "reduce_scatter";
  RZ_CHECK_BUF(in, count, "in");
  RZ_CHECK_BUF(out, shard_of(count, nranks_, rank_).count, "out");
  run_blocking(CollectiveKind::reduce_scatter, make_fp(CollectiveKind::reduce_scatter, count, dtype, int(op), -1),
               [=](RingContext& ctx) { ring_reduce_scatter(ctx, in, out, count, dtype, op); },
               host_buffers(what, {{in, count}, {out, shard_of(count, nranks_, rank_).count}}));
}

void RingCommunicator::all_gather(const void* shard, void* out, size_t count, DType dtype) {
  const char* what = "all_gather";
  RZ_CHECK_BUF(shard, shard_of(count, nranks_, rank_).count, "shard");
  RZ_CHECK_BUF(out, count, "out");
  run_blocking(CollectiveKind::all_gather, make_fp(CollectiveKind::all_gather, count, dtype, -1, -1),
               [=](RingContext& ctx) { ring_all_gather(ctx, shard, out, count, dtype); },
               host_buffers(what, {{shard, shard_of(count, nranks_, rank_).count}, {out, count}}));
}

void RingCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  const char* what = "broadcast";
  RZ_CHECK_BUF(buf, count, "buf");
  RZ_CHECK(root >= 0 && root < nranks_, "broadcast: root %d is not a rank (0..%d)", root, nranks_ - 1);
  run_blocking(CollectiveKind::broadcast, make_fp(CollectiveKind::broadcast, count, dtype, -1, root),
               [=](RingContext& ctx) { ring_broadcast(ctx, buf, count, dtype, root); },
               host_buffers(what, {{buf, count}}));
}

void RingCommunicator::barrier() {
  run_blocking(CollectiveKind::barrier, make_fp(CollectiveKind::barrier, 0, DType::f32, -1, -1),
               [](RingContext& ctx) { ring_barrier(ctx); });
}

WorkHandle RingCommunicator::all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op, OnDone on_done) {
  const char* what = "all_reduce_async";
  RZ_CHECK_BUF(buf, count, "buf");
  return enqueue(CollectiveKind::all_reduce, make_fp(CollectiveKind::all_reduce, count, dtype, int(op), -1),
                 [=](RingContext& ctx) { ring_all_reduce(ctx, buf, count, dtype, op); }, std::move(on_done),
                 host_buffers(what, {{buf, count}}));
}

WorkHandle RingCommunicator::reduce_scatter_async(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                                  OnDone on_done) {
  const char* what = "reduce_scatter_async";
  RZ_CHECK_BUF(in, count, "in");
  RZ_CHECK_BUF(out, shard_of(count, nranks_, rank_).count, "out");
  return enqueue(CollectiveKind::reduce_scatter,
                 make_fp(CollectiveKind::reduce_scatter, count, dtype, int(op), -1),
                 [=](RingContext& ctx) { ring_reduce_scatter(ctx, in, out, count, dtype, op); }, std::move(on_done),
                 host_buffers(what, {{in, count}, {out, shard_of(count, nranks_, rank_).count}}));
}

WorkHandle RingCommunicator::all_gather_async(const void* shard, void* out, size_t count, DType dtype, OnDone on_done) {
  const char* what = "all_gather_async";
  RZ_CHECK_BUF(shard, shard_of(count, nranks_, rank_).count, "shard");
  RZ_CHECK_BUF(out, count, "out");
  return enqueue(CollectiveKind::all_gather, make_fp(CollectiveKind::all_gather, count, dtype, -1, -1),
                 [=](RingContext& ctx) { ring_all_gather(ctx, shard, out, count, dtype); }, std::move(on_done),
                 host_buffers(what, {{shard, shard_of(count, nranks_, rank_).count}, {out, count}}));
}

WorkHandle RingCommunicator::broadcast_async(void* buf, size_t count, DType dtype, int root, OnDone on_done) {
  const char* what = "broadcast_async";
  RZ_CHECK_BUF(buf, count, "buf");
  RZ_CHECK(root >= 0 && root < nranks_, "broadcast: root %d is not a rank (0..%d)", root, nranks_ - 1);
  return enqueue(CollectiveKind::broadcast, make_fp(CollectiveKind::broadcast, count, dtype, -1, root),
                 [=](RingContext& ctx) { ring_broadcast(ctx, buf, count, dtype, root); }, std::move(on_done),
                 host_buffers(what, {{buf, count}}));
}

}  // namespace rz
