// Real 3-rank training jobs that go wrong on purpose, and what the flight records say:
//   - a rank stopped with SIGSTOP mid-training: the others time out (3 s), write their
//     records, and the launcher prints the doctor's verdict naming the stopped rank;
//   - a rank made to skip one gradient bucket, and one made to send half the elements
//     (RINGZERO_TEST_FAULT, a test-only hook: comm/debug/fault_injection.h): the doctor names the
//     rank and the collective where the programs part, with and without --comm-debug.
// Each job ends within the comm timeout plus the launcher's grace, leaves no process and no
// shared-memory segment behind, and only complete .json records in its flight directory.
// Every command runs under timeout(1), so a hang fails the test instead of blocking CI.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/clock.h"
#include "comm/debug/flight_doctor.h"
#include "run_ringzero.h"

namespace fs = std::filesystem;
using rz::test::fresh_temp_dir;
using rz::test::children_of;
using rz::test::quote;

namespace {

fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_flight_");
  return dir;
}

// A small byte-level corpus, prepared once.
fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    for (int f = 0; f < 8; ++f) {
      std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 80; ++s) out << "rank " << (s * 7 + f) % 5 << " sends bucket " << (s * 3 + f) % 9 << ".\n";
    }
    const fs::path out = work_dir() / "data";
    auto r = rz::test::run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --out " +
                                    quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

// 3 ranks of the tiny preset, small buckets (several per step), a 3 s comm timeout.
std::string job_args(const fs::path& flight, const std::string& extra) {
  return "train --model tiny --data " + quote((data_dir() / "train_*.bin").string()) +
         " --nproc-per-node 3 --batch 2 --seq 16 --bucket-mb 0.02 --threads 1 --comm-timeout 3 --flight-dir " +
         quote(flight.string()) + " " + extra;
}

std::vector<std::string> shm_segments_of(const std::vector<pid_t>& pids) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    for (pid_t p : pids)
      if (e.path().filename().string().rfind("ringzero-" + std::to_string(p) + "-", 0) == 0)
        out.push_back(e.path().filename().string());
  return out;
}

// Only whole records in the flight directory: rank<R>.json, no temporaries.
void check_flight_dir_clean(const fs::path& flight) {
  for (const auto& e : fs::directory_iterator(flight)) {
    const std::string n = e.path().filename().string();
    INFO(n);
    CHECK(n.rfind("rank", 0) == 0);
    CHECK(e.path().extension() == ".json");
  }
}

}  // namespace

TEST_CASE("a rank stopped with SIGSTOP mid-training is named within the comm timeout, and nothing is left") {
  const fs::path d = work_dir() / "sigstop";
  const fs::path flight = d / "flight", log = d / "log.txt", metrics = d / "m.jsonl";
  fs::create_directories(d);
  const std::string cmd = "exec timeout -k 5 120 " + quote(RINGZERO_BINARY) + " " +
                          job_args(flight, "--steps 100000 --metrics " + quote(metrics.string())) + " > " +
                          quote(log.string()) + " 2>&1";
  pid_t sh = fork();
  REQUIRE(sh >= 0);
  if (sh == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto t0 = rz::Clock::now();
  auto elapsed = [&] { return rz::seconds_since(t0); };
  // Mid-training: a few steps are done.
  auto steps_done = [&] {
    std::ifstream in(metrics);
    int n = 0;
    std::string line;
    while (std::getline(in, line)) n += line.empty() ? 0 : 1;
    return n;
  };
  while (steps_done() < 5 && elapsed() < 90) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(steps_done() >= 5);
  const std::vector<pid_t> launcher = children_of(sh);  // sh exec'd timeout, which forked the launcher
  REQUIRE(launcher.size() == 1);
  const std::vector<pid_t> ranks = children_of(launcher[0]);  // forked in rank order
  REQUIRE(ranks.size() == 3);
  REQUIRE(kill(ranks[1], SIGSTOP) == 0);
  const auto stopped_at = rz::Clock::now();
  int st = 0;
  REQUIRE(waitpid(sh, &st, 0) == sh);
  const double stop_s = rz::seconds_since(stopped_at);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string out = ss.str();
  INFO(out);
  // 3 s to time out, then the launcher's 5 s grace for the stopped rank before SIGKILL.
  CHECK(stop_s < 25);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) != 0);
  CHECK(WEXITSTATUS(st) != 124);  // not the test's timeout
  CHECK(out.find("timed out after 3 s") != std::string::npos);
  CHECK(out.find("ringzero: the ranks' flight records (" + flight.string()) != std::string::npos);
  // The verdict: rank 1 named, ranks 0 and 2 waiting (each at its own ring round).
  const size_t v = out.find("  rank 1 left no record (stopped, killed, or stuck outside ringzero's collectives); in ");
  REQUIRE(v != std::string::npos);
  const std::string verdict = out.substr(v, out.find('\n', v) - v);
  // Ranks 0 and 2 wait in it, or one of them already in the next one (rank 1 stopped after
  // its part of a small collective was out).
  CHECK((verdict.find("ranks 0 and 2 wait in it") != std::string::npos ||
         (verdict.find("rank 0") != std::string::npos && verdict.find("rank 2") != std::string::npos)));
  CHECK(out.find("'s error: rank ") != std::string::npos);
  CHECK(out.find("waiting for rank 1 to ") != std::string::npos);  // the error the doctor quotes names rank 1
  CHECK(fs::exists(flight / "rank0.json"));
  CHECK(fs::exists(flight / "rank2.json"));
  CHECK(!fs::exists(flight / "rank1.json"));
  check_flight_dir_clean(flight);
  // The stopped rank was killed and reaped; nothing is left in /dev/shm.
  for (pid_t p : ranks) CHECK(kill(p, 0) != 0);
  CHECK(shm_segments_of(ranks).empty());
  // `ringzero doctor` says the same afterwards.
  auto doc = rz::test::run_ringzero("doctor " + quote(flight.string()));
  INFO(doc.output);
  CHECK(doc.status == 0);
  CHECK(doc.output.find("2 flight record(s)") != std::string::npos);
  CHECK(doc.output.find("rank 1 left no record") != std::string::npos);
}

TEST_CASE("a rank that skips one bucket, or sends another count, is named with the collective where they part") {
  struct Case {
    const char* name;
    const char* fault;
    const char* extra;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"skip", "skip-bucket:1:3:1", "--strategy zero1",
       {"  rank 1 issued reduce_scatter #", "(gradients, bucket 2, step 3)", "(gradients, bucket 1, step 3)",
        ": the ranks disagree on the program", "  rank 1 skipped reduce_scatter #"}},
      {"count", "count:1:3:1", "--strategy ddp",
       {"  rank 1 issued all_reduce #", "ranks 0 and 2 issued all_reduce #", "(gradients, bucket 1, step 3)",
        ": the ranks disagree on the program", "  rank 1 sent "}},
      {"skip-debug", "skip-bucket:1:3:1", "--strategy ddp --comm-debug",
       {"caught a collective mismatch at #", "(--comm-debug)", "  rank 1 skipped all_reduce #"}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const fs::path flight = work_dir() / c.name / "flight";
      const auto t0 = rz::Clock::now();
      setenv("RINGZERO_TEST_FAULT", c.fault, 1);  // the launched ranks inherit it
      auto r = rz::test::run_ringzero(job_args(flight, std::string(c.extra) + " --steps 8"), 120);
      unsetenv("RINGZERO_TEST_FAULT");
      const double secs = rz::seconds_since(t0);
      INFO(r.output);
      CHECK(r.status != 0);
      CHECK(r.status != 124);
      CHECK(secs < 60);
      CHECK(r.output.find("RINGZERO_TEST_FAULT") != std::string::npos);
      for (const std::string& e : c.expect) CHECK(r.output.find(e) != std::string::npos);
      check_flight_dir_clean(flight);
      const rz::DoctorReport d = rz::diagnose_flight_dir(flight.string());
      CHECK(d.records == 3);
    }
  }
}
