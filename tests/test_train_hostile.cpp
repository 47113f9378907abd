// Hostile and careless use of `ringzero train` and `prepare` (issue 11), each case a real
// process: a re-run prepare never leaves a mix of shards, resume refuses another shape, a
// used or unwritable --save-dir is caught before step 1, a failed save is retried, a damaged
// newest checkpoint points at the newest intact one, SIGTERM stops at a step boundary with a
// checkpoint, and a killed launcher takes its ranks with it.
// Every command runs under `timeout`, so a hang fails the test instead of blocking CI.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/run_ringzero.h"

namespace fs = std::filesystem;
using rz::test::fresh_temp_dir;
using rz::test::quote;

namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr together
};


Result run(const std::string& args, int timeout_s = 120, const std::string& env = "") {
  const std::string cmd = env + " timeout -k 5 " + std::to_string(timeout_s) + " " + quote(RINGZERO_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_hostile_");
  return dir;
}

fs::path write_text(const std::string& name, int files, int lines) {
  const fs::path text = work_dir() / name;
  fs::create_directories(text);
  uint64_t x = 12345;
  for (int f = 0; f < files; ++f) {
    std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
    for (int s = 0; s < lines; ++s) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      out << "the rank " << (x >> 60) << " sends chunk " << ((x >> 40) & 15) << ".\n";
    }
  }
  return text;
}

fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path out = work_dir() / "data";
    Result r = run("prepare --input " + quote(write_text("text", 20, 60).string()) +
                   " --tokenizer byte --val-fraction 0.1 --out " + quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

std::string tiny_args(const std::string& extra) {
  const fs::path d = data_dir();
  return "train --model tiny --data " + quote((d / "train_*.bin").string()) +
         " --batch 4 --seq 32 --lr 3e-3 --warmup 2 --bucket-mb 0.05 --threads 1 " + extra;
}

std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

std::vector<std::string> complete_steps(const fs::path& ck) {
  std::vector<std::string> out;
  if (fs::is_directory(ck))
    for (const auto& e : fs::directory_iterator(ck))
      if (fs::exists(e.path() / "COMPLETE")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> metric_steps(const fs::path& p) {
  std::vector<int> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line)["step"].get<int>());
  return out;
}

// Starts `cmd` under sh in the background, its output to log; returns the shell's pid.
pid_t spawn(const std::string& args, const fs::path& log) {
  const std::string cmd = "exec timeout -k 5 120 " + quote(RINGZERO_BINARY) + " " + args + " > " + quote(log.string()) + " 2>&1";
  pid_t sh = fork();
  if (sh == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return sh;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream st(e.path() / "stat");
    std::string line;
    std::getline(st, line);
    const size_t rp = line.rfind(')');
    if (rp == std::string::npos) continue;
    std::istringstream rest(line.substr(rp + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// Running (a zombie waiting for a reaper counts as gone).
bool alive(pid_t p) {
  std::ifstream st("/proc/" + std::to_string(p) + "/stat");
  std::string line;
  if (!std::getline(st, line)) return false;
  const size_t rp = line.rfind(')');
  return rp != std::string::npos && rp + 2 < line.size() && line[rp + 2] != 'Z';
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool wait_for(const std::function<bool()>& cond, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

}  // namespace

TEST_CASE("prepare: a re-run, even one killed midway, leaves one complete set; train refuses a mix") {
  const fs::path out = work_dir() / "reprep";
  const fs::path big = write_text("bigtext", 30, 4000);
  Result r = run("prepare --input " + quote(big.string()) + " --tokenizer byte --shard-tokens 50000 --out " +
                 quote(out.string()));
  REQUIRE(r.status == 0);
  const std::string meta_before = slurp(out / "meta.json");
  // A smaller re-run, killed at once or soon after: the old set stays whole or the new one is in.
  for (int delay_ms : {0, 30, 120}) {
    const fs::path log = work_dir() / "reprep.log";
    pid_t sh = spawn("prepare --input " + quote((work_dir() / "text").string()) +
                         " --tokenizer gpt2 --shard-tokens 1000 --out " + quote(out.string()), log);
    data_dir();  // (text exists)
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    for (pid_t c : children_of(sh)) kill(c, SIGKILL);
    kill(sh, SIGKILL);
    waitpid(sh, nullptr, 0);
    Result t = run("train --model tiny --data " + quote((out / "train_*.bin").string()) +
                   " --batch 2 --seq 16 --steps 1 --threads 1");
    INFO(t.output);
    CHECK(t.status == 0);  // meta.json matches the shards: one complete set
    for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
  // A finished re-run replaces the set and leaves no staging directory behind.
  r = run("prepare --input " + quote((work_dir() / "text").string()) + " --tokenizer byte --out " + quote(out.string()));
  REQUIRE(r.status == 0);
  CHECK(slurp(out / "meta.json") != meta_before);
  for (const auto& e : fs::directory_iterator(work_dir()))
    CHECK(e.path().filename().string().rfind(".reprep.prepare.", 0) != 0);
  // A shard from another run copied in: train names the mismatch.
  fs::copy_file(data_dir() / "train_000000.bin", out / "train_000001.bin");
  Result t = run("train --model tiny --data " + quote((out / "train_*.bin").string()) + " --batch 2 --seq 16 --steps 1");
  CHECK(t.status == 1);
  CHECK(last_line(t.output).find("meta.json lists 1 train shards") != std::string::npos);
  // prepare refuses to swap a directory with files it did not write.
  std::ofstream(out / "notes.txt") << "mine";
  r = run("prepare --input " + quote((work_dir() / "text").string()) + " --out " + quote(out.string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("notes.txt, which prepare did not write") != std::string::npos);
}

TEST_CASE("resume refuses a different shape with the same parameter count") {
  const fs::path ck = work_dir() / "shape_ck";
  Result r = run(tiny_args("--steps 2 --save-dir " + quote(ck.string())));
  REQUIRE(r.status == 0);
  for (const char* flag : {"--heads 2", "--heads 8", "--vocab 300"}) {
    Result b = run(tiny_args(std::string(flag) + " --steps 3 --resume --save-dir " + quote(ck.string())));
    INFO(flag << "\n" << b.output);
    CHECK(b.status == 1);
    CHECK(last_line(b.output).find("holds a model of shape L2 C64 NH4 V257") != std::string::npos);
  }
  CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000002"});  // nothing lost
}

TEST_CASE("a used or unwritable --save-dir is an error before step 1; --overwrite replaces") {
  const fs::path ck = work_dir() / "used_ck";
  REQUIRE(run(tiny_args("--steps 4 --save-every 2 --save-dir " + quote(ck.string()))).status == 0);
  Result b = run(tiny_args("--steps 2 --save-dir " + quote(ck.string())));
  INFO(b.output);
  CHECK(b.status == 1);
  CHECK(b.output.find("step ") == std::string::npos);  // no training happened
  CHECK(last_line(b.output).find("--overwrite") != std::string::npos);
  CHECK(complete_steps(ck).size() == 2);  // the old run's checkpoints are untouched
  Result o = run(tiny_args("--steps 1 --overwrite --save-dir " + quote(ck.string())));
  INFO(o.output);
  CHECK(o.status == 0);
  CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000001"});
  // Under a regular file: cannot be created, found before any step runs.
  const fs::path file = work_dir() / "a_file";
  std::ofstream(file) << "x";
  Result u = run(tiny_args("--steps 2 --save-dir " + quote((file / "ck").string())));
  CHECK(u.status == 1);
  CHECK(u.output.find("step ") == std::string::npos);
  CHECK(last_line(u.output).find("save_dir: cannot create") != std::string::npos);
}

TEST_CASE("a save that fails mid-run is reported, training goes on, and the next save succeeds") {
  const fs::path ck = work_dir() / "fail_ck";
  Result r = run(tiny_args("--nproc-per-node 2 --steps 6 --save-every 2 --save-dir " + quote(ck.string())), 120,
                 "RINGZERO_FAULT_SAVE_STEP=2");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("checkpoint at step 2 NOT saved") != std::string::npos);
  CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000004", "step_00000006"});
  // A failing final save is an error: the run must not end as if the model were kept.
  const fs::path ck2 = work_dir() / "fail_ck2";
  Result f = run(tiny_args("--steps 2 --save-dir " + quote(ck2.string())), 120, "RINGZERO_FAULT_SAVE_STEP=2");
  CHECK(f.status == 1);
  CHECK(last_line(f.output).find("final checkpoint at step 2 could not be saved") != std::string::npos);
}

TEST_CASE("a damaged newest checkpoint: --resume names the newest intact one, --resume auto takes it") {
  const fs::path ck = work_dir() / "damaged_ck";
  const fs::path metrics = work_dir() / "damaged_m.jsonl";
  REQUIRE(run(tiny_args("--steps 6 --save-every 2 --save-dir " + quote(ck.string()) + " --metrics " +
                        quote(metrics.string()))).status == 0);
  {
    std::fstream f(ck / "step_00000006" / "rank_00000.state", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x55');
  }
  Result r = run(tiny_args("--steps 8 --resume --save-dir " + quote(ck.string())));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find("newest checkpoint") != std::string::npos);
  CHECK(last_line(r.output).find("step_00000004 (step 4): --resume auto takes it") != std::string::npos);
  Result a = run(tiny_args("--steps 8 --resume auto --save-dir " + quote(ck.string()) + " --metrics " +
                           quote(metrics.string())));
  INFO(a.output);
  CHECK(a.status == 0);
  CHECK(a.output.find("skipped damaged checkpoint") != std::string::npos);
  CHECK(a.output.find("resumed from") != std::string::npos);
  // The metrics file lists each step once: 5 and 6 of the first run were dropped on resume.
  CHECK(metric_steps(metrics) == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
  // Only damaged checkpoints: an error, not a silent fresh start over them.
  for (const auto& d : complete_steps(ck)) fs::resize_file(ck / d / "model.bin", 100);
  Result n = run(tiny_args("--steps 9 --resume auto --save-dir " + quote(ck.string())));
  CHECK(n.status == 1);
  CHECK(last_line(n.output).find("no older one is intact") != std::string::npos);
  // An empty save dir: auto starts fresh.
  Result e = run(tiny_args("--steps 1 --resume auto --save-dir " + quote((work_dir() / "empty_ck").string())));
  CHECK(e.status == 0);
}

TEST_CASE("SIGTERM to the launcher: every rank finishes its step, a checkpoint is saved, exit non-zero") {
  const fs::path d = work_dir() / "sigterm";
  fs::create_directories(d);
  const fs::path log = d / "log.txt", metrics = d / "m.jsonl";
  pid_t sh = spawn(tiny_args("--nproc-per-node 2 --strategy zero2 --steps 100000 --save-every 1000 --save-dir " +
                             quote((d / "ck").string()) + " --metrics " + quote(metrics.string())),
                   log);
  REQUIRE(wait_for([&] { return metric_steps(metrics).size() >= 3; }, 90));
  std::vector<pid_t> launcher = children_of(sh);
  REQUIRE(launcher.size() == 1);
  REQUIRE(kill(launcher[0], SIGTERM) == 0);
  int st = 0;
  REQUIRE(waitpid(sh, &st, 0) == sh);
  const std::string out = slurp(log);
  INFO(out);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 128 + SIGTERM);
  const std::vector<std::string> saved = complete_steps(d / "ck");
  REQUIRE(saved.size() == 1);
  const int step = std::stoi(saved[0].substr(5));
  CHECK(step == metric_steps(metrics).back());  // the last finished step is the saved one
  CHECK(out.find("run the same command with --resume") != std::string::npos);
  CHECK(out.find(saved[0]) != std::string::npos);
  Result r = run(tiny_args("--nproc-per-node 2 --strategy zero2 --resume --steps " + std::to_string(step + 2) +
                           " --save-dir " + quote((d / "ck").string())));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("resumed from") != std::string::npos);
}

TEST_CASE("a rank stopped during shm rendezvous leaves no segment, and names carry nothing of the token") {
  const std::string token = "0123456789abcdef0123456789abcdef";
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  const fs::path log = work_dir() / "shm_rdv.log";
  const std::string env = "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                          " RINGZERO_JOB_TOKEN=" + token + " RINGZERO_LAUNCHED=1";
  const std::string cmd = "exec env " + env + " " + quote(RINGZERO_BINARY) + " " +
                          tiny_args("--transport shm --comm-timeout 60 --steps 2") + " > " + quote(log.string()) + " 2>&1";
  pid_t rank0 = fork();
  if (rank0 == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Rank 0 creates its inbox, publishes it and waits for rank 1, who never comes.
  const std::string prefix = "ringzero-" + std::to_string(rank0) + "-";
  auto segments = [&] {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator("/dev/shm"))
      if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename().string());
    return out;
  };
  REQUIRE(wait_for([&] { return !segments().empty(); }, 60));
  for (const auto& name : segments()) CHECK(name.find(token.substr(0, 4)) == std::string::npos);
  REQUIRE(kill(rank0, SIGTERM) == 0);
  int st = 0;
  REQUIRE(waitpid(rank0, &st, 0) == rank0);
  CHECK(segments().empty());
}

TEST_CASE("a small /dev/shm is an error naming its size and --transport tcp, not a SIGBUS") {
  // Segments larger than /dev/shm's free space stand in for a 64 MB container /dev/shm.
  struct statvfs v {};
  REQUIRE(statvfs("/dev/shm", &v) == 0);
  const double free_bytes = static_cast<double>(v.f_bavail) * v.f_frsize;
  // Four slots of half the free space each: twice what fits. comm-bench takes up to 64G.
  const double seg = free_bytes / 2;
  if (seg >= 60.0 * (1ull << 30)) {
    WARN("skipped: /dev/shm has more free space than comm-bench's largest segment can exceed");
    return;
  }
  Result r = run("comm-bench --nproc 2 --transport shm --segment-bytes " + std::to_string(static_cast<uint64_t>(seg)) +
                     " --min-bytes 1K --max-bytes 1K --iters 1 --warmup 0", 60);
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("/dev/shm") != std::string::npos);
  CHECK(r.output.find("--transport tcp") != std::string::npos);
  CHECK(r.output.find("signal") == std::string::npos);
}

TEST_CASE("a killed launcher takes its ranks with it") {
  const fs::path d = work_dir() / "orphans";
  fs::create_directories(d);
  const fs::path metrics = d / "m.jsonl";
  pid_t sh = spawn(tiny_args("--nproc-per-node 2 --transport shm --steps 100000 --metrics " + quote(metrics.string())),
                   d / "log.txt");
  REQUIRE(wait_for([&] { return metric_steps(metrics).size() >= 1; }, 90));
  std::vector<pid_t> launcher = children_of(sh);
  REQUIRE(launcher.size() == 1);
  std::vector<pid_t> ranks = children_of(launcher[0]);
  REQUIRE(ranks.size() == 2);
  REQUIRE(kill(launcher[0], SIGKILL) == 0);
  waitpid(sh, nullptr, 0);
  CHECK(wait_for([&] { return !alive(ranks[0]) && !alive(ranks[1]); }, 20));
}
