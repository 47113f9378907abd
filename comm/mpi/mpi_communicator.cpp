// comm/mpi/mpi_communicator.cpp: the Communicator over MPI (see mpi_communicator.h).
#include "comm/mpi/mpi_communicator.h"

#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <climits>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "base/trace.h"
#include "comm/ring/comm_thread.h"
#include "comm/debug/fingerprint.h"
#include "comm/debug/flight_recorder.h"
#include "comm/ring_communicator.h"

namespace rz {

namespace {

// ---- process-wide MPI state: initialized once, finalized with the last communicator ----

std::mutex g_mpi_mu;
int g_live = 0;             // communicators alive
bool g_we_initialized = false;
MPI_Op g_bf16_sum = MPI_OP_NULL;

// inout[i] = in[i] + inout[i] for bf16 words: fp32 add, rounded to bf16 (RNE), as each
// hop of the ring does.
void bf16_sum_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

std::string mpi_error_string(int rc) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return strfmt("MPI error code %d", rc);
  return std::string(msg, static_cast<size_t>(len));
}

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(strfmt("%s failed: %s", what, mpi_error_string(rc).c_str()));
}

void acquire_mpi() {
  std::lock_guard<std::mutex> l(g_mpi_mu);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  RZ_CHECK(!finalized, "comm mpi: MPI was already finalized in this process; it cannot be started twice");
  if (!inited) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    RZ_CHECK(rc == MPI_SUCCESS, "comm mpi: MPI_Init_thread failed (error %d); start the ranks with mpirun", rc);
    g_we_initialized = true;
    RZ_CHECK(provided >= MPI_THREAD_SERIALIZED,
             "comm mpi: this MPI library gives thread level %d, but ringzero calls MPI from its comm thread and "
             "needs MPI_THREAD_SERIALIZED (%d)",
             provided, static_cast<int>(MPI_THREAD_SERIALIZED));
  }
  if (g_bf16_sum == MPI_OP_NULL) mpi_check(MPI_Op_create(&bf16_sum_fn, 1, &g_bf16_sum), "MPI_Op_create(bf16 sum)");
  ++g_live;
}

// finalize = false when this rank is failing: MPI_Finalize would wait for ranks that are
// still inside a collective with us; exiting non-zero makes mpirun stop them instead.
void release_mpi(bool finalize) {
  std::lock_guard<std::mutex> l(g_mpi_mu);
  if (--g_live > 0 || !finalize) return;
  if (g_bf16_sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_sum);
  if (g_we_initialized) MPI_Finalize();
}

MPI_Datatype mpi_type(DType t) { return t == DType::bf16 ? MPI_UINT16_T : MPI_FLOAT; }

int as_int(size_t n, const char* what) {
  RZ_CHECK(n <= static_cast<size_t>(INT_MAX), "%s: %zu elements exceed MPI's int count (%d)", what, n, INT_MAX);
  return static_cast<int>(n);
}

// avg: the finished sum divided by N in fp32 on the rank that holds it, as the ring does.
void divide_in_place(void* buf, size_t n, DType dt, int N) {
  const float div = static_cast<float>(N);
  if (dt == DType::f32) {
    float* p = static_cast<float*>(buf);
    for (size_t i = 0; i < n; ++i) p[i] = p[i] / div;
  } else {
    bf16* p = static_cast<bf16*>(buf);
    for (size_t i = 0; i < n; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / div);
  }
}

using MpiWork = FinishableWork;

// What one collective does: start() posts the non-blocking call into *req; finish() runs
// after it completed (avg division). bytes: the ring-equivalent payload per rank.
struct Op {
  CollectiveKind kind;
  std::function<int(MPI_Comm, MPI_Request*)> start;
  std::function<void()> finish;
  uint64_t bytes = 0;
  Fingerprint fp = {};  // what --comm-debug compares; fp.seq is the flight recorder's number
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const RankEnv& env, const CommOptions& opts) : opts_(opts) {
    acquire_mpi();
    try {
      mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
      MPI_Comm_rank(comm_, &rank_);
      MPI_Comm_size(comm_, &nranks_);
      RZ_CHECK(!(nranks_ == 1 && env.world_size > 1),
               "comm mpi: this process is MPI's only rank but the environment says rank %d of %d: start the ranks "
               "with mpirun -np N (ringzero's own launcher, --nproc-per-node, does not start MPI ranks)",
               env.rank, env.world_size);
      RZ_CHECK(rank_ == env.rank && nranks_ == env.world_size,
               "comm mpi: MPI says rank %d of %d but the environment says rank %d of %d (RANK / WORLD_SIZE set "
               "by hand under mpirun?)",
               rank_, nranks_, env.rank, env.world_size);
      flight_.configure(rank_, nranks_, "mpi", opts_);
    } catch (...) {
      if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
      release_mpi(true);
      throw;
    }
  }

  ~MpiCommunicator() override {
    comm_thread_.stop();  // finishes what was queued, in order
    const bool healthy = broken_.empty() && std::uncaught_exceptions() == 0;
    if (healthy && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    release_mpi(healthy);
  }

  int rank() const override { return rank_; }
  int size() const override { return nranks_; }
  std::string transport_name() const override { return "mpi"; }

  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
    run_blocking(make_all_reduce(buf, count, dtype, op));
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) override {
    run_blocking(make_reduce_scatter(in, out, count, dtype, op));
  }
  void all_gather(const void* shard, void* out, size_t count, DType dtype) override {
    run_blocking(make_all_gather(shard, out, count, dtype));
  }
  void broadcast(void* buf, size_t count, DType dtype, int root) override {
    run_blocking(make_broadcast(buf, count, dtype, root));
  }
  void barrier() override {
    Op o{CollectiveKind::barrier, [](MPI_Comm c, MPI_Request* r) { return MPI_Ibarrier(c, r); }, {}, 0,
         make_fingerprint(CollectiveKind::barrier, 0, DType::f32, -1, -1)};
    run_blocking(std::move(o));
  }

  WorkHandle all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op, OnDone on_done) override {
    return enqueue(make_all_reduce(buf, count, dtype, op), std::move(on_done));
  }
  WorkHandle reduce_scatter_async(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                  OnDone on_done) override {
    return enqueue(make_reduce_scatter(in, out, count, dtype, op), std::move(on_done));
  }
  WorkHandle all_gather_async(const void* shard, void* out, size_t count, DType dtype, OnDone on_done) override {
    return enqueue(make_all_gather(shard, out, count, dtype), std::move(on_done));
  }
  WorkHandle broadcast_async(void* buf, size_t count, DType dtype, int root, OnDone on_done) override {
    return enqueue(make_broadcast(buf, count, dtype, root), std::move(on_done));
  }

  const CommStats& stats() const override { return stats_; }
  void reset_stats() override { stats_.reset(); }
  FlightRecorder* flight_recorder() override { return &flight_; }

 private:
  MPI_Op sum_op(DType dt) const { return dt == DType::bf16 ? g_bf16_sum : MPI_SUM; }

  // Element counts and displacements of every rank's shard, for the v-collectives.
  void shard_layout(size_t count, std::vector<int>& counts, std::vector<int>& displs, const char* what) const {
    counts.resize(nranks_);
    displs.resize(nranks_);
    for (int q = 0; q < nranks_; ++q) {
      ShardRange s = shard_of(count, nranks_, q);
      counts[q] = as_int(s.count, what);
      displs[q] = as_int(s.offset, what);
    }
  }

  uint64_t phase_bytes(size_t count, DType dt) const {
    return static_cast<uint64_t>(count - shard_of(count, nranks_, rank_).count) * dtype_size(dt);
  }

  Op make_all_reduce(void* buf, size_t count, DType dt, ReduceOp op) {
    RZ_CHECK(buf != nullptr || count == 0, "all_reduce: buf is null but %zu elements were asked for", count);
    const int n = as_int(count, "all_reduce");
    const MPI_Op mop = sum_op(dt);
    const int N = nranks_;
    Op o{CollectiveKind::all_reduce,
         [=](MPI_Comm c, MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_type(dt), mop, c, r); },
         [=] { if (op == ReduceOp::avg) divide_in_place(buf, count, dt, N); }, 2 * phase_bytes(count, dt),
         make_fingerprint(CollectiveKind::all_reduce, count, dt, static_cast<int>(op), -1)};
    return o;
  }

  Op make_reduce_scatter(const void* in, void* out, size_t count, DType dt, ReduceOp op) {
    const size_t mine = shard_of(count, nranks_, rank_).count;
    RZ_CHECK(in != nullptr || count == 0, "reduce_scatter: in is null but %zu elements were asked for", count);
    RZ_CHECK(out != nullptr || mine == 0, "reduce_scatter: out is null but %zu elements were asked for", mine);
    auto counts = std::make_shared<std::vector<int>>(), displs = std::make_shared<std::vector<int>>();
    shard_layout(count, *counts, *displs, "reduce_scatter");
    const MPI_Op mop = sum_op(dt);
    const int N = nranks_;
    // MPI's receive buffer must be valid even when this rank's shard is empty.
    auto scratch = std::make_shared<uint32_t>(0);
    Op o{CollectiveKind::reduce_scatter,
         [=](MPI_Comm c, MPI_Request* r) {
           void* dst = mine > 0 ? out : scratch.get();
           return MPI_Ireduce_scatter(in, dst, counts->data(), mpi_type(dt), mop, c, r);
         },
         [=] { if (op == ReduceOp::avg) divide_in_place(out, mine, dt, N); }, phase_bytes(count, dt),
         make_fingerprint(CollectiveKind::reduce_scatter, count, dt, static_cast<int>(op), -1)};
    return o;
  }

  Op make_all_gather(const void* shard, void* out, size_t count, DType dt) {
    const ShardRange mine = shard_of(count, nranks_, rank_);
    RZ_CHECK(shard != nullptr || mine.count == 0, "all_gather: shard is null but %zu elements were asked for",
             mine.count);
    RZ_CHECK(out != nullptr || count == 0, "all_gather: out is null but %zu elements were asked for", count);
    auto counts = std::make_shared<std::vector<int>>(), displs = std::make_shared<std::vector<int>>();
    shard_layout(count, *counts, *displs, "all_gather");
    const size_t esz = dtype_size(dt);
    const bool in_place = shard == static_cast<const char*>(out) + mine.offset * esz;
    Op o{CollectiveKind::all_gather,
         [=](MPI_Comm c, MPI_Request* r) {
           const void* src = in_place ? MPI_IN_PLACE : shard;
           return MPI_Iallgatherv(src, static_cast<int>(mine.count), mpi_type(dt), out, counts->data(),
                                  displs->data(), mpi_type(dt), c, r);
         },
         {}, phase_bytes(count, dt), make_fingerprint(CollectiveKind::all_gather, count, dt, -1, -1)};
    return o;
  }

  Op make_broadcast(void* buf, size_t count, DType dt, int root) {
    RZ_CHECK(buf != nullptr || count == 0, "broadcast: buf is null but %zu elements were asked for", count);
    RZ_CHECK(root >= 0 && root < nranks_, "broadcast: root %d is not a rank (0..%d)", root, nranks_ - 1);
    const int n = as_int(count, "broadcast");
    const bool receives = rank_ != root;
    Op o{CollectiveKind::broadcast,
         [=](MPI_Comm c, MPI_Request* r) { return MPI_Ibcast(buf, n, mpi_type(dt), root, c, r); }, {},
         static_cast<uint64_t>(count) * dtype_size(dt) * (receives ? 1 : 0),
         make_fingerprint(CollectiveKind::broadcast, count, dt, -1, root)};
    return o;
  }

  // Progresses a posted request with MPI_Test until it completes, yielding between tests
  // so that ranks that share cores get to run; bounded by the timeout from t0.
  void wait_request(MPI_Request& req, std::chrono::steady_clock::time_point t0) {
    const auto deadline = t0 + std::chrono::duration<double>(opts_.timeout_s);
    for (unsigned i = 0;; ++i) {
      int flag = 0;
      mpi_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (flag) return;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() >= deadline)
        throw Error(strfmt("timed out after %.0f s waiting for the other ranks (raise --comm-timeout or "
                           "RINGZERO_COMM_TIMEOUT if a rank is just slow)",
                           opts_.timeout_s));
      if (i >= 64) sched_yield();
    }
  }

  // --comm-debug: every rank's fingerprint to everyone (comm/debug/fingerprint.h); the first rank
  // that disagrees with this one fails the collective before it is posted.
  void check_fingerprint(const Fingerprint& fp, std::chrono::steady_clock::time_point t0) {
    std::vector<Fingerprint> all(static_cast<size_t>(nranks_));
    MPI_Request req = MPI_REQUEST_NULL;
    mpi_check(MPI_Iallgather(&fp, sizeof fp, MPI_BYTE, all.data(), sizeof fp, MPI_BYTE, comm_, &req),
              "MPI_Iallgather(fingerprints)");
    wait_request(req, t0);
    const int q = first_disagreeing_rank(all.data(), nranks_, rank_);
    if (q >= 0) throw FingerprintError(q, fp, all[static_cast<size_t>(q)]);
  }

  // Posts the collective and waits for it (wait_request); the flight recorder sees its
  // start, and its end or failure; --trace, a comm-track span (host time). bucket: the
  // issuing thread's trace::bucket().
  void execute(const Op& o, uint64_t seq, int bucket) {
    RZ_CHECK(broken_.empty(), "%s (the communicator is unusable after this error)", broken_.c_str());
    auto t0 = std::chrono::steady_clock::now();
    flight_.start(seq, std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count());
    try {
      if (opts_.debug && nranks_ > 1) {
        Fingerprint fp = o.fp;
        fp.seq = seq;
        check_fingerprint(fp, t0);
      }
      if (nranks_ > 1 || o.kind != CollectiveKind::barrier) {
        MPI_Request req = MPI_REQUEST_NULL;
        mpi_check(o.start(comm_, &req), "posting the MPI call");
        wait_request(req, t0);
      }
      if (o.finish) o.finish();
    } catch (const Error& e) {
      broken_ = strfmt("rank %d: %s #%llu (mpi): %s", rank_, collective_name(o.kind),
                       static_cast<unsigned long long>(seq), e.what());
      const auto* fe = dynamic_cast<const FingerprintError*>(&e);
      FlightMismatch m;
      if (fe != nullptr) m = flight_mismatch(fe->mine, fe->theirs, fe->peer);
      const std::string record = flight_.fail(seq, broken_, fe != nullptr ? fe->peer : -1, fe != nullptr ? &m : nullptr);
      if (!record.empty()) broken_ += strfmt(" (flight record: %s)", record.c_str());
      throw Error(broken_);
    }
    const auto t1 = std::chrono::steady_clock::now();
    flight_.done(seq, std::chrono::duration_cast<std::chrono::nanoseconds>(t1.time_since_epoch()).count());
    CommCounters& c = stats_.by_kind[static_cast<int>(o.kind)];
    c.calls += 1;
    c.bytes_sent += o.bytes;
    c.bytes_recv += o.bytes;
    c.seconds += std::chrono::duration<double>(t1 - t0).count();
    if (trace::enabled()) {
      const double dur = std::chrono::duration<double, std::micro>(t1 - t0).count();
      trace::span(rank_, trace::Track::comm, collective_name(o.kind), trace::now_us() - dur, dur,
                  comm_span_args(o.bytes, o.fp.count, static_cast<DType>(o.fp.dtype), seq, bucket));
    }
  }

  uint64_t issue(const Op& o, int64_t t_ns = 0) {
    return flight_.issue(o.kind, static_cast<DType>(o.fp.dtype), o.fp.count, o.fp.op, o.fp.root, t_ns);
  }

  void run_blocking(Op o) {
    const uint64_t seq = issue(o);
    const int bucket = trace::bucket();
    comm_thread_.run_blocking([&] { execute(o, seq, bucket); });
  }

  WorkHandle enqueue(Op o, OnDone on_done) {
    const uint64_t seq = issue(o, FlightRecorder::now_ns());
    auto work = std::make_shared<MpiWork>();
    const int bucket = trace::bucket();
    comm_thread_.enqueue([this, o = std::move(o), on_done = std::move(on_done), work, seq, bucket] {
      std::exception_ptr err;
      try {
        execute(o, seq, bucket);
        if (on_done) on_done.run_after();
      } catch (...) {
        err = std::current_exception();
      }
      work->finish(err);  // before the communicator looks idle (comm_thread.h)
    });
    return work;
  }

  CommOptions opts_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, nranks_ = 1;
  CommStats stats_;
  FlightRecorder flight_;  // also numbers the collectives (issue order)
  std::string broken_;

  CommThread comm_thread_;  // stopped first in the destructor, while what its jobs use lives
};

}  // namespace

std::unique_ptr<Communicator> connect_mpi_communicator(const RankEnv& env, const CommOptions& options) {
  CommOptions opts = resolve_comm_options(options);
  return std::make_unique<MpiCommunicator>(env, opts);
}

}  // namespace rz
