// Tests of failures between processes: a rank killed (SIGKILL) in the middle of an
// AllReduce makes every other rank fail promptly with an error that names the rank, the
// collective and the dead peer, over shm (pid watch) and tcp (EOF / reset).
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>

#include "base/clock.h"
#include "comm/ring_communicator.h"
#include "test_comm_procs.h"
#include "test_comm_util.h"

using namespace rz;
using namespace rz::testing;

namespace {

// Kills its own process at round 2 of the ReduceScatter phase of the 3rd collective.
class KillAtRound final : public RingObserver {
 public:
  void on_round(const RingRound& r) override {
    if (r.phase == CollectiveKind::all_gather && r.round == 1 && !r.end) ++collectives_;
    if (collectives_ == 2 && r.phase == CollectiveKind::reduce_scatter && r.round == 2 && !r.end) raise(SIGKILL);
  }

 private:
  int collectives_ = 0;
};

void kill_mid_collective(const std::string& transport) {
  const int N = 4, victim = 2;
  CommOptions o;
  o.transport = parse_comm_transport(transport);
  o.timeout_s = 60;  // the survivors must not need the timeout
  o.segment_bytes = 4096;
  auto t0 = Clock::now();
  auto results = run_process_ranks(N, o, [&](Communicator& c) {
    KillAtRound killer;
    if (c.rank() == victim) dynamic_cast<RingCommunicator&>(c).set_observer(&killer);
    std::vector<float> buf(1 << 16, 1.0f);
    for (int k = 0; k < 5; ++k) c.all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
  }, 50.0);
  double secs = seconds_since(t0);
  REQUIRE(results[victim].status == 128 + SIGKILL);
  for (int r = 0; r < N; ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << results[r].error);
    CHECK(results[r].status == 1);
    CHECK(results[r].error.find(strfmt("rank %d: all_reduce #3: peer rank", r)) != std::string::npos);
    CHECK(results[r].error.find("closed the channel") != std::string::npos);
  }
  // The right neighbour of the victim names it.
  CHECK(results[victim + 1].error.find("peer rank 2 closed the channel") != std::string::npos);
  CHECK(secs < 10.0);
}

}  // namespace

TEST_CASE("shm: a rank killed mid-collective fails the others promptly") { kill_mid_collective("shm"); }

TEST_CASE("tcp: a rank killed mid-collective fails the others promptly") { kill_mid_collective("tcp"); }

TEST_CASE("shm: a rank killed before it posts to the gather board fails the others promptly") {
  // From N = 3 a small AllReduce meets on the board (comm/transport/gather_board.h), not the
  // ring: the survivors find the victim's pid gone (or a survivor's closed board) and name it.
  const int N = 3, victim = 2;
  CommOptions o;
  o.transport = CommTransport::shm;
  o.timeout_s = 60;  // the survivors must not need the timeout
  auto t0 = Clock::now();
  auto results = run_process_ranks(N, o, [&](Communicator& c) {
    for (int k = 0; k < 5; ++k) {
      if (c.rank() == victim && k == 2) raise(SIGKILL);
      float v = 1.0f;
      c.all_reduce(&v, 1, DType::f32, ReduceOp::sum);
    }
  }, 50.0);
  const double secs = seconds_since(t0);
  REQUIRE(results[victim].status == 128 + SIGKILL);
  for (int r = 0; r < N; ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << results[r].error);
    CHECK(results[r].status == 1);
    CHECK(results[r].error.find(strfmt("rank %d: all_reduce #3: ", r)) != std::string::npos);
    CHECK(results[r].error.find("rank 2") != std::string::npos);
  }
  CHECK(secs < 10.0);
}

TEST_CASE("a rank that never arrives makes the others time out with a clear error") {
  CommOptions o;
  o.transport = CommTransport::shm;
  o.timeout_s = 1.0;
  auto results = run_process_ranks(2, o, [&](Communicator& c) {
    std::vector<float> buf(16, 1.0f);
    if (c.rank() == 0) c.all_reduce(buf.data(), 16, DType::f32, ReduceOp::sum);
    else std::this_thread::sleep_for(std::chrono::seconds(3));
  });
  INFO(results[0].error);
  CHECK(results[0].status == 1);
  CHECK(results[0].error.find("rank 0: all_reduce #1: timed out after 1 s waiting for rank 1") != std::string::npos);
}
