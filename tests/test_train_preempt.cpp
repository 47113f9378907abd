// Preemption that saves, however the signal arrives (issue 40, section 2). A 2-rank zero2
// job on the tiny model is stopped by a signal delivered (a) to the launcher alone, (b) to
// one rank alone, (c) to the launcher and every rank at once (scancel, systemd, a cgroup
// stop), (d) twice within a second, and through timeout(1), which signals the launcher and
// then its own process group. Each must exit 128 + the signal with a complete checkpoint of
// its last step, and a resume from it must continue bitwise as an uninterrupted run does.
// A second request after the repeat window (base/stop_signal.h) stops the ranks at once, in
// the middle of a save made slow on purpose: the checkpoint being written is left without
// its COMPLETE marker and the previous one resumes.
//
// The learning rate is constant after warmup (--lr-floor 1), so a run of any --steps
// follows the same schedule: the stopped run resumes to step k + 3 and is compared with a
// fresh run of k + 3 steps.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/hostile_util.h"

namespace fs = std::filesystem;
using namespace rz::test::hostile;
using rz::test::quote;

namespace {

const std::string kJob = "--nproc-per-node 2 --strategy zero2 --lr-floor 1 ";

struct Job {
  fs::path dir, log, metrics;
  pid_t timeout_pid = -1;  // the timeout(1) the job runs under (spawn's shell exec'd into it)
  pid_t launcher = -1;
  std::vector<pid_t> ranks;
};

// Starts the job under timeout(1), env ("NAME=value ...") in its environment, and waits until
// it has trained three steps (so every rank is in the training loop).
Job start(const std::string& name, const std::string& extra, const std::string& env = "") {
  Job j;
  j.dir = work_dir() / ("preempt_" + name);
  fs::remove_all(j.dir);
  fs::create_directories(j.dir);
  j.log = j.dir / "log.txt";
  j.metrics = j.dir / "m.jsonl";
  const std::string cmd = "exec env " + (env.empty() ? std::string("-u NOTHING") : env) + " timeout -k 10 120 " +
                          quote(RINGZERO_BINARY) + " " +
                          tiny_args(kJob + "--steps 100000 --save-dir " + quote((j.dir / "ck").string()) +
                                    " --metrics " + quote(j.metrics.string()) + " " + extra) +
                          " > " + quote(j.log.string()) + " 2>&1";
  j.timeout_pid = fork();
  if (j.timeout_pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(wait_for([&] { return metric_steps(j.metrics).size() >= 3; }, 90));
  const std::vector<pid_t> l = children_of(j.timeout_pid);
  REQUIRE(l.size() == 1);
  j.launcher = l[0];
  j.ranks = children_of(j.launcher);
  REQUIRE(j.ranks.size() == 2);
  return j;
}

// The rank whose environment says RANK=r.
pid_t rank_pid(const Job& j, int r) {
  const std::string want = "RANK=" + std::to_string(r);
  for (pid_t p : j.ranks) {
    std::ifstream env("/proc/" + std::to_string(p) + "/environ");
    std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    for (size_t at = 0; at < all.size();) {
      const size_t end = all.find('\0', at);
      if (all.substr(at, end - at) == want) return p;
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  FAIL("no rank " << r);
  return -1;
}

// SIGNAL to the launcher and both ranks, back to back: every process of the job at once.
void signal_job(const Job& j, int sig) {
  kill(j.launcher, sig);
  for (pid_t p : j.ranks) kill(p, sig);
}

// The job's exit status, its output and its checkpoints' steps (complete ones).
struct Ended {
  int status = -1;
  std::string out;
  std::vector<int> complete;
  int last_step = 0;  // the last step in the metrics
};
Ended wait_end(const Job& j) {
  Ended e;
  int st = 0;
  REQUIRE(waitpid(j.timeout_pid, &st, 0) == j.timeout_pid);
  e.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  e.out = slurp(j.log);
  for (const std::string& s : complete_steps(j.dir / "ck")) e.complete.push_back(std::stoi(s.substr(5)));
  const std::vector<int> steps = metric_steps(j.metrics);
  e.last_step = steps.empty() ? 0 : steps.back();
  return e;
}

std::vector<nlohmann::json> metrics_of(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Resumes the job's save-dir to step k + 3 (k: its newest complete checkpoint) and checks
// steps k+1 .. k+3 and the final model bitwise against a fresh run of k + 3 steps.
void check_resumes_bitwise(const Job& j, int k) {
  const fs::path m2 = j.dir / "resumed.jsonl", mref = j.dir / "ref.jsonl";
  const std::string steps = " --steps " + std::to_string(k + 3);
  Result r = run(tiny_args(kJob + "--resume" + steps + " --save-dir " + quote((j.dir / "ck").string()) +
                           " --metrics " + quote(m2.string())));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("resumed from " + (j.dir / "ck").string() + "/step_" + [&] {
          char b[16];
          std::snprintf(b, sizeof b, "%08d", k);
          return std::string(b);
        }()) != std::string::npos);
  Result f = run(tiny_args(kJob + steps + " --save-dir " + quote((j.dir / "ref").string()) + " --metrics " +
                           quote(mref.string())));
  INFO(f.output);
  REQUIRE(f.status == 0);
  const auto a = metrics_of(mref), b = metrics_of(m2);
  REQUIRE(a.size() == static_cast<size_t>(k + 3));
  REQUIRE(b.size() == 3);
  for (int i = 0; i < 3; ++i) {
    INFO("step " << k + 1 + i);
    CHECK(b[i]["step"] == k + 1 + i);
    CHECK(b[i]["loss"].dump() == a[k + i]["loss"].dump());  // the shortest round-trip text: bitwise
    CHECK(b[i]["grad_norm"].dump() == a[k + i]["grad_norm"].dump());
  }
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", k + 3);
  CHECK(bytes_of(j.dir / "ck" / name / "model.bin") == bytes_of(j.dir / "ref" / name / "model.bin"));
}

// What every delivery must give: 128 + sig, one complete checkpoint at the last trained step,
// the line that says how to resume, and a bitwise resume.
void check_saved(const Job& j, const Ended& e, int sig) {
  INFO(e.out);
  CHECK(e.status == 128 + sig);
  REQUIRE(e.complete.size() == 1);
  CHECK(e.complete[0] == e.last_step);
  CHECK(e.out.find("run the same command with --resume") != std::string::npos);
  CHECK(e.out.find("killed") == std::string::npos);
  check_resumes_bitwise(j, e.complete[0]);
}

}  // namespace

TEST_CASE("(a) SIGTERM or SIGINT to the launcher alone saves, and the resume is bitwise") {
  for (int sig : {SIGTERM, SIGINT}) {
    INFO("signal " << sig);
    const Job j = start(sig == SIGTERM ? "a_term" : "a_int", "--save-every 100000");
    REQUIRE(kill(j.launcher, sig) == 0);
    check_saved(j, wait_end(j), sig);
  }
}

TEST_CASE("(b) SIGTERM to one rank alone saves, and the resume is bitwise") {
  const Job j = start("b", "--save-every 100000");
  REQUIRE(kill(rank_pid(j, 1), SIGTERM) == 0);
  const Ended e = wait_end(j);
  check_saved(j, e, SIGTERM);
  CHECK(e.out.find("rank 1 received SIGTERM") != std::string::npos);
}

TEST_CASE("(c) SIGTERM or SIGINT to the launcher and every rank at once saves, and the resume is bitwise") {
  for (int sig : {SIGTERM, SIGINT}) {
    INFO("signal " << sig);
    const Job j = start(sig == SIGTERM ? "c_term" : "c_int", "--save-every 100000");
    signal_job(j, sig);
    const Ended e = wait_end(j);
    check_saved(j, e, sig);
    CHECK(e.out.find("they finished their step and stopped") != std::string::npos);
  }
}

TEST_CASE("(d) the signal to every process twice within a second still saves a complete checkpoint") {
  const Job j = start("d", "--save-every 100000");
  signal_job(j, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  signal_job(j, SIGTERM);
  check_saved(j, wait_end(j), SIGTERM);
}

TEST_CASE("asked again after the repeat window, mid-save: stopped at once, never a torn checkpoint") {
  // Checkpoints every 3 steps; the save after the signal pauses 4 s midway (a test hook), and
  // the second signal comes 1.5 s after the first, past base/stop_signal.h's 1 s window.
  const Job j = start("twice", "--save-every 3", "RINGZERO_FAULT_STOP_SAVE_SLOW=4");
  REQUIRE(wait_for([&] { return !complete_steps(j.dir / "ck").empty(); }, 60));
  signal_job(j, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  signal_job(j, SIGTERM);
  const Ended e = wait_end(j);
  INFO(e.out);
  CHECK(e.status == 128 + SIGTERM);
  CHECK(e.out.find("were stopped at once when it came again") != std::string::npos);
  REQUIRE(!e.complete.empty());
  const int previous = e.complete.back();
  CHECK(previous % 3 == 0);
  CHECK(previous < e.last_step);  // the stop's own save did not complete ...
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", e.last_step);
  CHECK(!fs::exists(j.dir / "ck" / name / "COMPLETE"));  // ... and is not taken for a checkpoint
  check_resumes_bitwise(j, previous);
}

TEST_CASE("timeout(1) around the launcher: its signal to the launcher and then to its group saves") {
  // timeout relays a SIGTERM it receives exactly as it sends its own when the time is up:
  // to the launcher, then to its own process group (the launcher again); the ranks sit in
  // their own groups. The job has trained three steps by then, whatever the machine's load.
  const Job j = start("timeout", "--save-every 100000");
  REQUIRE(kill(j.timeout_pid, SIGTERM) == 0);
  check_saved(j, wait_end(j), SIGTERM);
}
