// Tests of the flight recorder (comm/debug/flight_recorder.h) and the doctor (comm/debug/flight_doctor.h)
// on thread ranks: what an entry holds (op, count, purpose, bucket, step, state, ring round),
// the bounded buffer, dumps on a timeout, on SIGUSR1 and from the watchdog, --comm-debug's
// mismatch in the record, and the doctor's verdicts on records with known answers.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/trace.h"
#include "comm/factory.h"
#include "comm/debug/flight_doctor.h"
#include "comm/debug/flight_recorder.h"
#include "test_comm_util.h"

namespace fs = std::filesystem;
using namespace rz;
using namespace rz::testing;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("rz_test_comm_flight_" + std::to_string(getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

FlightRecordFile record_of(Communicator& c, const std::string& reason = "test") {
  return parse_flight_record(c.flight_recorder()->to_json(reason), "in memory");
}

bool wait_for_file(const fs::path& p, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(p)) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

TEST_CASE("an entry holds op, dtype, count, purpose, bucket, step, progress and bytes") {
  const int N = 3;
  CommOptions o;
  o.segment_bytes = 4096;
  auto comms = make_thread_communicators(N, o);
  std::vector<FlightRecordFile> recs(N);
  auto errors = run_ranks(N, [&](int r) {
    Communicator& c = *comms[r];
    std::vector<float> buf(10000, 1.0f);
    set_flight_step(7);
    {
      CommPurpose p("loss");
      c.all_reduce(buf.data(), 1, DType::f32, ReduceOp::avg);
    }
    {
      trace::BucketLabel b(4);
      CommPurpose p("gradients");
      std::vector<float> out(shard_of(buf.size(), N, r).count);
      c.reduce_scatter_async(buf.data(), out.data(), buf.size(), DType::f32, ReduceOp::avg)->wait();
    }
    set_flight_step(-1);
    c.all_gather(buf.data() + shard_of(buf.size(), N, r).offset, buf.data(), buf.size(), DType::f32);
    recs[r] = record_of(c);
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  for (int r = 0; r < N; ++r) {
    const FlightRecordFile& f = recs[r];
    CHECK(f.rank == r);
    CHECK(f.world == N);
    CHECK(f.backend == "ring");
    CHECK(f.transport == "thread");
    CHECK(f.issued == 3);
    CHECK(f.done == 3);
    REQUIRE(f.entries.size() == 3);
    const FlightRecordEntry& loss = f.entries[0];
    CHECK(loss.seq == 1);
    CHECK(loss.op == "all_reduce");
    CHECK(loss.dtype == "fp32");
    CHECK(loss.redop == "avg");
    CHECK(loss.count == 1);
    CHECK(loss.purpose == "loss");
    CHECK(loss.step == 7);
    CHECK(loss.bucket == -1);
    CHECK(loss.state == "done");
    const FlightRecordEntry& g = f.entries[1];
    CHECK(g.op == "reduce_scatter");
    CHECK(g.purpose == "gradients");
    CHECK(g.bucket == 4);
    CHECK(g.count == 10000);
    CHECK(g.phase == "reduce_scatter");
    CHECK(g.round == N - 1);  // the last round it reached
    CHECK(g.rounds == N - 1);
    CHECK(g.t_issue > 0);
    CHECK(g.t_start >= g.t_issue);
    CHECK(g.t_done >= g.t_start);
    const FlightRecordEntry& ag = f.entries[2];
    CHECK(ag.op == "all_gather");
    CHECK(ag.purpose.empty());
    CHECK(ag.step == -1);
    CHECK(ag.phase == "all_gather");
  }
}

TEST_CASE("the buffer keeps the last K collectives; K = 0 keeps none but still numbers them") {
  for (size_t k : {size_t(4), size_t(0)}) {
    CommOptions o;
    o.flight_entries = k;
    auto comms = make_thread_communicators(2, o);
    std::vector<FlightRecordFile> recs(2);
    auto errors = run_ranks(2, [&](int r) {
      float x = 1.0f;
      for (int i = 0; i < 10; ++i) comms[r]->all_reduce(&x, 1, DType::f32, ReduceOp::sum);
      recs[r] = record_of(*comms[r]);
    });
    for (const auto& e : errors) REQUIRE(e.empty());
    CHECK(recs[0].issued == 10);
    if (k == 0) {
      CHECK(recs[0].entries.empty());
    } else {
      REQUIRE(recs[0].entries.size() == 4);
      CHECK(recs[0].entries.front().seq == 7);
      CHECK(recs[0].entries.back().seq == 10);
    }
  }
}

TEST_CASE("a comm timeout writes the record and the error names its file") {
  const fs::path dir = temp_dir("timeout");
  CommOptions o;
  o.timeout_s = 0.5;
  o.flight_dir = dir.string();
  auto comms = make_thread_communicators(2, o);
  auto errors = run_ranks(2, [&](int r) {
    std::vector<float> buf(64, 1.0f);
    CommPurpose p("loss");
    set_flight_step(3);
    if (r == 0) comms[0]->all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
  });
  INFO(errors[0]);
  CHECK(errors[0].find("rank 0: all_reduce #1: timed out") != std::string::npos);
  CHECK(errors[0].find("(flight record: " + (dir / "rank0.json").string() + ")") != std::string::npos);
  REQUIRE(fs::exists(dir / "rank0.json"));
  const FlightRecordFile f = parse_flight_record(slurp(dir / "rank0.json"), "rank0.json");
  CHECK(f.reason == "timeout");
  CHECK(f.error.find("timed out") != std::string::npos);
  CHECK(f.error_peer == 1);
  REQUIRE(f.entries.size() == 1);
  CHECK(f.entries[0].state == "failed");
  CHECK(f.entries[0].step == 3);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    files += 1;
    CHECK(e.path().extension() == ".json");
  }
  CHECK(files == 1);
  fs::remove_all(dir);
}

TEST_CASE("SIGUSR1 makes every live recorder write its record") {
  const fs::path dir = temp_dir("signal");
  CommOptions o;
  o.flight_dir = dir.string();
  auto comms = make_thread_communicators(2, o);
  run_ranks(2, [&](int r) {
    float x = 1.0f;
    comms[r]->all_reduce(&x, 1, DType::f32, ReduceOp::sum);
  });
  REQUIRE(raise(SIGUSR1) == 0);
  CHECK(wait_for_file(dir / "rank0.json", 5));
  CHECK(wait_for_file(dir / "rank1.json", 5));
  const FlightRecordFile f = parse_flight_record(slurp(dir / "rank1.json"), "rank1.json");
  CHECK(f.reason == "signal");
  CHECK(f.issued == 1);
  CHECK(f.done == 1);
  CHECK(f.where.find("idle") != std::string::npos);
  comms.clear();
  fs::remove_all(dir);
}

TEST_CASE("the watchdog writes the record of a collective that makes no progress, and it still completes") {
  const fs::path dir = temp_dir("watchdog");
  CommOptions o;
  o.flight_dir = dir.string();
  o.flight_watchdog_s = 0.3;
  o.segment_bytes = 4096;
  auto comms = make_thread_communicators(3, o);
  auto errors = run_ranks(3, [&](int r) {
    std::vector<float> buf(30000, 1.0f);
    trace::BucketLabel b(2);
    CommPurpose p("gradients");
    // Rank 1 stalls the others until the watchdog has written rank 0's record (0.3 s
    // without progress, seen by a thread that wakes every 250 ms). A fixed 1.5 s sleep was
    // not enough once under ASan on a loaded 2-core CI machine: the record came after the
    // collective had finished. Waiting on the file keeps the stall as long as it takes.
    if (r == 1) RANK_REQUIRE(wait_for_file(dir / "rank0.json", 60));
    comms[r]->all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
    RANK_REQUIRE(buf[123] == 3.0f);
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  REQUIRE(fs::exists(dir / "rank0.json"));
  const FlightRecordFile f = parse_flight_record(slurp(dir / "rank0.json"), "rank0.json");
  CHECK(f.reason == "watchdog");
  REQUIRE(f.entries.size() == 1);
  CHECK(f.entries[0].state == "started");
  CHECK(f.entries[0].phase == "reduce_scatter");
  CHECK(f.entries[0].round == 1);
  CHECK(f.where.find("all_reduce #1 (gradients, bucket 2), reduce_scatter round 1 of 2") != std::string::npos);
  CHECK(!fs::exists(dir / "rank1.json"));  // rank 1 was never inside a collective while it waited
  comms.clear();
  fs::remove_all(dir);
}

TEST_CASE("--comm-debug on the ring: the mismatch is in both records and the doctor reads it") {
  const fs::path dir = temp_dir("debug");
  CommOptions o;
  o.debug = true;
  o.timeout_s = 5;
  o.flight_dir = dir.string();
  auto comms = make_thread_communicators(2, o);
  auto errors = run_ranks(2, [&](int r) {
    std::vector<float> buf(100, 1.0f);
    comms[r]->all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
    comms[r]->all_reduce(buf.data(), r == 1 ? 50 : 100, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < 2; ++r) {
    INFO(errors[r]);
    CHECK(errors[r].find("collective mismatch") != std::string::npos);
    CHECK(errors[r].find("flight record") != std::string::npos);
  }
  const FlightRecordFile f = parse_flight_record(slurp(dir / "rank0.json"), "rank0.json");
  CHECK(f.reason == "mismatch");
  REQUIRE(f.has_mismatch);
  CHECK(f.mismatch.seq == 2);
  CHECK(f.mismatch.other_rank == 1);
  CHECK(f.mismatch.mine == "all_reduce(fp32, count 100, sum)");
  CHECK(f.mismatch.theirs == "all_reduce(fp32, count 50, sum)");
  const DoctorReport d = diagnose_flight_dir(dir.string());
  REQUIRE(!d.lines.empty());
  INFO(d.lines[0]);
  CHECK(d.lines[0].find("caught a collective mismatch at #2") != std::string::npos);
  CHECK(d.lines[0].find("disagree on the program") != std::string::npos);
  comms.clear();
  fs::remove_all(dir);
}

TEST_CASE("a process forked while a recorder lives drops the parent's and runs its own") {
#if defined(__SANITIZE_THREAD__)
  SUCCEED("ThreadSanitizer cannot follow a child that starts threads after a multi-threaded fork");
  return;
#endif
  auto comms = make_thread_communicators(2, CommOptions{});  // recorders and the dump thread live
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(20);      // a hang ends the child with SIGALRM, failing the check below
    comms.clear();  // the parent's recorders, destroyed here: no thread of this process to join
    auto mine = make_thread_communicators(2, CommOptions{});
    run_ranks(2, [&](int r) {
      float x = 1.0f;
      mine[r]->all_reduce(&x, 1, DType::f32, ReduceOp::sum);
    });
    mine.clear();  // the last recorder: its own dump thread is joined
    _exit(0);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}

// ---- the doctor on records built by hand ---------------------------------------------------

namespace {

FlightRecordEntry entry(uint64_t seq, const char* op, uint64_t count, int bucket, const char* state, int round = 0,
                        int rounds = 0, const char* phase = "") {
  FlightRecordEntry e;
  e.seq = seq;
  e.op = op;
  e.dtype = "bf16";
  e.redop = std::string(op) == "all_gather" ? "" : "avg";
  e.count = count;
  e.purpose = "gradients";
  e.bucket = bucket;
  e.step = 112;
  e.state = state;
  e.round = round;
  e.rounds = rounds;
  e.phase = phase;
  return e;
}

FlightRecordFile record(int rank, int world, std::vector<FlightRecordEntry> entries) {
  FlightRecordFile f;
  f.rank = rank;
  f.world = world;
  f.job = "j";
  f.entries = std::move(entries);
  f.issued = f.entries.empty() ? 0 : f.entries.back().seq;
  f.done = 0;
  for (const auto& e : f.entries)
    if (e.state == "done") f.done = e.seq;
  return f;
}

}  // namespace

TEST_CASE("doctor: a rank that never issued the collective the others wait in") {
  std::vector<FlightRecordFile> recs;
  for (int r : {0, 1, 3})
    recs.push_back(record(r, 4, {entry(1840, "all_reduce", 4096, 6, "done"),
                                 entry(1841, "all_reduce", 4096, 7, "started", 1, 3, "reduce_scatter")}));
  recs.push_back(record(2, 4, {entry(1840, "all_reduce", 4096, 6, "done")}));
  const DoctorReport d = diagnose_flight_records(recs);
  REQUIRE(!d.lines.empty());
  CHECK(d.lines[0] == "rank 2 never issued all_reduce #1841 (gradients, bucket 7, step 112); ranks 0, 1, and 3 wait "
                      "in it, reduce_scatter round 1 of 3");
}

TEST_CASE("doctor: a rank that left no record, and the timeouts that name it") {
  std::vector<FlightRecordFile> recs;
  for (int r : {0, 2}) {
    recs.push_back(record(r, 3, {entry(40, "all_reduce", 4096, 1, "done"),
                                 entry(41, "all_reduce", 4096, 0, "failed", 1, 2, "reduce_scatter")}));
    recs.back().error = strfmt("rank %d: all_reduce #41: timed out after 3 s waiting for rank 1 to send data", r);
    recs.back().error_peer = 1;
  }
  const DoctorReport d = diagnose_flight_records(recs);
  REQUIRE(d.lines.size() >= 2);
  CHECK(d.lines[0].find("rank 1 left no record") == 0);
  CHECK(d.lines[0].find("in all_reduce #41 (gradients, bucket 0, step 112); ranks 0 and 2 wait in it, reduce_scatter "
                        "round 1 of 2") != std::string::npos);
  CHECK(d.lines[1].find("rank 0's error: rank 0: all_reduce #41: timed out after 3 s waiting for rank 1") == 0);
}

TEST_CASE("doctor: ranks that disagree on the count, and a rank that skipped a bucket") {
  SECTION("another count") {
    std::vector<FlightRecordFile> recs = {
        record(0, 3, {entry(77, "reduce_scatter", 1048576, 3, "failed")}),
        record(1, 3, {entry(77, "reduce_scatter", 524288, 3, "failed")}),
        record(2, 3, {entry(77, "reduce_scatter", 1048576, 3, "failed")}),
    };
    const DoctorReport d = diagnose_flight_records(recs);
    REQUIRE(d.lines.size() >= 2);
    CHECK(d.lines[0] == "rank 1 issued reduce_scatter #77 (gradients, bucket 3, step 112) with 524,288 bf16 elements; "
                        "ranks 0 and 2 issued reduce_scatter #77 (gradients, bucket 3, step 112) with 1,048,576 bf16 "
                        "elements: the ranks disagree on the program");
    CHECK(d.lines[1] == "rank 1 sent 524,288 elements where ranks 0 and 2 sent 1,048,576");
  }
  SECTION("a skipped bucket") {
    auto full = [](int r) {
      return record(r, 3, {entry(10, "all_reduce", 1000, 2, "done"), entry(11, "all_reduce", 900, 3, "failed")});
    };
    std::vector<FlightRecordFile> recs = {full(0), full(2),
                                          record(1, 3, {entry(10, "all_reduce", 900, 3, "failed")})};
    const DoctorReport d = diagnose_flight_records(recs);
    REQUIRE(d.lines.size() >= 2);
    CHECK(d.lines[0].find("rank 1 issued all_reduce #10 (gradients, bucket 3, step 112) with 900 bf16 elements; ranks "
                          "0 and 2 issued all_reduce #10 (gradients, bucket 2, step 112) with 1,000") == 0);
    CHECK(d.lines[1] == "rank 1 skipped all_reduce #10 (gradients, bucket 2, step 112): its #10 is the others' #11");
  }
}

TEST_CASE("doctor: records that are not flight records are skipped with a reason") {
  CHECK_THROWS_WITH(parse_flight_record("not json", "a.json"), Catch::Contains("a.json: not a JSON object"));
  CHECK_THROWS_WITH(parse_flight_record(R"({"format":"other"})", "b.json"),
                    Catch::Contains("not a ringzero flight record"));
  CHECK_THROWS_WITH(parse_flight_record(R"({"format":"ringzero-flight/1","rank":5,"world":2,"entries":[]})", "c.json"),
                    Catch::Contains("rank 5 of world 2 is out of range"));
  CHECK_THROWS_WITH(
      parse_flight_record(R"({"format":"ringzero-flight/1","rank":0,"world":1,"entries":[{"seq":"x"}]})", "d.json"),
      Catch::Contains("'seq' is not a number"));
  CHECK_THROWS_WITH(parse_flight_record(R"({"format":"ringzero-flight/1","rank":0,"world":1,"entries":[{"seq":2},{"seq":1}]})",
                                        "e.json"),
                    Catch::Contains("out of order"));
  CHECK_THROWS_WITH(parse_flight_record(R"({"format":"ringzero-flight/1","rank":0,"world":1,"issued":-3,"entries":[]})",
                                        "f.json"),
                    Catch::Contains("'issued' is negative"));
  const fs::path dir = temp_dir("bad");
  std::ofstream(dir / "rank0.json") << "{";
  const DoctorReport d = diagnose_flight_dir(dir.string());
  CHECK(d.records == 0);
  REQUIRE(d.warnings.size() == 1);
  CHECK(d.warnings[0].find("rank0.json") != std::string::npos);
  CHECK(diagnose_flight_dir((dir / "none").string()).lines.at(0).find("no such directory") != std::string::npos);
  fs::remove_all(dir);
}
