// comm/debug/fault_injection.cpp: TEST ONLY (see fault_injection.h).
#include "comm/debug/fault_injection.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/trace.h"
#include "comm/debug/flight_recorder.h"

namespace rz {

namespace {

struct Fault {
  bool skip = false;  // else: half the count
  int rank = -1;
  long step = -1, bucket = -1;
};

// A gradient collective the fault hits: every call forwards to the wrapped communicator,
// except the one bucket of the one step, which is dropped or shortened.
class FaultyCommunicator final : public Communicator {
 public:
  FaultyCommunicator(std::unique_ptr<Communicator> c, Fault f) : c_(std::move(c)), f_(f) {}

  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  std::string transport_name() const override { return c_->transport_name(); }
  bool reads_shared_memory() const override { return c_->reads_shared_memory(); }
  void all_reduce(void* b, size_t n, DType dt, ReduceOp op) override { c_->all_reduce(b, n, dt, op); }
  void reduce_scatter(const void* in, void* out, size_t n, DType dt, ReduceOp op) override {
    c_->reduce_scatter(in, out, n, dt, op);
  }
  void all_gather(const void* s, void* out, size_t n, DType dt) override { c_->all_gather(s, out, n, dt); }
  void broadcast(void* b, size_t n, DType dt, int root) override { c_->broadcast(b, n, dt, root); }
  void barrier() override { c_->barrier(); }
  WorkHandle all_reduce_async(void* b, size_t n, DType dt, ReduceOp op, OnDone d) override {
    if (hit()) {
      if (f_.skip) return skipped(d);
      n /= 2;
    }
    return c_->all_reduce_async(b, n, dt, op, std::move(d));
  }
  WorkHandle reduce_scatter_async(const void* in, void* out, size_t n, DType dt, ReduceOp op, OnDone d) override {
    if (hit()) {
      if (f_.skip) return skipped(d);
      n /= 2;
    }
    return c_->reduce_scatter_async(in, out, n, dt, op, std::move(d));
  }
  WorkHandle all_gather_async(const void* s, void* out, size_t n, DType dt, OnDone d) override {
    return c_->all_gather_async(s, out, n, dt, std::move(d));
  }
  WorkHandle broadcast_async(void* b, size_t n, DType dt, int root, OnDone d) override {
    return c_->broadcast_async(b, n, dt, root, std::move(d));
  }
  const CommStats& stats() const override { return c_->stats(); }
  void reset_stats() override { c_->reset_stats(); }
  FlightRecorder* flight_recorder() override { return c_->flight_recorder(); }

 private:
  bool hit() {
    const char* p = comm_purpose();
    if (done_ || flight_step() != f_.step || trace::bucket() != f_.bucket || p == nullptr ||
        std::strcmp(p, "gradients") != 0)
      return false;
    done_ = true;
    std::fprintf(stderr, "ringzero: rank %d: RINGZERO_TEST_FAULT: %s gradient bucket %ld at step %ld\n", rank(),
                 f_.skip ? "skipping" : "halving the count of", f_.bucket, f_.step);
    return true;
  }
  WorkHandle skipped(const OnDone& d) {
    auto w = std::make_shared<FinishableWork>();
    if (d) d.run_after();
    w->finish(nullptr);
    return w;
  }

  std::unique_ptr<Communicator> c_;
  Fault f_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<Communicator> with_test_faults(std::unique_ptr<Communicator> comm) {
  const char* v = std::getenv("RINGZERO_TEST_FAULT");
  if (v == nullptr || *v == 0) return comm;
  Fault f;
  char kind[16] = {0};
  char tail = 0;
  const int n = std::sscanf(v, "%15[a-z-]:%d:%ld:%ld%c", kind, &f.rank, &f.step, &f.bucket, &tail);
  const std::string k = kind;
  RZ_CHECK(n == 4 && (k == "skip-bucket" || k == "count") && f.rank >= 0 && f.step >= 1 && f.bucket >= 0,
           "RINGZERO_TEST_FAULT: expected skip-bucket:RANK:STEP:BUCKET or count:RANK:STEP:BUCKET (a test hook), "
           "found '%s'",
           v);
  f.skip = k == "skip-bucket";
  if (comm->rank() != f.rank) return comm;
  return std::make_unique<FaultyCommunicator>(std::move(comm), f);
}

}  // namespace rz
